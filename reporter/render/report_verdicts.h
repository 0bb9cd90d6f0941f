// The first screen of the report: each OOM's diagnosis and the verdicts of the allocator settings
// replayed on it, as `vramtrace oom` gives them (one engine: analyses/oom/oom_whatif.h).
#pragma once

#include <cstddef>
#include <vector>

#include <nlohmann/json.hpp>

#include "analyses/oom/oom_cases.h"
#include "model/trace_model.h"

namespace vramtrace {

/// For each of the first `max_traces` traces of `models` with an OOM (a case that is not the last
/// state of an abrupt end): its cases' diagnoses, the what-if replays of `oom` on it (run_whatifs
/// with oom's settings and capacity; whatif_json) and the `tune` line that checks them. The
/// replays are noted in `cases` (note_replays_in_cases), so that the diagnoses the page shows
/// further down say what `oom` says. With `replays` false, the diagnoses only. Each entry:
/// {"trace" (index into models), "path", "cases": [{"device", "n", "diagnosis", "headline",
/// "next_step"}], "whatif" (or null), "tune_command" (or null)}; "more": traces with an OOM left
/// out; "replay_error" (a string) where a trace could not be read again for its replays (the
/// entry keeps its diagnoses).
nlohmann::json report_verdicts(const std::vector<TraceModel>& models, std::vector<std::vector<OomCase>>& cases,
                               std::size_t max_traces, bool replays = true);

}  // namespace vramtrace
