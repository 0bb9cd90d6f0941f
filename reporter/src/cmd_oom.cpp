// `vramtrace oom TRACE [--json]`: post-mortem of each OOM, with replays under other settings.
#include <cstdio>

#include "commands.h"
#include "load_models.h"
#include "oom_report.h"
#include "oom_whatif.h"

namespace vramtrace::cli {

void register_oom(CLI::App& app) {
  auto* cmd = app.add_subcommand("oom", "Explain each OOM in a trace (figures, diagnosis, next step) and replay it under other settings");
  struct Opts {
    std::string trace;
    bool json = false;
    bool no_replay = false;
    std::string capacity;
  };
  auto opts = std::make_shared<Opts>();
  cmd->add_option("trace", opts->trace, "Trace file")->required();
  cmd->add_flag("--json", opts->json, "Print JSON");
  cmd->add_flag("--no-replay", opts->no_replay, "Skip the replays under other settings");
  cmd->add_option("--capacity", opts->capacity, "Simulated device capacity for the replays (e.g. 80GiB); default: the trace's device");
  cmd->callback([opts]() {
    try {
      auto models = load_models({opts->trace});
      const TraceModel& m = models.front();
      auto cases = oom_cases(m);
      std::vector<WhatIf> whatifs;
      std::uint64_t capacity = 0;
      if (!opts->no_replay && !cases.empty()) {
        std::string err;
        capacity = whatif_capacity(m, cases, opts->capacity, err);
        if (!err.empty()) {
          std::fprintf(stderr, "vramtrace oom: %s\n", err.c_str());
          set_exit_code(2);
          return;
        }
        if (capacity) whatifs = run_whatifs(opts->trace, m, capacity);
      }
      if (opts->json) {
        std::fputs(oom_json(m, cases, whatifs, capacity).dump(2).c_str(), stdout);
        std::fputc('\n', stdout);
      } else {
        std::fputs(render_oom_text(m, cases, whatifs, capacity).c_str(), stdout);
      }
      set_exit_code(0);
    } catch (const TraceError& e) {
      std::fprintf(stderr, "vramtrace oom: %s\n", e.what());
      set_exit_code(2);
    }
  });
}

}  // namespace vramtrace::cli
