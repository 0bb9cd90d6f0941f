// What-if replays for `vramtrace oom`: the whole trace replayed on a simulated device under other
// allocator settings (expandable segments, max_split_size_mb, roundup_power2_divisions), with each
// failed request of the trace (its `oom` entries) replayed as an allocation at that moment.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "analyses/oom/oom_report.h"
#include "model/trace_model.h"
#include "readers/open_trace.h"

namespace vramtrace {

/// Wraps a reader: every `oom` record becomes an alloc of its size at a synthetic address (high
/// addresses the trace never uses) followed at once by its free, so that a replay asks the
/// simulated device for the request that failed. Other records pass through unchanged. With
/// `put_back` (sorted 0-based indices of the inner reader's records), only those `oom` records
/// are put back: the OOMs, not the failed attempts the program retried (Note [one OOM per failed
/// request]: a survived request's allocation is in the trace already).
class OomAsAllocReader : public TraceReader {
 public:
  explicit OomAsAllocReader(TraceReader& inner, std::optional<std::vector<std::uint64_t>> put_back = std::nullopt)
      : inner_(inner), put_back_(std::move(put_back)) {}
  const TraceHeader& header() const override { return inner_.header(); }
  bool next(TraceRecord& out) override;
  std::string position() const override { return inner_.position(); }
  bool incomplete() const override { return inner_.incomplete(); }
  std::string incomplete_reason() const override { return inner_.incomplete_reason(); }
  std::uint64_t lost_events() const override { return inner_.lost_events(); }
  std::uint64_t bytes_read() const override { return inner_.bytes_read(); }
  std::uint64_t bytes_total() const override { return inner_.bytes_total(); }

 private:
  TraceReader& inner_;
  std::vector<TraceRecord> queue_;
  std::uint64_t injected_ = 0;
  std::optional<std::vector<std::uint64_t>> put_back_;
  std::uint64_t read_ = 0;  // records read from inner_
};

/// The simulated device of the what-ifs and where its size comes from.
struct WhatIfCapacity {
  std::uint64_t bytes = 0;  ///< 0: unknown (no OOM figures, no cap, no device total)
  std::string source;       ///< in words, for the report
};

/// The simulated capacity for the what-ifs: `capacity` (--capacity) if given; else the smallest of
/// what the allocator could reach at the first OOM (reserved + free on the device, which leaves
/// out what the CUDA context and other users held), the trace's cap on that device
/// (TraceHeader::cap_of) and the device total. Pure.
WhatIfCapacity whatif_capacity(const TraceModel& m, const std::vector<OomCase>& cases,
                               std::optional<std::uint64_t> capacity);

/// The settings tried, appended to the trace's own: "" (own), "expandable_segments:True",
/// "max_split_size_mb:20/128/512", "roundup_power2_divisions:4".
std::vector<std::string> whatif_settings();

/// Note [a trace that ends at its OOM]
/// A program that dies of its OOM leaves a trace that stops at the failure (the history written
/// by the OOM observer) or goes on only with the frees of its unwinding: the replay then covers
/// the run up to the failed request and nothing after it, and "fits" means "gets past the
/// failure", not "runs to the end". A trace ends at its OOM when the allocations after its last
/// `oom` entry are at most 1 % of those before it (a handler that allocates a little while it
/// reports the error); a program that caught the error and went on (a smaller batch, the next
/// sample) allocates more than that, and its trace covers what followed. The verdict then says
/// what it covers, and a complete trace of the same program (--full) is what judges the whole run.
/// The rule of Note [a trace that ends at its OOM] on counts: `after` allocations follow the last
/// OOM, `before` precede it. Pure.
constexpr bool ends_at_failure(std::uint64_t before, std::uint64_t after) noexcept { return after * 100 <= before; }

/// Wraps a reader and counts, as records pass: alloc entries, oom entries, and the allocations
/// before the last oom. For `vramtrace replay`, which has no model to ask (failure_coverage).
class FailureCounter : public TraceReader {
 public:
  explicit FailureCounter(TraceReader& inner) : inner_(inner) {}
  const TraceHeader& header() const override { return inner_.header(); }
  bool next(TraceRecord& out) override {
    if (!inner_.next(out)) return false;
    if (out.action == Action::alloc) ++allocs_;
    if (out.action == Action::oom) {
      ++ooms_;
      allocs_before_last_oom_ = allocs_;
    }
    return true;
  }
  std::string position() const override { return inner_.position(); }
  bool incomplete() const override { return inner_.incomplete(); }
  std::string incomplete_reason() const override { return inner_.incomplete_reason(); }
  std::uint64_t lost_events() const override { return inner_.lost_events(); }
  std::uint64_t bytes_read() const override { return inner_.bytes_read(); }
  std::uint64_t bytes_total() const override { return inner_.bytes_total(); }
  const Snapshot* final_state() const override { return inner_.final_state(); }

  std::uint64_t allocs() const noexcept { return allocs_; }
  std::uint64_t ooms() const noexcept { return ooms_; }
  std::uint64_t allocs_before_last_oom() const noexcept { return allocs_before_last_oom_; }
  /// The trace had an OOM and ends at it (ends_at_failure). Known once next() returned false.
  bool ends_at_failure() const noexcept {
    return ooms_ > 0 && vramtrace::ends_at_failure(allocs_before_last_oom_, allocs_ - allocs_before_last_oom_);
  }

 private:
  TraceReader& inner_;
  std::uint64_t allocs_ = 0;
  std::uint64_t ooms_ = 0;
  std::uint64_t allocs_before_last_oom_ = 0;
};

struct FailureCoverage {
  bool ends_at_failure = false;
  std::uint64_t allocs_after = 0;   ///< allocations after the last OOM (all devices)
  std::uint64_t allocs_before = 0;  ///< allocations up to it
  std::uint64_t marks_before = 0;   ///< marks (steps) recorded before it
};
FailureCoverage failure_coverage(const TraceModel& m);

/// What run_whatifs takes besides the trace.
struct WhatIfOptions {
  /// A complete trace of the same program (--full): replayed instead of the trace, so that the
  /// verdicts judge the whole run. Empty: the trace itself.
  std::string full_path;
  /// The error bound; 0: whatif_error_bound(capacity).
  std::uint64_t bound_bytes = 0;
  /// The settings to replay besides the trace's own, each added to the trace's settings; empty:
  /// whatif_settings().
  std::vector<std::string> settings;
};

/// The `vramtrace tune` command line that checks `run`'s verdicts on the real program: every
/// setting replayed without an error that did not come out "does not fit", under `--limit
/// limit_bytes` (the cap the program ran under: a memory cap counts the CUDA context, where the
/// replays' capacity leaves it out), then `command` (the program's command line; the placeholder
/// YOUR_COMMAND... when empty). Empty when no such setting exists or `limit_bytes` is 0. Pure.
std::string tune_command(const WhatIfRun& run, std::uint64_t limit_bytes, const std::string& command);

/// Replays `path` (reopened), or `options.full_path`, under each setting on `capacity` and on
/// capacity + the error bound, and judges each (analyses/oom/verdict.h). A setting that the allocator
/// rejects, or a replay error, is reported in WhatIf::error. The result says what the replays
/// cover, whether the trace's own row reproduces the trace's OOM, and, with a full trace, whether
/// it matches the trace up to the failure. Throws TraceError on unreadable input.
WhatIfRun run_whatifs(const std::string& path, const TraceModel& m, const WhatIfCapacity& capacity,
                      const WhatIfOptions& options = {});

/// Applies the replays to the diagnoses: a capacity verdict says which settings got past the
/// failure (Note [what capacity says about settings], diagnosis.cpp), or that none did.
void note_replays_in_cases(std::vector<OomCase>& cases, const WhatIfRun& run);

/// How many allocations of `full` equal those of `trace` from the start, up to `trace`'s first
/// `oom` entry (alloc entries compared by device and requested size, in order), and how many
/// `trace` has there. Reads both; throws TraceError on unreadable input.
struct TraceMatch {
  std::uint64_t matching = 0;
  std::uint64_t compared = 0;  ///< the trace's allocations before its first OOM
  std::uint64_t full_allocs = 0;
  std::uint64_t full_ooms = 0;  ///< oom entries in the full trace
  bool full_incomplete = false;
  std::string first_difference;  ///< words, empty when the prefix matches
};
TraceMatch match_traces(const std::string& trace, const std::string& full);

}  // namespace vramtrace
