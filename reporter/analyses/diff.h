// `vramtrace diff BASE NEW`: two runs side by side, the change in each peak, the allocation sizes
// whose counts changed most, the largest free block, and one sentence naming what explains the
// difference (case C11: same live bytes, a fragmented cache in the resumed run).
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

struct DeviceDiff {
  std::int32_t device = 0;
  std::vector<DiffFigure> peaks;
  std::vector<SizeCountChange> sizes;  ///< largest |count change| first (then bytes), at most 10
  std::vector<FreeBlockFigure> largest_free_block;
  std::string explanation;  ///< one sentence (Note [diff explanation] in diff.cpp)
};

struct TraceDiff {
  std::string base_path;
  std::string new_path;
  std::vector<DeviceDiff> devices;  ///< devices of either run, sorted
};

/// Compares the first trace of each input per device. `noise_margin_bytes` is the change below
/// which two byte figures count as the same (default: one 2 MiB segment, as check's baseline).
TraceDiff diff_inputs(const CheckInput& base, const CheckInput& now,
                      std::uint64_t noise_margin_bytes = Budgets::kDefaultNoiseMargin);

/// Side-by-side text. Deterministic.
std::string render_diff_text(const TraceDiff& d);
/// {"base", "new", "devices": [{"device", "peaks": [{name, base, new, change, change_percent}],
/// "sizes": [{size, base, new, change}], "largest_free_block": [{when, base, new}], "explanation"}]}.
nlohmann::json diff_json(const TraceDiff& d);

}  // namespace vramtrace
