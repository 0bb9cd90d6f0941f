// What `vramtrace` says when its command line cannot be used (the list of commands, CLI11's
// parse errors in the form of the commands' own messages), and the checks of option values that
// several commands share.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdio>
#include <string>

namespace vramtrace::cli {

/// The commands of `app`, one a line: two spaces, the name padded to the longest, its one-line
/// purpose (the subcommand's description); after a usage line. Ends in a newline.
std::string command_list(const CLI::App& app);

/// Checks the command's first argument before CLI11 parses anything: without one (`vramtrace`
/// alone), with one that is not a command (`vramtrace foo`), or with an option other than
/// --help and --version, prints `vramtrace: give a command`, `vramtrace: unknown command "foo"` or
/// `vramtrace: unknown option "--x": ...`, then command_list, to `err` and returns 2 (a usage
/// error). Returns -1 when the command line names a command, or is --help or --version, for
/// CLI11 to parse.
int check_command_word(const CLI::App& app, int argc, char** argv, std::FILE* err);

/// Reports a CLI11 parse error of `app` (after app.parse threw `e`) and returns the process exit
/// code. Help and version requests are CLI11's own output, exit 0. Any other error is printed to
/// `err` as "vramtrace <command>: <message>" (the command CLI11 was parsing; "vramtrace: " when
/// none), then a line that points to `vramtrace <command> --help`; the exit code is 2, as for
/// unusable input.
int report_parse_error(CLI::App& app, const CLI::ParseError& e, std::FILE* err);

/// CLI11 check of a floating-point option: a finite number (no nan, inf, hex or trailing text)
/// in [`min`, `max`] (an end is left out of the range when `min_open` / `max_open`). The
/// refusal says what the option means, from `range_words` ("a ratio >= 1: reserved memory is
/// never below allocated memory"); `name` is the check's name in --help ("RATIO").
CLI::Validator number_check(double min, bool min_open, double max, bool max_open, std::string range_words,
                            std::string name = "NUMBER");

/// Reads `text` as number_check reads it: a finite decimal number, the whole text; false
/// otherwise.
bool parse_finite(const std::string& text, double& out);

/// Why a command must not write its output file `path` (-o), or "" when it may: the file exists
/// and `force` (--force) is not given ("output file PATH already exists (--force overwrites
/// it)"), or `path` is a directory (whatever `force` says). A link counts as existing, dangling
/// or not. "-" (standard output) and "" may always be written. A usage error: exit 2.
std::string existing_output_error(const std::string& path, bool force);

}  // namespace vramtrace::cli
