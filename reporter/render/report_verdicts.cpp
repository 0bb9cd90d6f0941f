#include "render/report_verdicts.h"

#include <algorithm>

#include "analyses/oom/diagnosis.h"
#include "analyses/oom/oom_report.h"
#include "analyses/oom/oom_whatif.h"

namespace vramtrace {

nlohmann::json report_verdicts(const std::vector<TraceModel>& models, std::vector<std::vector<OomCase>>& cases,
                               std::size_t max_traces, bool replays) {
  nlohmann::json out = {{"traces", nlohmann::json::array()}, {"more", 0}};
  for (std::size_t ti = 0; ti < models.size() && ti < cases.size(); ++ti) {
    const bool oom = std::any_of(cases[ti].begin(), cases[ti].end(), [](const OomCase& c) { return !c.last_state; });
    if (!oom) continue;
    if (out["traces"].size() >= max_traces) {
      out["more"] = out["more"].get<std::size_t>() + 1;
      continue;
    }
    const TraceModel& m = models[ti];
    nlohmann::json t = {{"trace", ti}, {"path", m.header.path}, {"whatif", nullptr}, {"tune_command", nullptr}};
    if (replays) {
      // The replays read the trace again: one that cannot be (read from a pipe, gone since) keeps
      // its diagnoses, and the page says why there are no verdicts.
      try {
        const WhatIfRun run = run_whatifs(m.header.path, m);
        note_replays_in_cases(cases[ti], run);
        t["whatif"] = whatif_json(run);
        if (const std::string tune = tune_command_for(run, m, cases[ti], std::nullopt); !tune.empty())
          t["tune_command"] = tune;
      } catch (const TraceError& e) {
        t["replay_error"] = e.what();
      }
    }
    nlohmann::json cj = nlohmann::json::array();
    int n = 0;
    for (const OomCase& c : cases[ti]) {
      if (c.last_state) continue;
      cj.push_back({{"device", c.device},
                    {"n", ++n},
                    {"diagnosis", diagnosis_code_name(c.diagnosis.code)},
                    {"headline", c.diagnosis.headline},
                    {"next_step", c.diagnosis.next_step}});
    }
    t["cases"] = std::move(cj);
    out["traces"].push_back(std::move(t));
  }
  return out;
}

}  // namespace vramtrace
