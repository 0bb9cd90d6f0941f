// Subcommand registration for the `vramtrace` command. Each register_X adds subcommand X to the
// app with a callback that sets the process exit code through set_exit_code.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
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

/// What a size option bounds, for size_check: which values are surely mistakes there.
enum class SizeUse : std::uint8_t {
  /// The memory a program may use (replay/oom --capacity, run/tune --limit): more than 0 bytes; a
  /// number without a unit under 64 MiB is refused ("3090" meant the card RTX3090, "16" meant
  /// GiB: no GPU program fits in less).
  capacity,
  /// A budget on a peak (check --max-peak-reserved, --max-peak-allocated): 0 or more; a number
  /// without a unit from 1 byte to under 1 MiB is refused (PyTorch reserves at least a 2 MiB
  /// segment, kSmallBuffer, so such a budget only passes a run that reserves nothing: write 0).
  peak_budget,
  /// Any other amount (check --max-growth and --noise-margin, diff --noise-margin): 0 or more,
  /// any number of bytes (a growth of 4096 bytes a step is a real budget).
  amount,
};

/// CLI11 check of a size option, the one place every command's sizes pass through: the grammar
/// of every size option (512MiB, 14.58GiB, 16GB, a plain byte count, a card name such as T4;
/// vramtrace/units.h parse_size, with a budget's bounds, analyses/budgets.h, for budgets and
/// amounts), the refusals of `use` (SizeUse), each a usage error (exit 2) naming the value and
/// what to write instead, and, for a size in a decimal unit (KB, MB, GB, TB), one note on stderr
/// a value: "vramtrace: note: 16GB = 16 x 10^9 bytes = 14.90 GiB; for a card, give its name ...".
/// Thread-safe.
CLI::Validator size_check(SizeUse use = SizeUse::capacity);

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
