// The progress line of the report commands on standard error, and --quiet, which silences it.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>

#include <CLI/CLI.hpp>

namespace vramtrace::cli {

/// Adds `--quiet,-q` ("no progress line") to every subcommand of `app`; set_quiet records it.
/// Call after every register_X.
void add_quiet_flags(CLI::App& app);

/// Whether --quiet was given. Thread-safe.
bool quiet();

/// One line of progress, rewritten in place ("\r", then the text, then erase-to-end-of-line) and
/// erased by finish(). Nothing is printed unless `terminal` (the stream is a terminal: a log file
/// or a pipe gets no carriage returns) and not `silenced`, nor before `delay_s` seconds of work
/// (short work stays silent), nor more often than every `every_s` seconds. The caller gives the
/// elapsed time, so that the logic is tested without a clock. Not thread-safe.
class ProgressLine {
 public:
  ProgressLine(std::string label, std::FILE* out, bool terminal, bool silenced, double delay_s = 1.0,
               double every_s = 0.25);
  ProgressLine(const ProgressLine&) = delete;
  ProgressLine& operator=(const ProgressLine&) = delete;
  ~ProgressLine();

  /// `elapsed_s` seconds into the work, `done` of `total` bytes read (total 0: unknown, no
  /// percentage).
  void update(double elapsed_s, std::uint64_t done, std::uint64_t total);
  /// Erases the line if one was shown. Idempotent; the destructor calls it.
  void finish();
  /// Whether a line is on the screen now.
  bool shown() const { return shown_; }

 private:
  std::string label_;
  std::FILE* out_;
  bool enabled_;
  double delay_s_, every_s_;
  double last_s_ = 0;
  bool shown_ = false;
};

/// The progress of the passes over traces while it lives (readers/read_progress.h): a
/// ProgressLine labelled "vramtrace COMMAND: reading" on standard error, enabled when standard
/// error is a terminal and --quiet was not given. One at a time, on the main thread (it installs
/// a process-wide hook); the line is erased when it ends, before the command prints its result.
class ReadProgressScope {
 public:
  explicit ReadProgressScope(const std::string& command);
  ReadProgressScope(const ReadProgressScope&) = delete;
  ReadProgressScope& operator=(const ReadProgressScope&) = delete;
  ~ReadProgressScope();
};

}  // namespace vramtrace::cli
