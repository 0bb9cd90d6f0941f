// The `vramtrace` command: one subcommand per file (cmd_*.cpp), registered here.
#include <poll.h>
#include <sys/stat.h>
#include <unistd.h>
#include <CLI/CLI.hpp>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "commands/commands.h"
#include "commands/progress.h"
#include "commands/usage.h"

namespace {

// Whether standard output is a pipe or FIFO with no reader left: Linux reports POLLERR on a pipe's
// write end once its read end is closed. A write that failed earlier (its errno since lost) is
// then the closed pipe's.
bool stdout_reader_gone() {
  struct stat st {};
  if (::fstat(STDOUT_FILENO, &st) != 0 || !S_ISFIFO(st.st_mode)) return false;
  pollfd p{STDOUT_FILENO, POLLOUT, 0};
  return ::poll(&p, 1, 0) == 1 && (p.revents & POLLERR) != 0;
}

}  // namespace

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
  // Output lost to a full disk or an I/O error is a failure, never a silent success: a CI step
  // that saved `summary --json` as its baseline would otherwise keep an empty file. A pipe whose
  // reader has gone (`| head`, with SIGPIPE ignored; with the default disposition the signal has
  // ended the process already) is the reader's choice, as for ripgrep: no message, and the
  // command's own status, so that `check ... | head` still fails a failing run. stdio keeps the
  // errno of the failed write only until the next call, so it is read at the first failure.
  errno = 0;
  const bool flushed = std::fflush(stdout) == 0;
  const int write_errno = errno;
  if (!flushed || std::ferror(stdout)) {
    if (write_errno == EPIPE || stdout_reader_gone()) return vramtrace::cli::exit_code();
    std::fprintf(stderr, "vramtrace: cannot write the output: %s\n",
                 write_errno != 0 ? std::strerror(write_errno)
                                  : "a write to standard output failed (a full disk, a closed pipe?)");
    return 2;
  }
  return vramtrace::cli::exit_code();
}
