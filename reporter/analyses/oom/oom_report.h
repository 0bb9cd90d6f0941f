// `vramtrace oom`: post-mortem of each OOM in a trace (and of the last state of a trace that ends
// abruptly): the figures, the diagnosis, and replays under other allocator settings.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "analyses/oom/diagnosis.h"
#include "analyses/oom/verdict.h"
#include "model/trace_model.h"

namespace vramtrace {

/// One post-mortem: an OOM (an `oom` entry whose error reached the program, or an OOM the trace
/// records without an entry), or the trace's last state (request unknown).
struct OomCase {
  std::int32_t device = 0;
  bool last_state = false;  ///< the abrupt end of the trace, not an OOM
  /// An OOM the trace records without an `oom` entry (OomCount::without_entry): its moment and
  /// the allocator's state at it are unknown; figures and diagnosis come from what was recorded
  /// (the message, PyTorch's observer), `state` is null.
  const OomWithoutEntry* without_entry = nullptr;
  std::uint64_t event_index = 0;
  std::int64_t time_ns = 0;  ///< relative to the device's first event
  OomFigures figures;
  /// Failed attempts of this request (Note [one OOM per failed request]): more than 1 when the
  /// program released memory and tried again before the error reached it.
  std::uint32_t attempts = 1;
  /// The program's retries up to this OOM (its own repeated attempts included): every failed
  /// allocation it tried again so far; empty when the trace does not say (PyTorch's history).
  std::optional<std::uint64_t> retries;
  /// The traced allocator's own num_alloc_retries at the failure (vramtrace traces from format
  /// 1.1: the shim's allocator released its cache and asked the device again before it failed),
  /// not the program's retries; empty when not recorded.
  std::optional<std::uint64_t> allocator_retries;
  Diagnosis diagnosis;
  const StateAt* state = nullptr;   ///< points into the model; null for without_entry
  std::uint32_t request_stack = 0;  ///< the refused request's call stack (OomRecord::stack); 0 = none
};

/// What the post-mortems take from the command line.
struct OomOptions {
  /// `--capacity`: a cap the trace may not record (a MIG slice, a container, a card the run is
  /// meant for). It joins the trace's own caps (TraceHeader::cap_of) in the diagnosis; the
  /// smallest wins.
  std::optional<std::uint64_t> capacity_bytes;
};

/// The post-mortems of a model: every OOM (DeviceModel::oom_count: the entries that reached the
/// program, then those the trace records without an entry), plus the last state when the trace is
/// incomplete and ended without an OOM entry after its last allocation. Failed allocations the
/// program retried are not post-mortems; retried_failures lists them. Each diagnosis uses every
/// limit known: the device total (capped under vramtrace run --limit), the trace's caps, and
/// `options.capacity_bytes`.
std::vector<OomCase> oom_cases(const TraceModel& m, const OomOptions& options = {});

/// A failed allocation the program tried again (OomFate::survived or repeated).
struct RetriedFailure {
  std::int32_t device = 0;
  std::uint64_t event_index = 0;
  std::int64_t time_ns = 0;  ///< relative to the device's first event
  std::uint64_t request_bytes = 0;
  OomFate fate = OomFate::survived;
};

/// Every retried failure of the model, in trace order.
std::vector<RetriedFailure> retried_failures(const TraceModel& m);

/// One what-if replay result: one setting, its verdict with its margin and the error bound
/// (analyses/oom/verdict.h, Note [what-if error bound]).
struct WhatIf {
  std::string settings;  ///< PYTORCH_CUDA_ALLOC_CONF text ("" = the trace's own)
  WhatIfVerdict verdict = WhatIfVerdict::failed;
  bool fits = false;  ///< no OOM in the replay on the capacity (before the bound is applied)
  std::int64_t peak_reserved = 0;
  std::int64_t peak_allocated = 0;
  std::int64_t margin_bytes = 0;  ///< capacity - peak reserved (0 or more: the simulated device caps it)
  /// Marginal with an OOM: how far the replay on capacity + bound went past the capacity.
  std::optional<std::uint64_t> shortfall_bytes;
  std::uint64_t ooms = 0;  ///< failed allocations on the capacity
  std::string error;       ///< replay failed (message), empty otherwise
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
  std::vector<WhatIf> rows;  ///< the trace's own settings first; empty: no replay
  std::uint64_t capacity_bytes = 0;
  std::string capacity_source;  ///< where the capacity comes from, in words
  std::uint64_t bound_bytes = 0;
  WhatIfCovers covers = WhatIfCovers::whole_trace;
  std::string full_path;  ///< the --full trace, when given
  /// to_failure: allocations after the last OOM (Note [a trace that ends at its OOM]); marks
  /// (steps) recorded before it.
  std::uint64_t allocs_after_failure = 0;
  std::uint64_t marks_before_failure = 0;
  /// The trace's own row does not fit although the trace recorded an OOM: the replay reproduces it.
  bool reproduces = true;
  std::vector<std::string> notes;     ///< what the replays cover, the --full check
  std::vector<std::string> warnings;  ///< what makes the verdicts untrustworthy
};

/// Text of the what-if replays: what they ran on and cover, the table, one verdict sentence per
/// setting, warnings and notes. Empty when `run` has no rows.
std::string render_whatif_text(const WhatIfRun& run);

/// Text of the post-mortems (and what-ifs, if any). Ends with a newline.
std::string render_oom_text(const TraceModel& m, const std::vector<OomCase>& cases, const WhatIfRun& whatifs);
nlohmann::json oom_json(const TraceModel& m, const std::vector<OomCase>& cases, const WhatIfRun& whatifs);

}  // namespace vramtrace
