// `vramtrace summary TRACE... [--json]`: memory_summary()-style tables and the trace's peak.
#include <cstdio>

#include "commands.h"
#include "load_models.h"
#include "summary.h"

namespace vramtrace::cli {

void register_summary(CLI::App& app) {
  auto* cmd = app.add_subcommand("summary", "Per process and device: torch.cuda.memory_summary() figures, the peak, what was left");
  struct Opts {
    std::vector<std::string> traces;
    bool json = false;
  };
  auto opts = std::make_shared<Opts>();
  cmd->add_option("traces", opts->traces, "Trace files (PyTorch JSON lines, snapshot pickle, vramtrace trace)")->required();
  cmd->add_flag("--json", opts->json, "Print JSON with PyTorch's flat statistic names");
  cmd->callback([opts]() {
    try {
      auto models = load_models(opts->traces);
      if (opts->json) {
        std::fputs(summary_json(models).dump(2).c_str(), stdout);
        std::fputc('\n', stdout);
      } else {
        std::fputs(render_summary_text(models).c_str(), stdout);
      }
      set_exit_code(0);
    } catch (const TraceError& e) {
      std::fprintf(stderr, "vramtrace summary: %s\n", e.what());
      set_exit_code(2);
    }
  });
}

}  // namespace vramtrace::cli
