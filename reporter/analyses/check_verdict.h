// The verdict of `vramtrace check`, decided in one place: the budgets' results, and the rule that a
// trace whose run did not finish fails the check (Note [a run that did not finish] in
// model/unfinished_run.h) unless --allow-incomplete. Every output format (text, JSON, JUnit,
// GitHub annotations) renders the results decided here and the exit status is theirs, so that none
// of them can disagree with another.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "analyses/budgets.h"
#include "analyses/figures.h"

namespace vramtrace {

/// BudgetResult::budget of the rule that fails a trace whose run did not finish. Its results have
/// device -1 (the whole trace) and no measured figure (unit "").
inline constexpr const char* kCompleteTraceRule = "complete-trace";

/// A checked trace whose run did not finish.
struct UnfinishedTrace {
  std::string path;
  std::string reason;       ///< unfinished_reason: why, in words
  bool incomplete = false;  ///< TraceFigures::incomplete: it ended early
  std::uint64_t lost_events = 0;
};

/// The traces among `traces` whose run did not finish (TraceFigures::incomplete or lost_events),
/// in order; a trace without a path is named `fallback_path` (the input file). Pure.
std::vector<UnfinishedTrace> unfinished_traces(const std::vector<TraceFigures>& traces,
                                               const std::string& fallback_path);

/// What check decided.
struct CheckVerdict {
  /// The budgets' results, then, unless allow_incomplete, one failing kCompleteTraceRule result
  /// per unfinished trace. What every format renders.
  std::vector<BudgetResult> results;
  std::vector<UnfinishedTrace> unfinished;
  bool allow_incomplete = false;
  bool unfinished_fail = false;  ///< unfinished traces fail the check (some, and not allowed)
  int exit_code = 0;             ///< check_exit_code(results): 0 pass, 1 fail, 2 unjudged
};

/// The check's verdict from the budgets' results and the unfinished traces: a trace that did not
/// finish fails the check (exit 1) whatever the budgets say, unless `allow_incomplete`, which
/// judges its figures (up to its last event) by the budgets alone. A failure wins over a budget
/// that could not be judged (check_exit_code). Pure.
CheckVerdict decide_check(std::vector<BudgetResult> budget_results, std::vector<UnfinishedTrace> unfinished,
                          bool allow_incomplete);

/// One sentence about an unfinished trace for the lines before the results ("PATH did not finish
/// (REASON): ..."), saying whether it fails the check (`fails`) or was judged anyway. No prefix,
/// no newline. Pure.
std::string unfinished_trace_message(const UnfinishedTrace& t, bool fails);

}  // namespace vramtrace
