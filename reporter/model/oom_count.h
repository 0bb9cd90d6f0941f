// How many OOMs a run had and how many failed allocations it retried: one rule, applied once per
// trace by the trace model, read by every command (summary, oom, report, check, diff and the end
// screen of `vramtrace run`).
//
// Note [one OOM per failed request]
// An OOM is an error that reached the program: one per request that failed for good. A trace
// says so in several places, and the rule reconciles them per device.
//
// PyTorch's own history (torchtrace, snapshot pickles). PyTorch writes an `oom` entry only when it
// gives up and raises OutOfMemoryError: c10/cuda/CUDACachingAllocator.cpp, malloc() tries the
// device (alloc_block), then frees cached blocks of the right size and tries again, then frees
// every unsplit cached block and tries a last time (num_alloc_retries += 1 for that last try);
// only if all fail does it record TraceEntry::OOM, add 1 to num_ooms, call the OOM observers and
// throw. So every entry is one OOM. A run that died of one can still hold no entry (the history's
// ring ended before it, the snapshot was taken before the failure, or
// reset_accumulated_memory_stats cleared the counter), while the header or the sidecar records
// it: num_ooms in the recorded statistics, the message, the observer's figures. The count is the
// largest of the entries, the recorded num_ooms and the recorded OOMs; those without an entry are
// OOMs whose moment is unknown (what is known of them is kept: RecordedOom). Retries are
// PyTorch's num_alloc_retries where recorded, else unknown (never 0).
//
// The shim's trace (vramtrace format). An `oom` entry is one failed device allocation of the
// traced allocator, written after that allocator released its own cache and retried. The
// program above may survive it: PyTorch frees cached segments and calls cudaMalloc again with the
// same size, up to three times per request, and raises only when the last one fails; a program
// with its own retry does the same. So the entries of one request are grouped: per device and
// thread, consecutive failures of the same size through the same entry point (the same call
// again), with nothing but frees of that thread between them. A group is settled by that
// thread's next allocation:
//  - the same size succeeds (an `alloc`, or the exact request forwarded past the cache after
//    Note [no spurious OOM] in shim/src/policies/driver_memory.cpp): the program survived; every
//    failure of the group was retried (OomFate::survived);
//  - another size, or the end of the trace: the error reached the program; the group's last
//    failure is one OOM (OomFate::oom), its earlier ones were retried (OomFate::repeated).
// A plain CUDA program's single failed cudaMalloc is one OOM and no retry. Retries are the failed
// allocations the program tried again, as PyTorch defines num_alloc_retries ("failed cudaMalloc
// calls that result in a cache flush and retry"): survived + repeated, always known. The
// trailer's num_ooms counts the traced allocator's failures, that is the entries, not OOMs.
//
// This is the one place the rule is applied (FailedRequestGrouper while the model streams,
// reconcile_oom_count at its end); everything else reads DeviceModel::oom_count.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "vramtrace/trace/reader.h"

namespace vramtrace {

/// How one `oom` entry ended (Note [one OOM per failed request]).
enum class OomFate : std::uint8_t {
  oom,       ///< the last failure of a request that never succeeded: its error reached the program
  repeated,  ///< a failure the program tried again, and that attempt failed too
  survived,  ///< a failure the program tried again with success
};

/// "oom", "repeated", "survived".
const char* oom_fate_name(OomFate f) noexcept;

/// An entry's fate and its place among the failed attempts of its request.
struct OomOutcome {
  OomFate fate = OomFate::oom;
  std::uint32_t attempt = 1;   ///< 1-based position among the request's failed attempts
  std::uint32_t attempts = 1;  ///< failed attempts of the request
};

/// An OOM known from what the trace recorded, with no `oom` entry to place it (its moment and
/// the allocator's state at it are unknown).
struct OomWithoutEntry {
  /// Where it is known from, in words: "num_ooms in the recorded statistics", "the message in
  /// the header", "PyTorch's OOM observer (the sidecar)".
  std::string source;
  /// What is known of it, when a RecordedOom describes it; unset when only a counter says it.
  std::optional<RecordedOom> recorded;
};

/// Where a count of retries comes from.
enum class RetriesFrom : std::uint8_t {
  unknown,          ///< nothing in the trace says
  oom_entries,      ///< the grouped `oom` entries of a vramtrace trace
  recorded,         ///< PyTorch's num_alloc_retries recorded at the end of the run
  recorded_at_oom,  ///< PyTorch's num_alloc_retries recorded at its last OOM (the observer's)
};

/// In words for a report: "", "the oom entries", "recorded by PyTorch", "recorded by PyTorch at
/// its last OOM".
const char* retries_from_text(RetriesFrom f) noexcept;

/// The OOMs and retries of one device, reconciled from every source the trace has.
struct OomCount {
  std::uint64_t ooms = 0;  ///< errors that reached the program
  /// Failed allocations the program retried (PyTorch's num_alloc_retries); unset = unknown.
  std::optional<std::uint64_t> retries;
  RetriesFrom retries_from = RetriesFrom::unknown;
  std::uint64_t entries = 0;                   ///< `oom` entries of the device in the trace
  std::uint64_t survived = 0;                  ///< entries of requests that then succeeded
  std::uint64_t repeated = 0;                  ///< entries followed by another failed attempt of the request
  std::vector<OomWithoutEntry> without_entry;  ///< ooms - (entries that are OOMs), oldest first
  /// A recorded figure that disagrees with the entries in a way the rule does not explain (the
  /// trailer counts more failures than the trace has entries), in words; empty otherwise.
  std::vector<std::string> notes;
};

/// Groups a vramtrace trace's `oom` entries into requests as the trace streams (Note [one OOM per
/// failed request]) and settles each entry's fate. Feed every record in order, with the outcomes
/// of the record's device: `oom_index` is the index the model gives the entry in its device's
/// list (records that are oom), and the outcome lands at that index (the vector grows as
/// needed). Not thread-safe.
class FailedRequestGrouper {
 public:
  void add(const TraceRecord& r, std::uint64_t oom_index, std::vector<OomOutcome>& outcomes);
  /// Settles the requests of `device` still open at the end of the trace (their errors reached
  /// the program).
  void finish(std::int32_t device, std::vector<OomOutcome>& outcomes);

 private:
  struct Open {
    std::uint64_t size = 0;
    std::uint32_t entry_point = 0;
    std::vector<std::uint64_t> entries;  // oom indices, oldest first
  };
  static std::uint64_t key(std::int32_t device, std::uint32_t thread) noexcept {
    return (static_cast<std::uint64_t>(static_cast<std::uint32_t>(device)) << 32) | thread;
  }
  static void settle(Open& o, bool succeeded, std::vector<OomOutcome>& outcomes);
  std::unordered_map<std::uint64_t, Open> open_;  // by (device, thread)
};

/// The count of one device (Note [one OOM per failed request]). `outcomes` are those of the
/// device's entries, oldest first (vramtrace traces: from FailedRequestGrouper; other formats:
/// ignored, each entry is an OOM), `entry_times_ns` their times, to tell which recorded OOMs
/// have an entry. `header` gives the recorded statistics and OOMs. Pure.
OomCount reconcile_oom_count(const TraceHeader& header, std::int32_t device, const std::vector<OomOutcome>& outcomes,
                             const std::vector<std::int64_t>& entry_times_ns);

}  // namespace vramtrace
