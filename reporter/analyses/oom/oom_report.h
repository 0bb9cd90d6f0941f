// `vramtrace oom` rendered: the post-mortem of each OOM in a trace (analyses/oom/oom_cases.h) and
// the replays under other allocator settings (analyses/oom/oom_whatif.h), as text and JSON.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "analyses/oom/oom_cases.h"
#include "analyses/oom/oom_whatif.h"
#include "model/trace_model.h"

namespace vramtrace {

/// Text of the what-if replays: what they ran on and cover, the table, one verdict sentence per
/// setting, warnings and notes. Empty when `run` has no rows.
std::string render_whatif_text(const WhatIfRun& run);

/// Why the replays give no verdict (NO VERDICT ...), or cover only part of the run (PART OF THE
/// RUN ...), with how to get one: the lines every command prints above its verdicts. Empty when
/// neither holds.
std::string render_withheld_text(const WhatIfRun& run);

/// The what-if replays for --json, the same in `oom`, `replay`'s "whatif" and the report's data:
/// capacity, bound source, coverage, "withheld" / "partial" ({"why", "how"} or null), notes,
/// warnings, and per row "settings", "conf", "own", then judgement_json's keys. Pure.
nlohmann::json whatif_json(const WhatIfRun& run);

/// Text of the post-mortems (and what-ifs, if any). Ends with a newline.
std::string render_oom_text(const TraceModel& m, const std::vector<OomCase>& cases, const WhatIfRun& whatifs);
nlohmann::json oom_json(const TraceModel& m, const std::vector<OomCase>& cases, const WhatIfRun& whatifs);

}  // namespace vramtrace
