// `vramtrace summary TRACE... [--json]`: memory_summary()-style tables and the trace's peak; with
// several traces (files, globs, a directory) first the process x device view (processes.h).
#include <cstdio>

#include "analyses/processes.h"
#include "analyses/summary.h"
#include "commands/commands.h"
#include "commands/log.h"
#include "commands/progress.h"
#include "model/load_models.h"
#include "readers/trace_paths.h"

namespace vramtrace::cli {

void register_summary(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "summary", "Per process and device: torch.cuda.memory_summary() figures, the peak, what was left");
  struct Opts {
    std::vector<std::string> traces;
    bool json = false;
    std::string level = "auto";
  };
  auto opts = std::make_shared<Opts>();
  cmd->add_option("traces", opts->traces,
                  "Trace files (PyTorch JSON lines, snapshot pickle, vramtrace trace), globs, or directories (all "
                  "traces in them)")
      ->required();
  cmd->add_flag("--json", opts->json, "Print JSON with PyTorch's flat statistic names");
  add_level_option(cmd, opts->level);
  cmd->callback([opts]() {
    try {
      std::vector<TraceModel> models;
      {
        const ReadProgressScope progress("summary");
        models = load_models(traces_to_read(opts->traces, opts->level, "summary"));
      }
      if (opts->json) {
        nlohmann::json j = summary_json(models);
        if (models.size() > 1) j["processes"] = process_device_json(process_device_view(models));
        std::fputs(j.dump(2).c_str(), stdout);
        std::fputc('\n', stdout);
      } else {
        if (models.size() > 1)
          std::fputs((render_process_device_text(process_device_view(models)) + "\n").c_str(), stdout);
        std::fputs(render_summary_text(models).c_str(), stdout);
      }
      set_exit_code(0);
    } catch (const TraceError& e) {
      logger().error("vramtrace summary: {}", e.what());
      set_exit_code(2);
    }
  });
}

}  // namespace vramtrace::cli
