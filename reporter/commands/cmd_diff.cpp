// `vramtrace diff BASE NEW [--json]`: two runs side by side and what explains the difference.
// Each side is one trace, a `vramtrace summary --json` document, or a job's traces (a directory
// or a quoted glob, one trace per process); the processes of the two sides are compared in pairs.
#include <algorithm>
#include <cstdio>
#include <memory>
#include <set>

#include "analyses/budgets.h"
#include "analyses/diff.h"
#include "commands/commands.h"
#include "commands/log.h"
#include "commands/progress.h"
#include "model/parallel_map.h"
#include "readers/trace_paths.h"

namespace vramtrace::cli {
namespace {

struct Side {
  std::vector<std::string> paths;
  std::vector<CheckInput> inputs;
  std::vector<std::string> ranks;  // "" where the trace names no rank
};

Side load_side(const std::string& arg, const std::string& level) {
  Side s;
  s.paths = traces_to_read({arg}, level, "diff", true);
  // Read several traces at once (model/parallel_map.h); the results come back in path order.
  s.inputs = parallel_map<CheckInput>(s.paths.size(), [&s](std::size_t i) { return load_check_input(s.paths[i], 0); });
  for (const auto& in : s.inputs) {
    const auto& traces = in.traces;
    s.ranks.push_back(traces.empty() ? std::string() : traces.front().rank);
  }
  return s;
}

// Ranks usable for pairing: every trace names one and no rank repeats.
bool distinct_ranks(const Side& s) {
  std::set<std::string> seen;
  for (const auto& r : s.ranks)
    if (r.empty() || !seen.insert(r).second) return false;
  return true;
}

// Pairs (base index, new index). By rank when both sides name the same distinct ranks, else in
// path order (expand_trace_paths sorts a directory's or a pattern's files by name).
std::vector<std::pair<std::size_t, std::size_t>> pair_processes(const Side& base, const Side& now, bool& by_rank) {
  std::vector<std::pair<std::size_t, std::size_t>> out;
  by_rank = distinct_ranks(base) && distinct_ranks(now) &&
            std::set<std::string>(base.ranks.begin(), base.ranks.end()) ==
                std::set<std::string>(now.ranks.begin(), now.ranks.end());
  for (std::size_t i = 0; i < base.paths.size(); ++i) {
    if (!by_rank) {
      out.emplace_back(i, i);
      continue;
    }
    const auto j =
        static_cast<std::size_t>(std::find(now.ranks.begin(), now.ranks.end(), base.ranks[i]) - now.ranks.begin());
    out.emplace_back(i, j);
  }
  if (by_rank) {
    // In rank order (numeric when the ranks are numbers), not in the order of BASE's file names.
    std::sort(out.begin(), out.end(), [&](const auto& a, const auto& b) {
      const std::string &ra = base.ranks[a.first], &rb = base.ranks[b.first];
      if (ra.size() != rb.size()) return ra.size() < rb.size();
      return ra < rb;
    });
  }
  return out;
}

}  // namespace

void register_diff(CLI::App& app) {
  auto* cmd = app.add_subcommand("diff", "Compare two runs: peaks, allocation sizes, largest free block, and why");
  struct Opts {
    std::string base, now, margin;
    bool json = false;
    bool exit_code = false;
    std::string level = "auto";
  };
  auto o = std::make_shared<Opts>();
  cmd->add_option("base", o->base,
                  "The earlier run: a trace, a `vramtrace summary --json` document, or a directory or quoted glob "
                  "of a job's traces (one per process)")
      ->required();
  cmd->add_option("new", o->now, "The run to compare with it (the same kind of argument)")->required();
  cmd->add_flag("--json", o->json, "Print JSON");
  cmd->add_flag("--exit-code", o->exit_code,
                "Exit 1 when something changed beyond the noise margin, 0 when nothing did (as git diff --exit-code)");
  add_level_option(cmd, o->level);
  cmd->add_option("--noise-margin", o->margin, "Changes below this count as none (default 2MiB)")
      ->check(size_check(SizeUse::amount));
  cmd->callback([o]() {
    try {
      std::uint64_t margin = Budgets::kDefaultNoiseMargin;
      if (!o->margin.empty()) {
        auto m = parse_size(o->margin);
        if (!m) throw BudgetError("--noise-margin: \"" + o->margin + "\" is not a size");
        margin = *m;
      }
      Side base, now;
      {
        const ReadProgressScope progress("diff");
        base = load_side(o->base, o->level);
        now = load_side(o->now, o->level);
      }
      if (base.paths.size() != now.paths.size()) {
        throw BudgetError("BASE has " + std::to_string(base.paths.size()) + " trace(s) (processes) and NEW has " +
                          std::to_string(now.paths.size()) +
                          ": diff compares runs of the same processes, one trace per process on each side");
      }
      if (base.paths.size() == 1) {
        auto d = diff_inputs(base.inputs[0], now.inputs[0], margin);
        std::fputs(o->json ? (diff_json(d).dump(2) + "\n").c_str() : render_diff_text(d).c_str(), stdout);
        set_exit_code(o->exit_code && diff_changed(d) ? 1 : 0);
        return;
      }
      bool by_rank = false;
      const auto pairs = pair_processes(base, now, by_rank);
      std::string text =
          "vramtrace diff: " + std::to_string(pairs.size()) + " processes on each side, paired " +
          (by_rank ? "by rank" : "in the order of their file names (the traces name no distinct ranks)") + "\n";
      nlohmann::json j = {{"pairing", by_rank ? "rank" : "path order"}, {"pairs", nlohmann::json::array()}};
      bool changed = false;
      for (const auto& [i, k] : pairs) {
        auto d = diff_inputs(base.inputs[i], now.inputs[k], margin);
        if (d.base_path.empty()) d.base_path = base.paths[i];
        if (d.new_path.empty()) d.new_path = now.paths[k];
        changed = changed || diff_changed(d);
        const std::string who = by_rank ? "rank " + base.ranks[i] : "process " + std::to_string(i + 1);
        text += "\n=== " + who + " ===\n" + render_diff_text(d);
        nlohmann::json pj = diff_json(d);
        if (by_rank) pj["rank"] = base.ranks[i];
        j["pairs"].push_back(std::move(pj));
      }
      j["changed"] = changed;
      std::fputs(o->json ? (j.dump(2) + "\n").c_str() : text.c_str(), stdout);
      set_exit_code(o->exit_code && changed ? 1 : 0);
    } catch (const TraceError& e) {
      logger().error("vramtrace diff: {}", e.what());
      set_exit_code(2);
    } catch (const BudgetError& e) {
      logger().error("vramtrace diff: {}", e.what());
      set_exit_code(2);
    }
  });
}

}  // namespace vramtrace::cli
