// `vramtrace diff BASE NEW`: two runs side by side, the change in each peak, the allocation sizes
// whose counts changed most, the largest free block, the allocation site whose bytes changed
// most (when both runs record call stacks), and one sentence naming what explains the difference
// (case C11: same live bytes, a fragmented cache in the resumed run).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "analyses/check_input.h"

namespace vramtrace {

/// One figure in both runs.
struct DiffFigure {
  std::string name;  ///< PyTorch's flat name, e.g. "allocated_bytes.all.peak"
  std::optional<std::int64_t> base;
  std::optional<std::int64_t> now;  ///< the NEW run
  bool bytes = true;                ///< a byte count (else a count)
};

/// An allocation size whose number of allocations differs.
struct SizeCountChange {
  std::uint64_t size = 0;  ///< requested bytes
  std::uint64_t base = 0;
  std::uint64_t now = 0;
};

/// Largest free block (bytes) at a moment, in both runs.
struct FreeBlockFigure {
  std::string when;  ///< "peak", "end", "oom"
  std::optional<std::uint64_t> base;
  std::optional<std::uint64_t> now;
};

/// An allocation site (sites.h: the user's line of the stacks) and its bytes alive at one moment
/// in both runs; a site a run does not have counts 0 bytes there.
struct SiteChange {
  std::string site;  ///< frame_label of the user's line
  std::uint64_t base_bytes = 0;
  std::uint64_t new_bytes = 0;
  std::uint64_t base_blocks = 0;
  std::uint64_t new_blocks = 0;
  std::int64_t change() const noexcept {
    return static_cast<std::int64_t>(new_bytes) - static_cast<std::int64_t>(base_bytes);
  }
};

struct DeviceDiff {
  std::int32_t device = 0;
  std::vector<DiffFigure> peaks;
  std::vector<SizeCountChange> sizes;  ///< largest |count change| first (then bytes), at most 10
  std::vector<FreeBlockFigure> largest_free_block;
  /// The site whose bytes alive at the peak of allocated memory (each run's own peak), and at
  /// the end, changed most (Note [diff sites] in diff.cpp). Unset when sites are not compared
  /// (TraceDiff::sites_compared), when a run does not know that moment, or when no site's bytes
  /// changed; the *_known flags tell the second case from the third.
  std::optional<SiteChange> site_at_peak;
  std::optional<SiteChange> site_at_end;
  bool peak_sites_known = false;
  bool end_sites_known = false;
  std::string explanation;  ///< one sentence (Note [diff explanation] in diff.cpp)
  /// Something changed beyond the noise margin: the explanation is one of rules 1 to 5 or names
  /// a site, the OOM counts differ, or only one run has figures for the device.
  bool changed = false;
};

struct TraceDiff {
  std::string base_path;
  std::string new_path;
  /// Both runs record call stacks, so their allocation sites are compared; else why not
  /// ("BASE records no call stacks", ...).
  bool sites_compared = false;
  std::string sites_reason;
  bool base_has_stacks = false;
  bool new_has_stacks = false;
  std::uint64_t base_lost_events = 0;  ///< events the first trace of each side lost (0 = none)
  std::uint64_t new_lost_events = 0;
  std::vector<DeviceDiff> devices;  ///< devices of either run, sorted
};

/// Compares the first trace of each input per device. `noise_margin_bytes` is the change below
/// which two byte figures count as the same (default: one 2 MiB segment, as check's baseline).
TraceDiff diff_inputs(const CheckInput& base, const CheckInput& now,
                      std::uint64_t noise_margin_bytes = Budgets::kDefaultNoiseMargin);

/// Whether any device changed (DeviceDiff::changed): `vramtrace diff --exit-code` exits 1.
bool diff_changed(const TraceDiff& d);

/// Side-by-side text. Deterministic.
std::string render_diff_text(const TraceDiff& d);
/// {"base", "new", "changed", "devices": [{"device", "peaks": [{name, base, new, change, change_percent}],
/// "sizes": [{size, base, new, change}], "largest_free_block": [{when, base, new}], "sites":
/// {"compared", "reason" (when not compared), "at_peak", "at_end": {site, base_bytes, new_bytes,
/// change, base_blocks, new_blocks} or null (no site changed, or the moment is not known for both
/// runs: "peak_known", "end_known")}, "explanation", "changed"}]}.
nlohmann::json diff_json(const TraceDiff& d);

}  // namespace vramtrace
