// `vramtrace summary TRACE... [--json]`: memory_summary()-style tables and the trace's peak; with
// several traces (files, globs, a directory) first the process x device view (processes.h).
#include <cstdio>

#include "analyses/processes.h"
#include "analyses/summary.h"
#include "commands/commands.h"
#include "commands/log.h"
#include "commands/progress.h"
#include "model/load_models.h"
#include "model/parallel_map.h"
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
      // Each trace is read, rendered and reduced to its figures on its own (several at once):
      // a job's directory never holds more than a few full models.
      struct Part {
        TraceModel model;  // after drop_detail: what the process x device view reads
        SummaryText text;
        nlohmann::json json;
      };
      std::vector<Part> parts;
      {
        const ReadProgressScope progress("summary");
        const std::vector<std::string> paths = traces_to_read(opts->traces, opts->level, "summary");
        const bool json = opts->json;
        parts = parallel_map<Part>(paths.size(), [&paths, json](std::size_t i) {
          Part p;
          p.model = std::move(load_models({paths[i]}).front());
          if (json)
            p.json = summary_trace_json(p.model);
          else
            p.text = summary_text_of(p.model);
          drop_detail(p.model);
          return p;
        });
      }
      std::vector<TraceModel> models;
      models.reserve(parts.size());
      for (auto& p : parts) models.push_back(std::move(p.model));
      if (opts->json) {
        nlohmann::json traces = nlohmann::json::array();
        for (auto& p : parts) traces.push_back(std::move(p.json));
        nlohmann::json j = {{"unfinished_runs", unfinished_runs_json(models)}, {"traces", std::move(traces)}};
        if (models.size() > 1) j["processes"] = process_device_json(process_device_view(models));
        std::fputs(j.dump(2).c_str(), stdout);
        std::fputc('\n', stdout);
      } else {
        std::vector<SummaryText> texts;
        texts.reserve(parts.size());
        for (auto& p : parts) texts.push_back(std::move(p.text));
        // The runs that did not finish come first, then the process x device view of several traces.
        const std::string view = models.size() > 1 ? render_process_device_text(process_device_view(models)) : "";
        std::fputs(join_summary_text(texts, view).c_str(), stdout);
      }
      set_exit_code(0);
    } catch (const TraceError& e) {
      logger().error("vramtrace summary: {}", e.what());
      set_exit_code(2);
    }
  });
}

}  // namespace vramtrace::cli
