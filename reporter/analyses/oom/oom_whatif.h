// What-if replays: a trace replayed on a simulated device under allocator settings, each judged
// by the verdict rule (analyses/oom/verdict.h) within what the input supports
// (analyses/oom/verdict_support.h). The one engine behind `vramtrace oom` (other settings added
// to the trace's own), `vramtrace replay` (--conf), `vramtrace tune --from` and the HTML report,
// so that the same trace, settings and capacity get the same verdict everywhere.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "analyses/oom/oom_cases.h"
#include "analyses/oom/verdict.h"
#include "analyses/oom/verdict_support.h"
#include "analyses/replay.h"
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
/// the run up to the failed request and nothing after it. A setting that gets past the failure
/// may still run out later, so it gets no verdict (verdict_support.h), while one that runs out
/// before the failure does not fit. A trace ends at its OOM when the allocations after its last
/// `oom` entry are at most 1 % of those before it (a handler that allocates a little while it
/// reports the error); a program that caught the error and went on (a smaller batch, the next
/// sample) allocates more than that, and its trace covers what followed. A complete trace of the
/// same program (--full) is what judges the whole run.
/// The rule of Note [a trace that ends at its OOM] on counts: `after` allocations follow the last
/// OOM, `before` precede it. Pure.
constexpr bool ends_at_failure(std::uint64_t before, std::uint64_t after) noexcept { return after * 100 <= before; }

struct FailureCoverage {
  bool ends_at_failure = false;
  std::uint64_t allocs_after = 0;   ///< allocations after the last OOM (all devices)
  std::uint64_t allocs_before = 0;  ///< allocations up to it
  std::uint64_t marks_before = 0;   ///< marks (steps) recorded before it
};
FailureCoverage failure_coverage(const TraceModel& m);

/// One setting's replays and verdict.
struct WhatIf {
  /// The setting as asked for: PYTORCH_CUDA_ALLOC_CONF text; "" = the trace's own settings
  /// (`oom`) or PyTorch's defaults (`replay --conf ''`).
  std::string settings;
  std::string conf;                   ///< the settings replayed (the trace's own plus `settings` for `oom`)
  bool own = false;                   ///< the settings replayed are the trace's own
  bool shown = true;                  ///< false for the trace's own settings replayed only to check the OOM
  Judgement judgement;                ///< the worst of its devices' (worse_of)
  std::vector<ReplayResult> results;  ///< per device, on the capacity
  std::vector<Judgement> per_device;  ///< judge() of each of `results`
  std::string error;                  ///< the setting was refused (message), empty otherwise
};

/// What the replays ran on and what they cover.
enum class WhatIfCovers : std::uint8_t {
  whole_trace,  ///< the trace goes on after its failures (or has none): the replay covers the run
  to_failure,   ///< the trace ends at its OOM: the rest of the run was never recorded
  full_trace,   ///< a complete trace of the same program (--full) was replayed instead
};
const char* whatif_covers_name(WhatIfCovers c) noexcept;  ///< "whole_trace", "to_failure", "full_trace"

/// The what-if replays of one trace.
struct WhatIfRun {
  std::vector<WhatIf> rows;  ///< in the order asked (the trace's own first for `oom`); empty: no replay
  WhatIfCapacity capacity;   ///< the replays ran on capacity.bytes (a 1 TiB stand-in when unknown)
  std::uint64_t replayed_capacity_bytes = 0;
  WhatIfCovers covers = WhatIfCovers::whole_trace;
  std::string full_path;  ///< the --full trace, when given
  /// to_failure: allocations after the last OOM (Note [a trace that ends at its OOM]); marks
  /// (steps) recorded before it.
  std::uint64_t allocs_after_failure = 0;
  std::uint64_t marks_before_failure = 0;
  /// No verdict on any setting, and why (verdict_support.h: the trace, or its replay, cannot
  /// support one); every row's judgement is withheld then.
  std::optional<Withheld> withheld;
  /// The replays cover only part of the run: settings that get through it have no verdict.
  std::optional<Withheld> partial;
  /// The trace's own settings run out of memory where the trace did (false when the trace
  /// recorded an OOM that they do not reproduce).
  bool reproduces = true;
  std::vector<std::string> notes;     ///< what the replays cover, the --full check
  std::vector<std::string> warnings;  ///< what the reader must know beside the verdicts
  // About the replayed trace (TRACE or the --full trace).
  TraceHeader header;
  std::uint64_t events = 0;
  std::uint64_t alloc_requests = 0;
  bool incomplete = false;
  std::uint64_t lost_events = 0;
  std::vector<std::string> replay_notes;  ///< ReplayReport::notes

  /// Rows shown to people (WhatIf::shown).
  std::vector<const WhatIf*> shown_rows() const;
};

/// What run_whatifs takes besides the trace.
struct WhatIfOptions {
  /// A complete trace of the same program (--full): replayed instead of the trace, so that the
  /// verdicts judge the whole run. Empty: the trace itself.
  std::string full_path;
  /// The settings to replay. Empty: "" and whatif_settings() (`oom`).
  std::vector<std::string> settings;
  /// Each setting replaces the trace's own ("" = PyTorch's defaults), as `replay --conf` takes
  /// them; false: each is added to the trace's own ("" = the trace's own), as `oom` tries them.
  bool settings_replace_own = false;
  /// --capacity (or tune's --limit): the device to replay on; nullopt: whatif_capacity's choice.
  std::optional<std::uint64_t> capacity_bytes;
  /// Replay progress (ReplayOptions::progress).
  ReplayOptions replay;
};

/// Capacity when neither --capacity nor the trace gives one: the replays still run, for their
/// figures, and no verdict is given.
inline constexpr std::uint64_t kStandInCapacityBytes = 1ull << 40;

/// Replays `path` (reopened), or `options.full_path`, under each setting on the capacity and on
/// the capacity plus each setting's error bound, and judges each device's replays with judge(),
/// within what trace_support, setting_support and reproduction_support allow. A setting the
/// allocator rejects is a row with `error`. The trace's own settings are replayed too (a row not
/// shown) when the trace recorded an OOM and no row asks for them. Throws TraceError on
/// unreadable input.
WhatIfRun run_whatifs(const std::string& path, const TraceModel& m, const WhatIfOptions& options = {});

/// The `vramtrace tune` command line that checks the verdicts on the real program: every shown
/// setting but the trace's own that is a tune_candidate(), under `--limit limit_bytes` (the cap
/// the program ran under: a memory cap counts the CUDA context, where the replays' capacity
/// leaves it out), then `command` (the program's command line; the placeholder YOUR_COMMAND...
/// when empty). Empty when no such setting exists, `limit_bytes` is 0, or no verdict holds for
/// the trace as a whole. Pure.
std::string tune_command(const WhatIfRun& run, std::uint64_t limit_bytes, const std::string& command);

/// tune_command for a trace's replays: the cap is `capacity` (--capacity), else the trace's own
/// cap, else its device's total; the command is the program's command line as the shim's trace
/// (or the tensor level's companion trace) records it. Reads the companion's header only.
std::string tune_command_for(const WhatIfRun& run, const TraceModel& m, const std::vector<OomCase>& cases,
                             std::optional<std::uint64_t> capacity);

/// Applies the replays to the diagnoses: a capacity verdict says which settings got past the
/// failure (Note [what capacity says about settings], diagnosis.cpp), or that none did, in the
/// words of the replays' table.
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
