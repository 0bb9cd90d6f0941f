// The trace arguments of the report commands: files, glob patterns and directories, expanded to
// the list of trace files to read (one per process, for jobs with several processes).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace vramtrace {

/// What a directory argument stands for.
struct TracePathOptions {
  /// Also take `*.json` (and `.json.gz`, `.json.zst`) files of a directory: the `vramtrace
  /// summary --json` documents that `check` and `diff` read. Off for summary/report/oom, which
  /// read traces only.
  bool include_summary_json = false;
  /// With include_summary_json: whether a `.json` file found in a directory is a summary document
  /// (reads it); the others (a program's config.json, ...) are left out, each with a line in
  /// `skipped`. Unset: every `.json` is taken. PyTorch's sidecars (`*.torch.pickle.json`, read
  /// beside their snapshot) are never taken from a directory.
  std::function<bool(const std::string&)> is_summary;
  /// Where the lines about files left out of a directory go (may be null).
  std::vector<std::string>* skipped = nullptr;
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

/// Which level of a PyTorch process to read when `vramtrace run` left both its shim trace
/// (device level: PyTorch's segments and every other device allocation) and its tensor-level
/// snapshot (`<trace name>.torch.pickle`, PyTorch's own allocator history: docs/tensor-level.md).
enum class TraceLevel {
  automatic,  ///< the tensor level where a trace has one, else the trace as given
  tensors,    ///< the same, with a note for each trace that has no tensor level
  device,     ///< the shim's traces; a snapshot that is the companion of a listed trace is left out
};

/// Parses "auto", "tensors" or "device"; nullopt otherwise. Pure.
std::optional<TraceLevel> parse_trace_level(const std::string& text);

/// The tensor-level snapshot `vramtrace run` wrote beside a vramtrace trace: the trace's name
/// without `.jsonl` (and `.zst`/`.gz`) plus `.torch.pickle`, or plus `.<pid>.torch.pickle`
/// (names without `%p` get the pid), the pid read from the trace's header. Failing those names
/// (the two files' `%t` can fall in different seconds), the one snapshot of the same directory
/// whose sidecar names the same process (same_process). Empty when there is none, when `trace`
/// is not a vramtrace trace, or when it cannot be read (the caller's open then reports why).
/// Opens the trace (for its format and pid) only when a snapshot is beside it, so that a trace
/// without one is opened once, by the command that reads it; reads the directory's sidecars only
/// when the names do not match.
std::string tensor_level_companion(const std::string& trace);

/// The other way: the shim's trace of the process whose tensor-level snapshot is `snapshot`, a
/// vramtrace trace whose tensor_level_companion is `snapshot`: `snapshot`'s name without
/// `.torch.pickle` (and without the `.<pid>` of names without `%p`) plus `.jsonl`, `.jsonl.zst`
/// or `.jsonl.gz`, else the one vramtrace trace of the same directory of the process the
/// snapshot's sidecar names (same_process). Empty when there is none. Reads headers and the
/// sidecar only.
std::string device_level_companion(const std::string& snapshot);

/// Whether a shim trace (its header's pid, host and start, and its end when the trailer is known:
/// 0 otherwise, all times Unix ns) and a snapshot's sidecar (pid, host, written_at) describe one
/// process: the same pid and host, and the sidecar written within the trace's span (1 s of
/// slack; the exit write comes before the shim's trailer), so that a pid reused by another run
/// in the same directory is not taken. Pure.
bool same_process(std::int64_t pid, const std::string& host, std::int64_t start_ns, std::int64_t end_ns,
                  std::int64_t sidecar_pid, const std::string& sidecar_host, std::int64_t written_ns);

/// What is missing of the tensor level of the shim trace `trace`, as one note for the reports, or
/// "" when nothing is known to be missing. With `companion` (its snapshot, tensor_level_companion)
/// whose sidecar is not the exit write (`final` false: an OOM's or a manual write, then no exit
/// write, as after SIGKILL): the tensor level ends at that write, and the note gives its time into
/// the trace. Without one: a sidecar beside the trace (`<stem>.torch.pickle.json`, or with the
/// trace's pid) of the same process whose `reason` is "started" means recording was on and nothing
/// was written, so all of the tensor level is missing. Reads the trace's header and the sidecar;
/// never throws for a missing or damaged file (no note then). Not thread-safe (reads files).
std::string tensor_level_gap(const std::string& trace, const std::string& companion);

/// Applies `level` to expanded trace paths: each vramtrace trace with a companion snapshot is
/// replaced by it (automatic, tensors) or keeps it out of the list (device); a companion that is
/// also listed is read once. One line per decision is appended to `notes` ("<trace>: tensor
/// level from <snapshot> ..., with this trace's device level for the memory ledger; --level
/// device for the shim's trace alone"; for a snapshot given itself whose shim trace is beside it,
/// that the ledger reads that trace too), for the command to print on stderr. Order is kept.
/// Not thread-safe (reads files).
std::vector<std::string> choose_trace_level(const std::vector<std::string>& paths, TraceLevel level,
                                            std::vector<std::string>& notes);

}  // namespace vramtrace
