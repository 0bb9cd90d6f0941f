// Subcommand registration for the `vramtrace` command. Each register_X adds subcommand X to the
// app with a callback that sets the process exit code through set_exit_code.
#pragma once

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

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
void register_tune(CLI::App& app);
void register_export(CLI::App& app);

/// Refuses an empty value for every option and positional of every subcommand of `app` (an empty
/// value is nearly always an unset shell variable: `--limit "$CAP"`), so that none is taken as
/// "not given". Options named in `empty_allowed` as "SUBCOMMAND --option" keep empty values
/// (`replay --conf ''`: the default settings, a column of the comparison). Call after every register_X. A refusal is a
/// usage error (exit 2).
void refuse_empty_values(CLI::App& app, const std::vector<std::string>& empty_allowed);

/// CLI11 check: a byte size in the grammar of every size option (512MiB, 14.58GiB, 16GB, a plain
/// byte count, a card name such as T4; vramtrace/units.h parse_size), greater than 0 unless
/// `allow_zero`.
CLI::Validator size_check(bool allow_zero = false);

/// CLI11 check: a whole number >= 0 (a count), in plain words when it is not.
CLI::Validator count_check();

/// Adds `--level auto|tensors|device` to `cmd` (readers/trace_paths.h, TraceLevel), stored in
/// `level` (default "auto").
void add_level_option(CLI::App* cmd, std::string& level);

/// The trace files a report command reads: its arguments expanded (expand_trace_paths), then the
/// level chosen (choose_trace_level), each decision logged as "vramtrace <command>: <note>" on
/// stderr. Throws TraceError as expand_trace_paths does; `level` is one add_level_option allows.
std::vector<std::string> traces_to_read(const std::vector<std::string>& args, const std::string& level,
                                        const char* command, bool include_summary_json = false);

/// Exit code conventions: 0 success, 1 a check failed / OOM found where asked, 2 unusable input
/// or usage.
void set_exit_code(int code);
int exit_code();

}  // namespace vramtrace::cli
