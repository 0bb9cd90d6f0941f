// Whether a trace records its run to the end: one rule, read by every command that judges or
// shows a whole run (check's gate, summary's first lines, the report's banner).
//
// Note [a run that did not finish]
// A trace records the whole run only when its writer says the run ended and every event it wrote
// is in the file. Two things break that, and either makes the run "did not finish":
//
//  1. The trace is incomplete (TraceReader::incomplete): it does not end the way its format ends a
//     finished run. vramtrace's own format: no trailer (the trailer is written when the process
//     exits normally, so a process killed by SIGKILL, the OOM killer, a lost node or a crash has
//     none), or a last line cut mid-way, or a compressed stream cut. A PyTorch snapshot with the
//     sidecar `vramtrace run` writes: a sidecar whose last write is not the exit write (an OOM's
//     or a manual one, after which the process died), or one written in a signal handler.
//     PyTorch's history as JSON lines (torchtrace) has no trailer: it is written in one go after
//     the run, so only a last line without its '\n' says it was cut; a line cut mid-way or a cut
//     gzip/zstd stream is refused as damaged (TraceError, exit 2), as is a pickle cut before its
//     STOP opcode (docs/ci.md, "Runs that did not finish", has the table).
//  2. The trace lost events (TraceReader::lost_events): its trailer counts events the file does
//     not hold, or events its writer dropped.
//
// Either way the figures are the trace's, not the run's: memory may have been allocated after
// the last recorded event (incomplete) or between recorded ones (lost). A step boundary
// (`vramtrace_mark`) recorded last does not make a killed run finished: the writer hands events
// to the kernel within its flush interval, so what the process did after the mark and before the
// kill (up to 100 ms of events by default, Note [trace durability] in vramtrace/trace/writer.h) may
// be gone, and nothing says the process stopped at the mark rather than inside the next step.
// `vramtrace check` fails such a run unless --allow-incomplete (docs/ci.md).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace vramtrace {

/// Why a trace's run did not finish, in words for a report (Note [a run that did not finish]):
/// `incomplete_reason` ("no trailer: ...", "its last line is cut"; "cut last line" when empty)
/// when `incomplete`, the events lost when `lost_events` > 0, both joined by "; ". Empty when the
/// run finished. Pure.
std::string unfinished_reason(bool incomplete, std::string_view incomplete_reason, std::uint64_t lost_events);

/// The line every report puts first for such a trace: "THE RUN DID NOT FINISH: PATH: REASON. ..."
/// (no newline). `reason` as unfinished_reason gives it, not empty. Pure.
std::string unfinished_run_line(std::string_view path, std::string_view reason);

}  // namespace vramtrace
