// `vramtrace oom`: post-mortem of each OOM in a trace (and of the last state of a trace that ends
// abruptly): the figures, the diagnosis, and replays under other allocator settings.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "analyses/diagnosis.h"
#include "model/trace_model.h"

namespace vramtrace {

/// One post-mortem: an OOM event, or the trace's last state (request unknown).
struct OomCase {
  std::int32_t device = 0;
  bool last_state = false;  ///< the abrupt end of the trace, not an oom event
  std::uint64_t event_index = 0;
  std::int64_t time_ns = 0;  ///< relative to the device's first event
  OomFigures figures;
  /// The allocator's num_alloc_retries at the failure (vramtrace traces from format 1.1); empty
  /// when the trace does not record it (PyTorch's history has no retry event).
  std::optional<std::uint64_t> retries;
  Diagnosis diagnosis;
  const StateAt* state = nullptr;   ///< points into the model
  std::uint32_t request_stack = 0;  ///< the refused request's call stack (OomRecord::stack); 0 = none
};

/// The post-mortems of a model: every OOM event, plus the last state when the trace is
/// incomplete and ended without an OOM event after its last allocation.
std::vector<OomCase> oom_cases(const TraceModel& m);

/// One what-if replay result.
struct WhatIf {
  std::string settings;  ///< PYTORCH_CUDA_ALLOC_CONF text ("" = the trace's own)
  bool fits = false;     ///< no OOM in the replay
  std::int64_t peak_reserved = 0;
  std::int64_t peak_allocated = 0;
  std::int64_t margin_bytes = 0;  ///< capacity - peak reserved (negative: short by that much)
  std::uint64_t ooms = 0;
  std::string error;  ///< replay failed (message), empty otherwise
};

/// Text of the post-mortems (and what-ifs, if any). Ends with a newline.
std::string render_oom_text(const TraceModel& m, const std::vector<OomCase>& cases, const std::vector<WhatIf>& whatifs,
                            std::uint64_t capacity_bytes);
nlohmann::json oom_json(const TraceModel& m, const std::vector<OomCase>& cases, const std::vector<WhatIf>& whatifs,
                        std::uint64_t capacity_bytes);

}  // namespace vramtrace
