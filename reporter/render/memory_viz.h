// `vramtrace export --format memory-viz`: a trace as a PyTorch memory snapshot, the pickle that
// torch.cuda.memory._snapshot() returns and _dump_snapshot writes, for pytorch.org/memory_viz and
// `python -m torch.cuda._memory_viz` (docs/export.md).
#pragma once

#include <functional>
#include <memory>
#include <string_view>

#include "model/trace_model.h"

namespace vramtrace {

/// Receives the bytes of an export in order; throws to stop it (a failed write).
using ByteSink = std::function<void(std::string_view)>;

/// Opens a fresh reader of the trace being exported (open_trace of its path); throws TraceError.
using EventsOpener = std::function<std::unique_ptr<TraceReader>()>;

/// Writes the snapshot of one trace (one process) to `sink`:
///   {"segments": [...], "device_traces": [[...] per device ordinal], "allocator_settings": {...}}
/// `segments` is the state at the end of the trace, as PyTorch's snapshot is the state when it is
/// taken: `recorded_end` when the trace recorded one (a snapshot's own segments, non-empty), else
/// the model's end layout (TraceModel's DeviceModel::at_end). Block frames come from
/// `model.stacks`. `device_traces` are the records of the trace (read again through readers
/// from `open_events`, once per device that has events, so memory stays bounded) in PyTorch's entry shape, their call
/// stacks as `frames` (innermost first). Memory the shim forwarded to the driver appears as PyTorch would have drawn
/// it, a segment holding one block (segment_alloc then alloc; free_requested, free_completed then segment_free), as the
/// model counts it; records that are no device memory (pinned host memory, arrays, VMM handles) and marks are left out,
/// and so are blocks at addresses in no segment known at that moment (a trace without their segment events), which the
/// viewers cannot place. Sizes in bytes, times in microseconds since the Unix epoch (`time_us`). Throws TraceError from
/// the readers, and whatever `sink` throws. Not thread-safe.
void write_memory_viz(const TraceModel& model, const Snapshot* recorded_end, const EventsOpener& open_events,
                      const ByteSink& sink);

}  // namespace vramtrace
