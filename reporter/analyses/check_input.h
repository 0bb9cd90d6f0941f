// Inputs of `vramtrace check` and `vramtrace diff`: a trace (any format open_trace reads) or a
// `vramtrace summary --json` document, turned into typed figures (figures.h), the per-device
// measures and, for traces, the step series and the allocation size counts.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "analyses/budgets.h"
#include "analyses/figures.h"
#include "analyses/sites.h"
#include "analyses/step_series.h"

namespace vramtrace {

/// Per device, what only a pass over the events gives (a summary document has none of it).
struct DeviceEventFacts {
  std::int32_t device = 0;
  std::map<std::uint64_t, std::uint64_t> alloc_count_by_size;  ///< requested bytes -> allocs
  /// The largest single request and what preceded it: allocations freed again before it
  /// (temporaries) and allocations still live when it came.
  std::uint64_t largest_request_bytes = 0;
  std::uint64_t frees_before_largest = 0;
  std::uint64_t live_before_largest = 0;
  std::uint64_t allocs_before_largest = 0;
  std::uint64_t live_bytes_before_largest = 0;  ///< requested bytes live when it came
  /// The first OOM that reached the program (an `oom` entry of fate OomFate::oom; Note [one OOM
  /// per failed request]): requested bytes live, frees and allocations seen before it (from the
  /// events), and the allocator's state (from the trace model). has_oom false without one (an OOM
  /// the trace records without an entry has no moment: DeviceFigures::num_ooms still counts it).
  bool has_oom = false;
  std::uint64_t live_bytes_at_oom = 0;
  std::uint64_t frees_before_oom = 0;
  std::uint64_t allocs_before_oom = 0;     ///< the allocation index of the failed request (0-based)
  std::uint64_t sizes_hash_at_oom = 0;     ///< extend_sizes_hash of the allocations before it
  std::uint64_t same_size_before_oom = 0;  ///< allocations of the failed request's size before it
  std::uint64_t oom_request_bytes = 0;
  std::uint64_t oom_device_free_bytes = 0;
  std::int64_t oom_allocated_bytes = 0;
  std::int64_t oom_reserved_bytes = 0;
  std::uint64_t oom_largest_free_block_bytes = 0;
  std::uint64_t allocs = 0;  ///< allocations of the device in the whole trace
  /// Allocations before the last OOM that reached the program (0 without one): with `allocs`,
  /// whether the run went on after it (Note [diff explanation], rule 3).
  std::uint64_t allocs_before_last_oom = 0;
};

/// Per device of an input's first trace, every allocation site's bytes at the peak of allocated
/// memory and at the end (sites.h: SitesAt::all), for diff.
struct DeviceSiteTotals {
  std::int32_t device = 0;
  std::optional<std::vector<SiteBytes>> at_peak;  ///< unset when the state at the peak is not known
  std::optional<std::vector<SiteBytes>> at_end;   ///< unset when a summary document does not list it
};

/// The program's state right before one of its allocations on a device (after every free since
/// the allocation before), for lining two runs up at the same allocation (diff, Note [diff
/// explanation]).
struct AllocationPoint {
  std::uint64_t allocs = 0;              ///< allocations made before it (its 0-based index)
  std::uint64_t live_bytes = 0;          ///< requested bytes of the allocations live then
  std::uint64_t sizes_hash = 0;          ///< hash of the requested sizes of those allocations, in order
  std::uint64_t frees = 0;               ///< frees of allocations before it
  std::uint64_t next_request_bytes = 0;  ///< the size the allocation itself asked for
};

/// A hash of a sequence of requested sizes, extended by one more size (FNV-1a over the 8 bytes):
/// two runs whose hashes agree after k allocations made the same k requests (w.h.p.). Pure.
constexpr std::uint64_t extend_sizes_hash(std::uint64_t hash, std::uint64_t size) noexcept {
  for (int i = 0; i < 8; ++i) hash = (hash ^ ((size >> (8 * i)) & 0xff)) * 0x100000001b3ull;
  return hash;
}
inline constexpr std::uint64_t kEmptySizesHash = 0xcbf29ce484222325ull;

/// Two places in another run where a failed request may line up (Note [diff explanation]): right
/// before its allocation number `at_index`, and right before its allocation number
/// `same_size_index` (0-based) among those of `request_bytes` (a requested size, or a size that
/// rounds to it by PyTorch's round_size: PyTorch's `oom` entries record the rounded size).
struct AlignmentPoints {
  std::optional<AllocationPoint> at_index;      ///< unset: the device never made that allocation
  std::optional<AllocationPoint> at_same_size;  ///< unset: it made fewer of that size
};

/// One pass over the trace at `path` for `device`'s AlignmentPoints. Throws TraceError.
AlignmentPoints alignment_points(const std::string& path, std::int32_t device, std::uint64_t at_index,
                                 std::uint64_t request_bytes, std::uint64_t same_size_index);

/// One loaded input.
struct CheckInput {
  std::string path;
  bool is_summary = false;           ///< a summary --json document, not a trace
  std::vector<TraceFigures> traces;  ///< one trace, or each trace the summary document lists
  std::vector<DeviceMeasures> measures;
  std::vector<DeviceSteps> steps;       ///< traces only
  std::vector<DeviceEventFacts> facts;  ///< traces only
  /// The first trace's allocation sites (a trace's, or those a summary document lists: its
  /// "sites" with "all_sites"); `has_stacks` false, with the reason in `no_stacks_reason`, when
  /// the trace records no call stacks or the document lists no sites' totals.
  bool has_stacks = false;
  std::string no_stacks_reason;
  std::vector<DeviceSiteTotals> sites;
};

/// True when `path` holds one JSON object with a "traces" array (a summary document) rather than
/// a trace. Reads at most the first 64 MiB. Never throws.
bool is_summary_document(const std::string& path);

/// Loads `path`: a summary document read once into figures and sites, a trace through open_trace
/// with one pass that builds the trace model (its figures and sites), the step series and the
/// event facts; fits growth per device (Note [growth detection]). `trace_index` is stored in the
/// measures. Throws TraceError or BudgetError (both: unusable input, exit 2).
CheckInput load_check_input(const std::string& path, std::size_t trace_index = 0);

}  // namespace vramtrace
