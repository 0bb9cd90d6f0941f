// `vramtrace check TRACE... [budgets] [--format text|json|junit|github]`: memory budgets for CI.
// Exit 0 when every budget holds, 1 when one is exceeded, 2 for unusable input or usage.
#include <fmt/format.h>
#include <cstring>

#include <cstdio>
#include <fstream>
#include <limits>
#include <memory>
#include <optional>
#include <tuple>

#include "analyses/budgets.h"
#include "analyses/check_input.h"
#include "commands/commands.h"
#include "commands/log.h"
#include "commands/progress.h"
#include "commands/usage.h"
#include "model/parallel_map.h"
#include "readers/trace_paths.h"
#include "render/check_report.h"

namespace vramtrace::cli {

namespace {

struct CheckOptions {
  std::vector<std::string> traces;
  std::string budget_file;
  std::string max_peak_reserved, max_peak_allocated, max_growth, max_increase, noise_margin;
  std::optional<double> max_reserved_ratio;
  std::optional<std::int64_t> max_ooms, max_retries;
  std::optional<std::int32_t> device;
  std::string baseline;
  bool no_leaks = false;
  bool allow_incomplete = false;
  std::string format = "text";
  bool json = false;  // --json: --format json, as every other command spells it
  std::string output;
  bool force = false;
  std::string level = "auto";
};

std::uint64_t size_option(const std::string& name, const std::string& value) {
  auto v = parse_size(value);
  if (!v) throw BudgetError("--" + name + ": \"" + value + "\" is not a size (e.g. 20GiB, 512MiB, 24 MB)");
  return *v;
}

Budgets budgets_from(const CheckOptions& o) {
  Budgets b;
  if (!o.budget_file.empty()) b = parse_budget_file(o.budget_file);
  Budgets cli;
  if (!o.max_peak_reserved.empty()) cli.max_peak_reserved = size_option("max-peak-reserved", o.max_peak_reserved);
  if (!o.max_peak_allocated.empty()) cli.max_peak_allocated = size_option("max-peak-allocated", o.max_peak_allocated);
  if (!o.max_growth.empty()) cli.max_growth = size_option("max-growth", o.max_growth);
  if (!o.noise_margin.empty()) cli.noise_margin = size_option("noise-margin", o.noise_margin);
  if (!o.max_increase.empty()) {
    std::string v = o.max_increase;
    if (!v.empty() && v.back() == '%') v.pop_back();
    double pct = 0;
    if (!parse_finite(v, pct) || pct < 0)
      throw BudgetError("--max-increase: \"" + o.max_increase +
                        "\" is not a percentage (a finite number >= 0, e.g. 5 or 5%)");
    cli.max_increase = pct;
  }
  cli.max_reserved_ratio = o.max_reserved_ratio;  // number_check() has refused NaN and ratios below 1
  cli.max_ooms = o.max_ooms;
  cli.max_retries = o.max_retries;
  cli.no_leaks = o.no_leaks;
  if (!o.baseline.empty()) cli.baseline = o.baseline;
  cli.device = o.device;
  b.merge(cli);
  return b;
}

int run_check(const CheckOptions& o) {
  if (const std::string refusal = existing_output_error(o.output, o.force); !refusal.empty())
    throw BudgetError(refusal);
  Budgets budgets = budgets_from(o);
  if (budgets.empty())
    throw BudgetError("no budget given: set one (e.g. --max-peak-reserved 20GiB, --no-leaks) or --budget FILE");

  std::vector<DeviceMeasures> measures;
  std::optional<ReadProgressScope> progress;  // erased before the report is printed
  progress.emplace("check");
  const std::vector<std::string> traces = traces_to_read(o.traces, o.level, "check", true);
  // Traces that end abruptly: their figures stop at the last event, so a budget that passes may
  // not hold for the whole run. Said in every format; the verdict is unchanged.
  std::vector<std::pair<std::string, std::string>> incomplete;  // path, reason
  // Devices whose history begins late or is absent: their peaks are lower bounds, likewise.
  std::vector<std::tuple<std::string, std::int32_t, std::string>> partial;  // path, device, history
  // Traces that lost events: no figure of theirs can be vouched for, so the check fails.
  std::vector<std::pair<std::string, std::uint64_t>> lossy;  // path, events lost
  // Read several traces at once (model/parallel_map.h); the results come back in trace order,
  // each kept to what the budgets read (the step series and event facts are diff's).
  std::vector<CheckInput> inputs = parallel_map<CheckInput>(traces.size(), [&traces](std::size_t i) {
    CheckInput in = load_check_input(traces[i], i);
    std::vector<DeviceSteps>().swap(in.steps);
    std::vector<DeviceEventFacts>().swap(in.facts);
    std::vector<DeviceSiteTotals>().swap(in.sites);
    return in;
  });
  for (std::size_t i = 0; i < traces.size(); ++i) {
    CheckInput in = std::move(inputs[i]);
    measures.insert(measures.end(), in.measures.begin(), in.measures.end());
    for (const TraceFigures& t : in.traces) {
      if (t.incomplete) incomplete.emplace_back(t.path.value_or(traces[i]), t.incomplete_reason);
      if (t.lost_events) lossy.emplace_back(t.path.value_or(traces[i]), t.lost_events);
      for (const DeviceFigures& d : t.devices)
        if (!d.history.empty()) partial.emplace_back(t.path.value_or(traces[i]), d.device, d.history);
    }
  }
  std::string warnings;
  for (const auto& [path, reason] : incomplete) {
    const std::string what = path + " ends abruptly (" + reason +
                             "): its figures stop at its last event, so a budget that passes here may not hold for "
                             "the whole run";
    warnings += o.format == "github" ? "::warning::" + what + "\n" : "warning: " + what + "\n";
  }
  for (const auto& [path, device, history] : partial) {
    const std::string what = fmt::format(
        "{} device {} {}: its peaks are lower bounds (at least the figures shown), so a budget that "
        "passes here may not hold for the whole run",
        path, device,
        history == "none" ? "has no allocator history (only its end state)" : "has a history that starts late");
    warnings += o.format == "github" ? "::warning::" + what + "\n" : "warning: " + what + "\n";
  }
  for (const auto& [path, lost] : lossy) {
    const std::string what = fmt::format(
        "{} lost {} event{} (its writer dropped them, or the file lost lines): its figures cannot be trusted, so {}",
        path, lost, lost == 1 ? "" : "s",
        o.allow_incomplete ? "a budget that passes here may not hold (--allow-incomplete judges them anyway)"
                           : "the check fails whatever the budgets say (--allow-incomplete to judge them anyway)");
    const bool error = !o.allow_incomplete;
    warnings += o.format == "github" ? (error ? "::error file=" : "::warning file=") + github_escape_property(path) +
                                           "::" + github_escape_data(what) + "\n"
                                     : (error ? "error: " : "warning: ") + what + "\n";
  }
  const bool lossy_fails = !lossy.empty() && !o.allow_incomplete;
  std::vector<DeviceMeasures> base;
  if (budgets.baseline) base = load_check_input(*budgets.baseline).measures;
  progress.reset();
  auto results = evaluate_budgets(budgets, measures, budgets.baseline ? &base : nullptr);

  std::string text;
  if (o.format == "json") {
    nlohmann::json j = check_json(results, measures);
    nlohmann::json inc = nlohmann::json::array();
    for (const auto& [path, reason] : incomplete) inc.push_back({{"trace", path}, {"reason", reason}});
    j["incomplete_traces"] = inc;
    nlohmann::json lost = nlohmann::json::array();
    for (const auto& [path, n] : lossy) lost.push_back({{"trace", path}, {"lost_events", n}});
    j["lossy_traces"] = lost;
    j["lossy_traces_fail"] = lossy_fails;
    if (lossy_fails && j.value("exit_code", 0) == 0) {  // the budgets held; the lost events fail the check
      j["exit_code"] = 1;
      j["verdict"] = "fail";
    }
    if (!partial.empty()) {
      nlohmann::json p = nlohmann::json::array();
      for (const auto& [path, device, history] : partial)
        p.push_back({{"trace", path}, {"device", device}, {"history", history}});
      j["partial_histories"] = p;
    }
    text = j.dump(2) + "\n";
  } else if (o.format == "junit") {
    // A trace that lost events fails the check: a failing test case of its own, so that the
    // document agrees with the exit status.
    std::vector<BudgetResult> with_lossy = results;
    if (lossy_fails)
      for (const auto& [path, lost] : lossy) {
        BudgetResult r;
        r.budget = "complete-trace";
        r.trace = path;
        r.verdict = Verdict::fail;
        r.unit = "count";
        r.measured = static_cast<double>(lost);
        r.measured_text = fmt::format("{} events lost", lost);
        r.allowed_text = "0 (--allow-incomplete to judge the budgets anyway)";
        r.message = fmt::format("complete-trace: {} lost {} events: its figures cannot be trusted", path, lost);
        with_lossy.push_back(std::move(r));
      }
    text = render_check_junit(with_lossy);
  } else if (o.format == "github") {
    text = render_check_github(results, o.budget_file);
  } else {
    text = render_check_text(results);
  }
  // Text and GitHub annotations carry the warnings inline; JSON has "incomplete_traces" and
  // JUnit none, so their warnings go to standard error (the document stays valid).
  const bool inline_warnings = o.format == "text" || o.format == "github" || o.format.empty();
  if (inline_warnings) text = warnings + text;
  // The budgets' line says what the budgets gave; the check's verdict also counts lost events.
  const std::string lossy_verdict =
      lossy_fails ? fmt::format("vramtrace check: fails: {} of {} traces lost events\n", lossy.size(), traces.size())
                  : std::string();
  if (o.format == "text" || o.format.empty() || o.format == "github") text += lossy_verdict;
  if (o.output.empty() || o.output == "-") {
    if (!inline_warnings) std::fputs(warnings.c_str(), stderr);
    std::fputs(text.c_str(), stdout);
  } else {
    std::ofstream out(o.output, std::ios::binary);
    out << text;
    if (!out.flush()) throw BudgetError(o.output + ": cannot write the report: " + std::strerror(errno));
    // The verdict still goes to the terminal so that the CI log shows it.
    std::fputs((warnings + render_check_text(results) + lossy_verdict).c_str(), stdout);
  }
  const int rc = check_exit_code(results);
  return !lossy_fails || rc == 2 ? rc : 1;
}

}  // namespace

void register_check(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "check", "Check memory budgets for CI: exit 0 when all hold, 1 when one is exceeded, 2 for unusable input");
  auto o = std::make_shared<CheckOptions>();
  cmd->add_option("traces", o->traces,
                  "Traces (any format) or `vramtrace summary --json` documents; globs; directories (all of them in it)")
      ->required();
  add_level_option(cmd, o->level);
  cmd->add_option("--budget", o->budget_file, "Budget file: `key = value` lines (docs/ci.md); options override it");
  cmd->add_option("--max-peak-reserved", o->max_peak_reserved, "Limit on reserved_bytes.all.peak, e.g. 20GiB")
      ->check(size_check(SizeUse::peak_budget));
  cmd->add_option("--max-peak-allocated", o->max_peak_allocated, "Limit on allocated_bytes.all.peak, e.g. 18GiB")
      ->check(size_check(SizeUse::peak_budget));
  cmd->add_option("--max-reserved-ratio", o->max_reserved_ratio, "Limit on peak reserved / peak allocated, e.g. 1.3")
      ->check(number_check(1, false, std::numeric_limits<double>::max(), false,
                           "a ratio of at least 1 (reserved memory is never below allocated memory)", "RATIO"));
  cmd->add_option("--max-ooms", o->max_ooms, "Limit on num_ooms")->check(count_check());
  cmd->add_option("--max-retries", o->max_retries, "Limit on num_alloc_retries")->check(count_check());
  cmd->add_flag("--allow-incomplete", o->allow_incomplete,
                "Judge the budgets of traces that lost events instead of failing (the warning stays)");
  cmd->add_flag("--no-leaks", o->no_leaks, "Fail when allocated memory grows significantly per step after warm-up");
  cmd->add_option("--max-growth", o->max_growth, "Limit on the fitted growth per step, e.g. 1MiB")
      ->check(size_check(SizeUse::amount));
  cmd->add_option("--baseline", o->baseline, "An earlier `vramtrace summary --json` (or trace) to compare peaks with");
  cmd->add_option("--max-increase", o->max_increase, "Allowed increase of each peak over the baseline, percent");
  cmd->add_option("--noise-margin", o->noise_margin, "Absolute slack on baseline comparisons (default 2MiB)")
      ->check(size_check(SizeUse::amount));
  cmd->add_option("--device", o->device, "Check only this device")->check(CLI::Range(0, 1023));
  auto* format = cmd->add_option("--format", o->format, "text, json, junit or github")
                     ->check(CLI::IsMember({"text", "json", "junit", "github"}));
  cmd->add_flag("--json", o->json, "Print JSON (the same as --format json)")->excludes(format);
  cmd->add_option("-o,--output", o->output,
                  "Write the report here instead of standard output; an existing file is kept");
  cmd->add_flag("--force", o->force, "Overwrite the -o file if it exists");
  cmd->callback([o]() {
    if (o->json) o->format = "json";
    try {
      set_exit_code(run_check(*o));
    } catch (const TraceError& e) {
      logger().error("vramtrace check: {}", e.what());
      set_exit_code(2);
    } catch (const BudgetError& e) {
      logger().error("vramtrace check: {}", e.what());
      set_exit_code(2);
    }
  });
}

}  // namespace vramtrace::cli
