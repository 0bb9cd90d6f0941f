// `vramtrace check TRACE... [budgets] [--format text|json|junit|github]`: memory budgets for CI.
// Exit 0 when every budget holds, 1 when one is exceeded or a run did not finish (Note [a run that
// did not finish] in model/unfinished_run.h; decided in analyses/check_verdict.h), 2 for unusable
// input or usage.
#include <fmt/format.h>
#include <cstring>

#include <cstdio>
#include <fstream>
#include <limits>
#include <memory>
#include <optional>

#include "analyses/budgets.h"
#include "analyses/check_input.h"
#include "analyses/check_verdict.h"
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

// A device whose history begins late or is absent: its peaks are lower bounds.
struct PartialHistory {
  std::string trace;
  std::int32_t device = 0;
  std::string history;  // "late" or "none"
};

// The lines that go before the results in text and GitHub formats, or to standard error for JSON
// and JUnit (whose documents stay valid): each trace that did not finish (an error when it fails
// the check, in text; GitHub has those as ::error annotations of their results), then the devices
// with partial histories (warnings: their verdict is the budgets').
std::string notices(const CheckVerdict& v, const std::vector<PartialHistory>& partial, const std::string& format) {
  const bool github = format == "github";
  std::string out;
  for (const UnfinishedTrace& t : v.unfinished) {
    const std::string what = unfinished_trace_message(t, v.unfinished_fail);
    if (!v.unfinished_fail)
      out += github ? "::warning file=" + github_escape_property(t.path) + "::" + github_escape_data(what) + "\n"
                    : "warning: " + what + "\n";
    else if (!github)
      out += "error: " + what + "\n";
  }
  for (const PartialHistory& p : partial) {
    const std::string what = fmt::format(
        "{} device {} {}: its peaks are lower bounds (at least the figures shown), so a budget that "
        "passes here may not hold for the whole run",
        p.trace, p.device,
        p.history == "none" ? "has no allocator history (only its end state)" : "has a history that starts late");
    out += github ? "::warning::" + what + "\n" : "warning: " + what + "\n";
  }
  return out;
}

// The JSON document: check_json's (its exit code and verdict are the results', the same as the
// command's) with the traces that did not finish and the partial histories.
nlohmann::json verdict_json(const CheckVerdict& v, const std::vector<DeviceMeasures>& measures,
                            const std::vector<PartialHistory>& partial) {
  nlohmann::json j = check_json(v.results, measures);
  nlohmann::json unfinished = nlohmann::json::array(), incomplete = nlohmann::json::array(),
                 lossy = nlohmann::json::array();
  for (const UnfinishedTrace& t : v.unfinished) {
    unfinished.push_back(
        {{"trace", t.path}, {"reason", t.reason}, {"incomplete", t.incomplete}, {"lost_events", t.lost_events}});
    if (t.incomplete) incomplete.push_back({{"trace", t.path}, {"reason", t.reason}});
    if (t.lost_events) lossy.push_back({{"trace", t.path}, {"lost_events", t.lost_events}});
  }
  j["unfinished_traces"] = unfinished;
  j["unfinished_traces_fail"] = v.unfinished_fail;
  j["allow_incomplete"] = v.allow_incomplete;
  j["incomplete_traces"] = incomplete;
  j["lossy_traces"] = lossy;
  j["lossy_traces_fail"] = v.unfinished_fail && !lossy.empty();
  if (!partial.empty()) {
    nlohmann::json p = nlohmann::json::array();
    for (const PartialHistory& h : partial)
      p.push_back({{"trace", h.trace}, {"device", h.device}, {"history", h.history}});
    j["partial_histories"] = p;
  }
  return j;
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
  std::vector<UnfinishedTrace> unfinished;  // Note [a run that did not finish]
  std::vector<PartialHistory> partial;
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
    for (UnfinishedTrace& u : unfinished_traces(in.traces, traces[i])) unfinished.push_back(std::move(u));
    for (const TraceFigures& t : in.traces)
      for (const DeviceFigures& d : t.devices)
        if (!d.history.empty()) partial.push_back({t.path.value_or(traces[i]), d.device, d.history});
  }
  std::vector<DeviceMeasures> base;
  if (budgets.baseline) base = load_check_input(*budgets.baseline).measures;
  progress.reset();
  // Runs that did not finish and hold no device at all (killed before their first event) fail as
  // such, not as input without devices.
  const bool only_unfinished = measures.empty() && !unfinished.empty() && !o.allow_incomplete;
  const CheckVerdict v =
      decide_check(only_unfinished ? std::vector<BudgetResult>{}
                                   : evaluate_budgets(budgets, measures, budgets.baseline ? &base : nullptr),
                   std::move(unfinished), o.allow_incomplete);

  std::string text;
  if (o.format == "json")
    text = verdict_json(v, measures, partial).dump(2) + "\n";
  else if (o.format == "junit")
    text = render_check_junit(v.results);
  else if (o.format == "github")
    text = render_check_github(v.results, o.budget_file);
  else
    text = render_check_text(v.results);
  const std::string notes = notices(v, partial, o.format);
  const bool inline_notes = o.format == "text" || o.format == "github" || o.format.empty();
  if (inline_notes) text = notes + text;
  if (o.output.empty() || o.output == "-") {
    if (!inline_notes) std::fputs(notes.c_str(), stderr);
    std::fputs(text.c_str(), stdout);
  } else {
    std::ofstream out(o.output, std::ios::binary);
    out << text;
    if (!out.flush()) throw BudgetError(o.output + ": cannot write the report: " + std::strerror(errno));
    // The verdict still goes to the terminal so that the CI log shows it.
    std::fputs((notices(v, partial, "text") + render_check_text(v.results)).c_str(), stdout);
  }
  return v.exit_code;
}

}  // namespace

void register_check(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "check",
      "Check memory budgets for CI: exit 0 when all hold, 1 when one is exceeded or a run did not finish, 2 for "
      "unusable input. A run that did not finish (a trace without its trailer: killed, crashed or still running; "
      "a last line cut mid-way; events lost) fails whatever the budgets say, even if killed right after a step "
      "boundary: its figures stop at its last recorded event (docs/ci.md)");
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
                "Judge the budgets of runs that did not finish (no trailer, a cut last line, lost events) on their "
                "figures up to the last recorded event instead of failing them (a warning says so)");
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
