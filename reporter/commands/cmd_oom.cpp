// `vramtrace oom TRACE... [--json]`: post-mortem of each OOM, with replays under other settings.
// With several traces (one per process of a job): the process x device view first (another
// process's memory on the device is a cause of OOM that one trace cannot show), then each trace.
#include <cstdio>

#include "analyses/oom/oom_report.h"
#include "analyses/oom/oom_whatif.h"
#include "analyses/processes.h"
#include "commands/commands.h"
#include "commands/log.h"
#include "model/ledger.h"
#include "model/load_models.h"
#include "readers/open_trace.h"
#include "readers/trace_paths.h"
#include "vramtrace/units.h"

namespace vramtrace::cli {

void register_oom(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "oom", "Explain each OOM in a trace (figures, diagnosis, next step) and replay it under other settings");
  struct Opts {
    std::vector<std::string> traces;
    bool json = false;
    bool no_replay = false;
    std::string capacity;
    std::string full;
    std::string level = "auto";
  };
  auto opts = std::make_shared<Opts>();
  cmd->add_option("traces", opts->traces, "Trace file(s), globs, or directories (one trace per process)")->required();
  cmd->add_flag("--json", opts->json, "Print JSON");
  cmd->add_flag("--no-replay", opts->no_replay, "Skip the replays under other settings");
  add_level_option(cmd, opts->level);
  cmd->add_option("--capacity", opts->capacity,
                  "The memory the program could use, for the diagnosis and the replays: a size (80GiB) or a card "
                  "name (T4); default: the smallest limit the trace records")
      ->check(size_check());
  cmd->add_option("--full", opts->full,
                  "A complete trace of the same program (e.g. a run without the cap): the replays judge the whole "
                  "run on it, where the trace itself ends at its OOM");
  cmd->callback([opts]() {
    try {
      const auto paths = traces_to_read(opts->traces, opts->level, "oom");
      if (!opts->full.empty() && paths.size() != 1) {
        logger().error("vramtrace oom: --full takes one trace to compare with; {} were given", paths.size());
        set_exit_code(2);
        return;
      }
      std::string full;
      if (!opts->full.empty()) {
        const auto full_paths = traces_to_read({opts->full}, opts->level, "oom");
        if (full_paths.size() != 1) {
          logger().error("vramtrace oom: --full {} names {} traces; give one", opts->full, full_paths.size());
          set_exit_code(2);
          return;
        }
        full = full_paths.front();
      }
      OomOptions oom_options;
      if (!opts->capacity.empty()) {
        std::uint64_t bytes = 0;
        std::string err;
        if (!parse_size(opts->capacity, bytes, err)) {  // size_check() has accepted it already
          logger().error("vramtrace oom: --capacity {}: {}", opts->capacity, err);
          set_exit_code(2);
          return;
        }
        oom_options.capacity_bytes = bytes;
      }
      auto models = load_models(paths);
      std::string text;
      nlohmann::json traces = nlohmann::json::array();
      for (std::size_t i = 0; i < models.size(); ++i) {
        const TraceModel& m = models[i];
        auto cases = oom_cases(m, oom_options);
        WhatIfRun run;
        if (!opts->no_replay && !cases.empty()) {
          WhatIfOptions wo;
          wo.full_path = full;
          wo.capacity_bytes = oom_options.capacity_bytes;
          run = run_whatifs(paths[i], m, wo);
          note_replays_in_cases(cases, run);
        }
        const std::string tune = tune_command_for(run, m, cases, oom_options.capacity_bytes);
        if (opts->json) {
          nlohmann::json j = oom_json(m, cases, run);
          j["tune_command"] = tune.empty() ? nlohmann::json(nullptr) : nlohmann::json(tune);
          traces.push_back(std::move(j));
        } else {
          if (models.size() > 1) text += "\n=== " + paths[i] + " ===\n";
          text += render_oom_text(m, cases, run);
          if (!tune.empty())
            text += "To check these verdicts on the real program, under the same cap:\n  " + tune + "\n";
        }
      }
      if (opts->json) {
        nlohmann::json out =
            traces.size() == 1
                ? traces.front()
                : nlohmann::json{{"processes", process_device_json(process_device_view(models))}, {"traces", traces}};
        std::fputs(out.dump(2).c_str(), stdout);
        std::fputc('\n', stdout);
      } else {
        if (models.size() > 1) text = render_process_device_text(process_device_view(models)) + text;
        std::fputs(text.c_str(), stdout);
      }
      set_exit_code(0);
    } catch (const TraceError& e) {
      logger().error("vramtrace oom: {}", e.what());
      set_exit_code(2);
    }
  });
}

}  // namespace vramtrace::cli
