// `vramtrace report TRACE... -o report.html`: the self-contained HTML report.
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>

#include "commands/commands.h"
#include "commands/log.h"
#include "commands/progress.h"
#include "commands/usage.h"
#include "model/load_models.h"
#include "readers/trace_paths.h"
#include "render/report_html.h"

namespace vramtrace::cli {

void register_report(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "report", "Write a self-contained HTML report (timeline, allocator state at the peak and at OOMs)");
  struct Opts {
    std::vector<std::string> traces;
    std::string output = "report.html";
    std::string title;
    std::string level = "auto";
    bool force = false;
  };
  auto opts = std::make_shared<Opts>();
  cmd->add_option(
         "traces", opts->traces,
         "Trace files, globs, or directories (all traces in them); several traces add the process x device view")
      ->required();
  cmd->add_option("-o,--output", opts->output,
                  "Output HTML file (default report.html; - for standard output); an existing one is kept");
  cmd->add_flag("--force", opts->force, "Overwrite the output file if it exists");
  cmd->add_option("--title", opts->title, "Page title");
  add_level_option(cmd, opts->level);
  cmd->callback([opts]() {
    // Before the traces are read: a report of many minutes must not end in this refusal.
    if (const std::string refusal = existing_output_error(opts->output, opts->force); !refusal.empty()) {
      logger().error("vramtrace report: {}", refusal);
      set_exit_code(2);
      return;
    }
    try {
      ReportOptions ro;
      ro.title = opts->title;
      std::vector<TraceModel> models;
      {
        const ReadProgressScope progress("report");
        const std::vector<std::string> paths = traces_to_read(opts->traces, opts->level, "report");
        models = load_models(paths, report_model_options(ro, paths.size()));
      }
      std::string page = render_report_html(models, ro);
      if (opts->output == "-") {  // standard output, as for check and export; main() checks the write
        std::fwrite(page.data(), 1, page.size(), stdout);
        set_exit_code(0);
        return;
      }
      // Every step checked, the close too (a full disk may show only when the buffer is
      // flushed), with the system's reason.
      errno = 0;
      std::ofstream out(opts->output, std::ios::binary);
      if (out) out.write(page.data(), static_cast<std::streamsize>(page.size()));
      if (out) out.close();
      if (!out) {
        const int e = errno;
        logger().error("vramtrace report: cannot write {}: {}", opts->output,
                       e != 0 ? std::strerror(e) : "the output stream failed");
        set_exit_code(2);
        return;
      }
      logger().info("vramtrace report: wrote {} ({:.1f} KiB)", opts->output, static_cast<double>(page.size()) / 1024.0);
      set_exit_code(0);
    } catch (const TraceError& e) {
      logger().error("vramtrace report: {}", e.what());
      set_exit_code(2);
    }
  });
}

}  // namespace vramtrace::cli
