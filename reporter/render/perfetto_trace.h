// `vramtrace export --format perfetto`: traces as the Chrome/Perfetto JSON trace event format,
// for ui.perfetto.dev, chrome://tracing and trace_processor (docs/export.md).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "render/memory_viz.h"

namespace vramtrace {

/// One traced process to export.
struct PerfettoProcess {
  const TraceModel* model = nullptr;  ///< its model (the counters come from its timeline)
  EventsOpener open_events;           ///< a fresh reader of the same trace (the allocations)
};

/// Writes {"traceEvents": [...], "displayTimeUnit": "ns"} to `sink`:
///  - per process (pid: the trace's own when the traces' pids are known and distinct, else 1, 2,
///    ... in order) a process_name, and per device a thread (tid: ordinal + 1) named "cuda:N";
///  - per device, counter events ("ph": "C", name "cuda:N") of `allocated` and `reserved` bytes,
///    from the model's timeline: each point of it is its interval's maximum at its start and the
///    value after its last event at its end, and the state at the peak (DeviceModel::at_peak) is
///    a point of its own, so the counters reach exactly the figures `vramtrace summary` reports;
///    and `outside_allocator`, the bytes the shim forwarded to the driver past its cache
///    (is_forwarded: device, managed, pitched, pool memory; counted in allocated and reserved
///    too), when the trace has any;
///  - per allocation an async slice ("ph": "b" at its alloc, "e" at its free_completed, cat
///    "alloc", numeric id, name its block size), with args address, size (requested bytes),
///    block_size, stream and site (the top frame of its call stack, when recorded); an instant
///    ("ph": "n") at its free_requested. An allocation still alive ends at the device's last
///    event, with args alive_at_end. Frees of blocks allocated before the history began have no
///    slice.
/// Times ("ts") are microseconds, with nanosecond decimals, since the earliest event of all the
/// traces, so that processes line up. Throws TraceError from the readers and whatever `sink`
/// throws. Not thread-safe.
void write_perfetto_json(const std::vector<PerfettoProcess>& processes, const ByteSink& sink);

}  // namespace vramtrace
