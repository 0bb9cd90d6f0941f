// The trace arguments of the report commands: files, glob patterns and directories, expanded to
// the list of trace files to read (one per process, for jobs with several processes).
#pragma once

#include <string>
#include <vector>

namespace vramtrace {

/// What a directory argument stands for.
struct TracePathOptions {
  /// Also take `*.json` (and `.json.gz`, `.json.zst`) files of a directory: the `vramtrace
  /// summary --json` documents that `check` and `diff` read. Off for summary/report/oom, which
  /// read traces only.
  bool include_summary_json = false;
};

/// True for a file name that a directory argument picks up: vramtrace and PyTorch traces
/// (`.jsonl`, `.jsonl.gz`, `.jsonl.zst`), PyTorch snapshot pickles (`.pickle`, `.pkl`, each
/// optionally `.gz`/`.zst`), and with `include_summary_json` `.json` documents. Pure.
bool is_trace_file_name(const std::string& name, const TracePathOptions& options = {});

/// Expands the arguments in order:
///  - an existing file (or "-") is kept as given;
///  - a directory stands for every trace file directly in it (is_trace_file_name), sorted by
///    name; subdirectories are not entered;
///  - an argument with glob characters (`*`, `?`, `[`) that names no existing file is expanded
///    with glob(3), the matches sorted (the shell usually does this; quoted patterns and Windows-
///    style invocations get it here);
///  - anything else is kept, so that opening it gives the usual "cannot open" error.
/// A path given twice (directly or through a pattern) is read once. Throws TraceError when a
/// directory holds no trace file or a pattern matches nothing. Not thread-safe (glob(3)).
std::vector<std::string> expand_trace_paths(const std::vector<std::string>& args, const TracePathOptions& options = {});

}  // namespace vramtrace
