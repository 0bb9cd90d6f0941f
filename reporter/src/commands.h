// Subcommand registration for the `vramtrace` command. Each register_X adds subcommand X to the
// app with a callback that sets the process exit code through set_exit_code.
#pragma once

#include <CLI/CLI.hpp>

#ifndef VRAMTRACE_VERSION_STRING
#define VRAMTRACE_VERSION_STRING "0.1.0"
#endif

namespace vramtrace::cli {

void register_replay(CLI::App& app);
void register_run(CLI::App& app);
void register_explain(CLI::App& app);
void register_summary(CLI::App& app);
void register_oom(CLI::App& app);
void register_report(CLI::App& app);
void register_check(CLI::App& app);
void register_diff(CLI::App& app);

/// Exit code conventions: 0 success, 1 a check failed / OOM found where asked, 2 unusable input
/// or usage.
void set_exit_code(int code);
int exit_code();

}  // namespace vramtrace::cli
