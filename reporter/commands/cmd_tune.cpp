// `vramtrace tune [--limit SIZE|CARD] [--candidates 'A;B'] [--from TRACE] -- CMD...`: runs the
// program under the cap once per allocator setting (PyTorch's defaults first) and prints what
// really fits. The what-if replays of `vramtrace oom` are a model with an error bound
// (analyses/oom/verdict.h); this is the verification on the real program, the answer a user can rely
// on.
//
// Each run is `vramtrace run --limit L -o DIR/tune-N.%p.jsonl -- CMD` with
// PYTORCH_CUDA_ALLOC_CONF set to the user's own settings plus the candidate's, so that every run
// is traced at both levels and counted by the same rules as `summary` (Note [one OOM per failed
// request]): a setting fits when the program exits 0 and its traces count no OOM. A program that
// dies of its OOM stops there; --timeout bounds a run that does not end.
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fmt/format.h>
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <thread>

#include "analyses/oom/oom_report.h"
#include "analyses/oom/oom_whatif.h"
#include "analyses/oom/verdict.h"
#include "commands/commands.h"
#include "commands/log.h"
#include "commands/usage.h"
#include "model/load_models.h"
#include "readers/trace_paths.h"
#include "vramtrace/stats.h"
#include "vramtrace/units.h"

namespace vramtrace::cli {
namespace {

struct TuneRow {
  std::string candidate;  // "" = the program's own settings
  std::string conf;       // PYTORCH_CUDA_ALLOC_CONF given to the run
  std::string result;     // "fits", "OOM", "failed", "timed out", "no trace"
  int exit_code = 0;
  double seconds = 0;
  std::uint64_t ooms = 0;
  std::int64_t peak_reserved = -1;  // PyTorch's (tensor level) or the shim's segments; -1 unknown
  std::string log;                  // the run's stdout and stderr
  std::vector<std::string> traces;
  std::string replay_verdict;  // with --from: the replay's verdict for this setting
};

std::string joined_conf(const std::string& base, const std::string& candidate) {
  if (candidate.empty()) return base;
  if (base.empty()) return candidate;
  return base + "," + candidate;
}

std::vector<std::string> split_candidates(const std::string& text) {
  std::vector<std::string> out;
  std::size_t start = 0;
  while (start <= text.size()) {
    std::size_t end = text.find(';', start);
    if (end == std::string::npos) end = text.size();
    std::string item = text.substr(start, end - start);
    const auto b = item.find_first_not_of(" \t");
    const auto e = item.find_last_not_of(" \t");
    item = b == std::string::npos ? std::string() : item.substr(b, e - b + 1);
    if (!item.empty() && std::find(out.begin(), out.end(), item) == out.end()) out.push_back(item);
    start = end + 1;
  }
  return out;
}

// The program under `vramtrace run`, its output in `log`; waits for its end or `timeout_s`
// (0 = none), then SIGTERM to its process group and SIGKILL 10 s later. Returns the waitpid
// status, or -1 when it could not start; `timed_out` says whether the limit ended it.
int run_one(const std::vector<std::string>& argv, const std::string& conf, const std::string& log, double timeout_s,
            bool& timed_out, double& seconds) {
  timed_out = false;
  const auto t0 = std::chrono::steady_clock::now();
  pid_t child = fork();
  if (child < 0) return -1;
  if (child == 0) {
    setpgid(0, 0);  // one group: a timeout ends the program and its children
    int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd >= 0) {
      dup2(fd, 1);
      dup2(fd, 2);
    }
    if (conf.empty())
      unsetenv("PYTORCH_CUDA_ALLOC_CONF");
    else
      setenv("PYTORCH_CUDA_ALLOC_CONF", conf.c_str(), 1);
    std::vector<char*> args;
    for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    execv(args[0], args.data());
    _exit(127);
  }
  setpgid(child, child);
  int status = 0;
  bool termed = false;
  std::chrono::steady_clock::time_point term_at{};
  for (;;) {
    const pid_t r = waitpid(child, &status, WNOHANG);
    if (r == child) break;
    if (r < 0 && errno != EINTR) {
      status = -1;
      break;
    }
    const auto now = std::chrono::steady_clock::now();
    const double elapsed = std::chrono::duration<double>(now - t0).count();
    if (timeout_s > 0 && elapsed > timeout_s && !termed) {
      timed_out = true;
      termed = true;
      term_at = now;
      kill(-child, SIGTERM);
    } else if (termed && std::chrono::duration<double>(now - term_at).count() > 10) {
      kill(-child, SIGKILL);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return status;
}

// What the run's traces say: OOMs counted as every command counts them, and the peak reserved
// memory (the tensor level's when a snapshot is beside the trace, else the shim's segments).
void read_run(TuneRow& row, const std::string& dir, std::size_t index) {
  const std::string prefix = fmt::format("tune-{}.", index);
  std::vector<std::string> found;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind(prefix, 0) == 0 && name.size() > 6 && name.compare(name.size() - 6, 6, ".jsonl") == 0)
      found.push_back(e.path().string());
  }
  std::sort(found.begin(), found.end());
  row.traces = found;
  if (found.empty()) return;
  try {
    const auto paths = traces_to_read(found, "auto", "tune");
    for (const TraceModel& m : load_models(paths)) {
      for (const auto& d : m.devices) {
        row.ooms += d.oom_count.ooms;
        row.peak_reserved = std::max<std::int64_t>(row.peak_reserved, d.stats.reserved_bytes[kStatAll].peak);
      }
    }
  } catch (const TraceError& e) {
    logger().warn("vramtrace tune: {}: {}", found.front(), e.what());
  }
}

// With --from: replays `from` under each candidate on the cap (run_whatifs, the settings added to
// the trace's own) and keeps in `candidates` the best `top` that the verdict rule offers to tune
// (tune_candidate: fits by spare, then marginal within the measured error, then settings that got
// through a trace covering part of the run); `replay_verdicts` gets every candidate's verdict
// name ("" when withheld). When the replays give no verdict at all, the candidates stay as given,
// unranked, with a warning. With `dry_run`, prints the replays and the plan (text or JSON) and
// returns 0. Returns -1 to go on with the runs, or an exit code (2: unusable trace).
int rank_from_trace(const std::string& from, std::optional<std::uint64_t> cap, std::size_t top, bool json, bool dry_run,
                    std::vector<std::string>& candidates,
                    std::vector<std::pair<std::string, std::string>>& replay_verdicts) {
  WhatIfRun run;
  try {
    const auto paths = traces_to_read({from}, "auto", "tune");
    if (paths.size() != 1) {
      logger().error("vramtrace tune: --from {} names {} traces; give one", from, paths.size());
      return 2;
    }
    auto models = load_models(paths);
    WhatIfOptions wo;
    wo.settings = candidates;
    wo.capacity_bytes = cap;
    run = run_whatifs(paths[0], models[0], wo);
  } catch (const TraceError& e) {
    logger().error("vramtrace tune: --from: {}", e.what());
    return 2;
  }
  std::vector<const WhatIf*> ranked;
  for (const WhatIf* w : run.shown_rows()) {
    replay_verdicts.emplace_back(
        w->settings, w->judgement.verdict == WhatIfVerdict::withheld ? "" : whatif_verdict_name(w->judgement.verdict));
    if (!w->settings.empty() && w->error.empty() && tune_candidate(w->judgement)) ranked.push_back(w);
  }
  auto rank = [](const WhatIf* w) {
    return w->judgement.verdict == WhatIfVerdict::fits ? 0 : w->judgement.verdict == WhatIfVerdict::marginal ? 1 : 2;
  };
  std::stable_sort(ranked.begin(), ranked.end(), [&](const WhatIf* a, const WhatIf* b) {
    if (rank(a) != rank(b)) return rank(a) < rank(b);
    return a->judgement.margin_bytes.value_or(0) > b->judgement.margin_bytes.value_or(0);
  });
  if (run.withheld) {
    logger().warn("vramtrace tune: --from {}: no verdict from its replays ({}); the candidates run as given", from,
                  run.withheld->why);
  } else {
    candidates.clear();
    for (const WhatIf* w : ranked)
      if (candidates.size() < top) candidates.push_back(w->settings);
  }
  if (!dry_run) return -1;
  if (json) {
    nlohmann::json j = {{"from", from}, {"whatif", whatif_json(run)}, {"candidates", candidates}};
    std::fputs(j.dump(2).c_str(), stdout);
    std::fputc('\n', stdout);
  } else {
    std::string text = render_whatif_text(run);
    text += candidates.empty()
                ? "No candidate to run: no setting is offered by the replays.\n"
                : fmt::format("Would run (after the program's own settings): {}\n", fmt::join(candidates, "; "));
    std::fputs(text.c_str(), stdout);
  }
  return 0;
}

}  // namespace

void register_tune(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "tune", "Run the program under a memory cap once per allocator setting and show which settings really fit");
  struct Opts {
    std::string limit;
    std::string candidates;
    std::string from;
    std::size_t top = 3;
    bool dry_run = false;
    double timeout = 0;
    std::string out = "vramtrace-tune";
    bool json = false;
    std::vector<std::string> command;
  };
  auto opts = std::make_shared<Opts>();
  cmd->add_option("--limit", opts->limit,
                  "The memory cap of every run (vramtrace run --limit): a size (24GiB) or a card name (T4); "
                  "default: none, the device itself")
      ->check(size_check());
  cmd->add_option("--candidates", opts->candidates,
                  "Allocator settings to try, ';'-separated, each added to PYTORCH_CUDA_ALLOC_CONF "
                  "(default: the settings vramtrace oom replays)");
  cmd->add_option("--from", opts->from,
                  "A trace of the program: its replays on the cap rank the candidates, and the best --top of them "
                  "are run (each row then shows the replay's verdict beside the real result)");
  cmd->add_option("--top", opts->top, "With --from: how many of the ranked candidates to run (default 3)")
      ->check(CLI::PositiveNumber);
  cmd->add_flag("--dry-run", opts->dry_run,
                "With --from: print the replays' verdicts and the candidates that would run, and run nothing");
  cmd->add_option("--timeout", opts->timeout, "Seconds each run may take (default: no limit)")
      ->check(number_check(0, false, 1e9, false, "seconds from 0 (no limit) to 1e9", "SECONDS"));
  cmd->add_option("-o,--output", opts->out, "Directory for the runs' traces and logs (default ./vramtrace-tune)");
  cmd->add_flag("--json", opts->json, "Print JSON");
  cmd->add_option("command", opts->command, "The program to run, after --")->required();
  cmd->positionals_at_end();
  cmd->callback([opts]() {
    const char* base_env = std::getenv("PYTORCH_CUDA_ALLOC_CONF");
    const std::string base = base_env ? base_env : "";
    std::vector<std::string> candidates = split_candidates(opts->candidates);
    if (!opts->candidates.empty() && candidates.empty()) {
      logger().error("vramtrace tune: --candidates '{}' names no setting", opts->candidates);
      set_exit_code(2);
      return;
    }
    // The environment's own settings first: a fault in them is no candidate's.
    if (AllocatorSettings s; !base.empty()) {
      std::string err;
      if (!AllocatorSettings::parse(base, s, err)) {
        logger().error("vramtrace tune: PYTORCH_CUDA_ALLOC_CONF in the environment ('{}'): {}", base, err);
        set_exit_code(2);
        return;
      }
    }
    for (const auto& c : candidates) {
      AllocatorSettings s;
      std::string err;
      if (!AllocatorSettings::parse(joined_conf(base, c), s, err)) {
        logger().error("vramtrace tune: candidate '{}': {}", c, err);
        set_exit_code(2);
        return;
      }
    }
    if (candidates.empty())
      for (const auto& c : whatif_settings())
        if (!c.empty()) candidates.push_back(c);

    // With --from: the replays on the cap rank the candidates (analyses/oom/oom_whatif.h), and only
    // those the verdict rule offers (tune_candidate) are run.
    std::vector<std::pair<std::string, std::string>> replay_verdicts;  // candidate, verdict name ("" = none)
    if (!opts->from.empty()) {
      std::optional<std::uint64_t> cap;
      if (!opts->limit.empty()) {
        std::uint64_t b = 0;
        std::string err;
        if (parse_size(opts->limit, b, err)) cap = b;
      }
      const int rc =
          rank_from_trace(opts->from, cap, opts->top, opts->json, opts->dry_run, candidates, replay_verdicts);
      if (rc >= 0 || opts->dry_run) {
        set_exit_code(rc < 0 ? 0 : rc);
        return;
      }
    } else if (opts->dry_run) {
      logger().error("vramtrace tune: --dry-run shows what --from would run; give --from TRACE");
      set_exit_code(2);
      return;
    }

    std::error_code ec;
    std::filesystem::create_directories(opts->out, ec);
    if (ec) {
      logger().error("vramtrace tune: cannot create {}: {}", opts->out, ec.message());
      set_exit_code(2);
      return;
    }
    char self[4096];
    const ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0) {
      logger().error("vramtrace tune: cannot find its own executable (/proc/self/exe): {}", std::strerror(errno));
      set_exit_code(2);
      return;
    }
    self[n] = '\0';

    std::vector<TuneRow> rows;
    std::vector<std::string> order = {""};
    order.insert(order.end(), candidates.begin(), candidates.end());
    for (std::size_t i = 0; i < order.size(); ++i) {
      TuneRow row;
      row.candidate = order[i];
      row.conf = joined_conf(base, order[i]);
      for (const auto& [c, v] : replay_verdicts)
        if (c == order[i]) row.replay_verdict = v;
      // Traces of an earlier tune in the same directory would be read as this run's.
      for (const auto& e : std::filesystem::directory_iterator(opts->out, ec))
        if (e.path().filename().string().rfind(fmt::format("tune-{}.", i), 0) == 0)
          std::filesystem::remove(e.path(), ec);
      std::vector<std::string> argv = {self, "run"};
      if (!opts->limit.empty()) {
        argv.push_back("--limit");
        argv.push_back(opts->limit);
      }
      argv.push_back("-o");
      argv.push_back(fmt::format("{}/tune-{}.%p.jsonl", opts->out, i));
      argv.push_back("--");
      argv.insert(argv.end(), opts->command.begin(), opts->command.end());
      row.log = fmt::format("{}/tune-{}.log", opts->out, i);
      logger().info("vramtrace tune: run {} of {}: PYTORCH_CUDA_ALLOC_CONF='{}'", i + 1, order.size(), row.conf);
      bool timed_out = false;
      const int status = run_one(argv, row.conf, row.log, opts->timeout, timed_out, row.seconds);
      row.exit_code = status < 0 ? -1 : WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      read_run(row, opts->out, i);
      if (row.traces.empty())
        row.result = "no trace";
      else if (row.ooms > 0)
        row.result = "OOM";
      else if (timed_out)
        row.result = "timed out";
      else if (row.exit_code != 0)
        row.result = "failed";
      else
        row.result = "fits";
      rows.push_back(std::move(row));
    }

    // Without a trace no run was measured: neither "fits" nor "needs less memory" can be said.
    bool measured = false;
    bool any_oom = false;
    for (const auto& r : rows) {
      measured = measured || !r.traces.empty();
      any_oom = any_oom || r.ooms > 0;
    }
    const std::string cap_words = opts->limit.empty() ? std::string("the device itself") : "--limit " + opts->limit;
    if (opts->json) {
      nlohmann::json j = {{"limit", opts->limit}, {"base_settings", base}, {"runs", nlohmann::json::array()}};
      for (const auto& r : rows)
        j["runs"].push_back(
            {{"settings", r.candidate},
             {"conf", r.conf},
             {"result", r.result},
             {"exit_code", r.exit_code},
             {"seconds", r.seconds},
             {"ooms", r.ooms},
             {"peak_reserved_bytes", r.peak_reserved < 0 ? nlohmann::json(nullptr) : nlohmann::json(r.peak_reserved)},
             {"replay_verdict", r.replay_verdict.empty() ? nlohmann::json(nullptr) : nlohmann::json(r.replay_verdict)},
             {"log", r.log},
             {"traces", r.traces}});
      std::fputs(j.dump(2).c_str(), stdout);
      std::fputc('\n', stdout);
      if (!measured)
        logger().error(
            "vramtrace tune: no run left a trace: the program made no CUDA allocation under vramtrace (or could not "
            "run); nothing to judge");
    } else {
      std::string text = fmt::format("The program under {}, once per setting (PYTORCH_CUDA_ALLOC_CONF{}):\n", cap_words,
                                     base.empty() ? "" : " = '" + base + "' plus each");
      text += fmt::format("  {:<40} {:>10} {:>6} {:>14} {:>9}{}\n", "settings", "result", "exit", "peak reserved",
                          "seconds", replay_verdicts.empty() ? "" : "  replay said");
      for (const auto& r : rows) {
        const std::string label = r.candidate.empty() ? "(the program's own)" : r.candidate;
        const std::string result = r.result == "OOM" ? fmt::format("OOM x{}", r.ooms) : r.result;
        text += fmt::format(
            "  {:<40} {:>10} {:>6} {:>14} {:>9.1f}{}\n", label, result, r.exit_code,
            r.peak_reserved < 0 ? std::string("?") : format_size(static_cast<std::uint64_t>(r.peak_reserved)),
            r.seconds, r.replay_verdict.empty() ? "" : "  " + r.replay_verdict);
      }
      text +=
          "(fits = exit 0 and no OOM in its traces; peak reserved = PyTorch's, or the shim's segments without "
          "its tensor level)\n";
      std::vector<std::string> fit;
      for (const auto& r : rows)
        if (r.result == "fits") fit.push_back(r.candidate.empty() ? "(the program's own)" : r.candidate);
      if (!measured)
        text +=
            "No run left a trace: the program made no CUDA allocation under vramtrace (or could not run); "
            "nothing to judge.\n";
      else if (fit.empty() && !any_oom)
        text +=
            "No setting tried fits, and no run ran out of memory: the runs failed or timed out for another "
            "reason (see their logs); nothing says the program needs less memory.\n";
      else if (fit.empty())
        text +=
            "No setting tried fits: the program needs less memory (a smaller batch, mixed precision, activation "
            "checkpointing, a sharded optimizer) or a larger device.\n";
      else
        text += fmt::format("Fits on the real program: {}.\n", fmt::join(fit, "; "));
      for (const auto& r : rows)
        if (r.result == "failed" || r.result == "no trace")
          text += fmt::format("  {}: the run exited {} {}; see {}\n",
                              r.candidate.empty() ? "(the program's own)" : r.candidate, r.exit_code,
                              r.result == "no trace" ? "and left no trace" : "without an OOM", r.log);
      text += fmt::format("Traces and logs: {}/tune-N.*\n", opts->out);
      std::fputs(text.c_str(), stdout);
    }
    bool any_fit = false;
    for (const auto& r : rows) any_fit = any_fit || r.result == "fits";
    set_exit_code(!measured ? 2 : any_fit ? 0 : 1);
  });
}

}  // namespace vramtrace::cli
