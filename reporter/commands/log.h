// The `vramtrace` command's diagnostics: one spdlog logger for the whole process.
#pragma once

#include <spdlog/logger.h>

namespace vramtrace::cli {

/// The command's logger: spdlog, to stderr, each message as written (pattern "%v") but with its
/// control characters, line breaks included, escaped as printable() does (messages quote a
/// trace's own text and the command line's; each is one line). Every message carries its own
/// "vramtrace <subcommand>: " prefix, so that a line is byte for byte what the command printed
/// before it had a logger (tests assert these texts). Level info, nothing filtered:
/// VRAMTRACE_LOG_LEVEL is the shim's, not the command's. For diagnostics only (usage and input
/// errors at error, notes such as "wrote report.html" at info); reports go to stdout, and the end
/// screen of `vramtrace run` stays plain stderr output. Created on first use and never destroyed.
/// Thread-safe (spdlog's stderr sink writes each line under its mutex and flushes it, so lines
/// keep their order with the plain stderr writes around them).
spdlog::logger& logger();

}  // namespace vramtrace::cli
