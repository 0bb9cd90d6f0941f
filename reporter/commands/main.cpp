// The `vramtrace` command: one subcommand per file (cmd_*.cpp), registered here.
#include <CLI/CLI.hpp>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "commands/commands.h"
#include "commands/progress.h"
#include "commands/usage.h"

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
  vramtrace::cli::register_export(app);
  vramtrace::cli::refuse_empty_values(app, {"replay --conf"});
  vramtrace::cli::add_quiet_flags(app);
  if (const int rc = vramtrace::cli::check_command_word(app, argc, argv, stderr); rc >= 0) return rc;
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return vramtrace::cli::report_parse_error(app, e, stderr);  // usage errors exit 2, as unusable input
  }
  // Output lost to a full disk or a closed pipe is a failure, never a silent success: a CI step
  // that saved `summary --json` as its baseline would otherwise keep an empty file.
  errno = 0;
  if (std::fflush(stdout) != 0 || std::ferror(stdout)) {
    std::fprintf(stderr, "vramtrace: cannot write the output: %s\n",
                 errno != 0 ? std::strerror(errno) : "a write to standard output failed (a full disk, a closed pipe?)");
    return 2;
  }
  return vramtrace::cli::exit_code();
}
