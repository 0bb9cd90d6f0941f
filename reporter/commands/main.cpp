// The `vramtrace` command: one subcommand per file (cmd_*.cpp), registered here.
#include <CLI/CLI.hpp>

#include <cstdio>

#include "commands/commands.h"

int main(int argc, char** argv) {
  CLI::App app{"vramtrace: where did the GPU memory go?"};
  app.require_subcommand(1);
  app.set_version_flag("--version", VRAMTRACE_VERSION_STRING);
  vramtrace::cli::register_replay(app);
  vramtrace::cli::register_run(app);
  vramtrace::cli::register_explain(app);
  vramtrace::cli::register_summary(app);
  vramtrace::cli::register_oom(app);
  vramtrace::cli::register_report(app);
  vramtrace::cli::register_check(app);
  vramtrace::cli::register_diff(app);
  vramtrace::cli::register_tune(app);
  vramtrace::cli::refuse_empty_values(app, {"replay --conf"});
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int rc = app.exit(e);
    return rc == 0 ? 0 : 2;  // usage errors exit 2, as unusable input
  }
  return vramtrace::cli::exit_code();
}
