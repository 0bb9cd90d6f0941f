// Opening a trace of any known format: compression and format are detected from the content.
#pragma once

#include <memory>
#include <string>

#include "vramtrace/trace/reader.h"

namespace vramtrace {

/// Opens a trace, detecting compression by magic bytes (gzip, zstd, none) and the format by
/// content (after decompression):
///  - first byte 0x80 (pickle PROTO): a PyTorch snapshot (torch.cuda.memory._dump_snapshot);
///  - a first line that is a JSON object with "format": NAME: the format registered as NAME;
///  - a first line that is a JSON object with "kind": "header", or with "action" (an entry):
///    PyTorch's allocator history as JSON lines ("torchtrace", tests/data/torch-h200/README.md).
/// The native frames of a vramtrace trace's stacks are named by native_frame_namer
/// (readers/native_names.h). Throws TraceError if the file cannot be opened or is of no known
/// format.
std::unique_ptr<TraceReader> open_trace(const std::string& path);

/// Opens one trace format. Throws TraceError.
using TraceOpener = std::unique_ptr<TraceReader> (*)(const std::string& path);

/// Registers the opener of a JSON Lines format whose first line is a header object with
/// "format": `name` (e.g. "vramtrace"). open_trace looks the name up when it sees such a line.
/// A later registration of the same name replaces the earlier one. Thread-safe; call it before
/// open_trace (e.g. at the start of main, or from the format's own initialisation).
///
/// "vramtrace" needs no registration: open_trace calls open_vramtrace_trace (same library)
/// unless another opener was registered under that name.
void register_trace_format(const std::string& name, TraceOpener opener);

}  // namespace vramtrace
