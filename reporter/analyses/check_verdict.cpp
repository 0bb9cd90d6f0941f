// The verdict of `vramtrace check`: see check_verdict.h.
#include "analyses/check_verdict.h"

#include <fmt/format.h>

#include "model/unfinished_run.h"

namespace vramtrace {

std::vector<UnfinishedTrace> unfinished_traces(const std::vector<TraceFigures>& traces,
                                               const std::string& fallback_path) {
  std::vector<UnfinishedTrace> out;
  for (const TraceFigures& t : traces) {
    if (!t.incomplete && t.lost_events == 0) continue;
    UnfinishedTrace u;
    u.path = t.path.value_or(fallback_path);
    u.reason = unfinished_reason(t.incomplete, t.incomplete_reason, t.lost_events);
    u.incomplete = t.incomplete;
    u.lost_events = t.lost_events;
    out.push_back(std::move(u));
  }
  return out;
}

std::string unfinished_trace_message(const UnfinishedTrace& t, bool fails) {
  return fmt::format(
      "{} did not finish ({}): its figures are what the trace holds, not the whole run's, so {}", t.path, t.reason,
      fails ? "the check fails whatever the budgets say (--allow-incomplete to judge them anyway)"
            : "a budget that passes here may not hold for the whole run (--allow-incomplete: judged on its figures "
              "up to its last recorded event)");
}

namespace {

// The failing result of one unfinished trace.
BudgetResult complete_trace_failure(const UnfinishedTrace& t) {
  BudgetResult r;
  r.budget = kCompleteTraceRule;
  r.trace = t.path;
  r.device = -1;
  r.verdict = Verdict::fail;
  r.unit = "";  // no figure: the rule is about the trace, not a measure
  if (t.incomplete && t.lost_events)
    r.measured_text = fmt::format("ended early, {} events lost", t.lost_events);
  else if (t.incomplete)
    r.measured_text = "ended early";
  else
    r.measured_text = fmt::format("{} event{} lost", t.lost_events, t.lost_events == 1 ? "" : "s");
  r.allowed_text = "a finished run (--allow-incomplete to judge the budgets anyway)";
  r.message = fmt::format("{}: {} did not finish ({}): its figures cannot be vouched for", kCompleteTraceRule, t.path,
                          t.reason);
  r.details = {{"incomplete", t.incomplete}, {"lost_events", t.lost_events}, {"reason", t.reason}};
  return r;
}

}  // namespace

CheckVerdict decide_check(std::vector<BudgetResult> budget_results, std::vector<UnfinishedTrace> unfinished,
                          bool allow_incomplete) {
  CheckVerdict v;
  v.results = std::move(budget_results);
  v.unfinished = std::move(unfinished);
  v.allow_incomplete = allow_incomplete;
  v.unfinished_fail = !v.unfinished.empty() && !allow_incomplete;
  if (v.unfinished_fail)
    for (const UnfinishedTrace& t : v.unfinished) v.results.push_back(complete_trace_failure(t));
  v.exit_code = check_exit_code(v.results);
  return v;
}

}  // namespace vramtrace
