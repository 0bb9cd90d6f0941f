// The post-mortems of `vramtrace oom`: each OOM of a trace (and the last state of a trace that
// ends abruptly), with its figures and diagnosis. Rendered by analyses/oom/oom_report.h.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "analyses/oom/diagnosis.h"
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

}  // namespace vramtrace
