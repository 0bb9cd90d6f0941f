// Output formats of `vramtrace check`: text for people, JSON with everything, JUnit XML for CI
// test tabs, GitHub Actions workflow commands for annotations.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "analyses/budgets.h"

namespace vramtrace {

// A result of device -1 is about a whole trace (the complete-trace rule, analyses/check_verdict.h):
// every format names the trace instead of a device, and the verdict line counts such traces apart
// from the budgets.

/// One line per budget result ("FAIL", "PASS", "????" for unknown), then a verdict line.
std::string render_check_text(const std::vector<BudgetResult>& results);

/// {"exit_code", "verdict", "results": [{budget, trace, device, verdict, unit, measured, allowed,
/// measured_text, allowed_text, message, details}], "measures": [per device figures]}. "device"
/// is null for a whole trace, "measured" null when unknown, "measured" and "allowed" null when
/// the result has no figure (unit "").
nlohmann::json check_json(const std::vector<BudgetResult>& results, const std::vector<DeviceMeasures>& measures);

/// A JUnit XML report (valid against the Jenkins/Ant junit-10.xsd, tests/data/junit-10.xsd):
/// one <testsuite> per trace, one <testcase> per budget and device (classname
/// "vramtrace.check.<trace file name>.device<N>", or "vramtrace.check.<trace file name>" for a
/// whole trace; name the budget), <failure> for an exceeded budget or a trace that did not finish
/// and <error> for one that could not be judged.
std::string render_check_junit(const std::vector<BudgetResult>& results);

/// GitHub Actions workflow commands: `::error file=F,title=T::MESSAGE` for each exceeded budget
/// and `::warning ...` for each that could not be judged, then a plain summary line. F is
/// `budget_file` when it is not empty (the budget was set there), else the result's own trace
/// (always the trace for a whole trace's result).
std::string render_check_github(const std::vector<BudgetResult>& results, const std::string& budget_file);

/// GitHub's escaping for a workflow command's message: % -> %25, CR -> %0D, LF -> %0A
/// (actions/toolkit, packages/core/src/command.ts escapeData).
std::string github_escape_data(std::string_view s);
/// For a property value (file=, title=): escape_data plus ':' -> %3A and ',' -> %2C.
std::string github_escape_property(std::string_view s);
/// XML text/attribute escaping (& < > " '), dropping characters XML 1.0 forbids.
std::string xml_escape(std::string_view s);

}  // namespace vramtrace
