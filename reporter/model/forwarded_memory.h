// Which segment records of a trace are segments of the allocator's layout, and which are memory
// the shim forwarded to the driver past its cache: the model's rule (trace_model.cpp), asked by
// every other reader of the records that must agree with it (the exports).
#pragma once

#include "vramtrace/trace/reader.h"

namespace vramtrace {

/// Whether a segment_alloc/segment_free record is a segment of the layout: the caching
/// allocator's own, or device memory with an address and a size that the shim passed through
/// (device, managed, pitched, pool). Pinned host memory, arrays and VMM handles are not. Pure.
bool lays_out_as_segment(const TraceRecord& r) noexcept;

/// Whether a record is memory the shim forwarded to the driver (any TraceRecord::memory_kind but
/// the caching allocator's own). Note [forwarded memory is allocated] (trace_model.cpp): no cache
/// stands between the program and it, so the whole segment is one block the program holds. Pure.
bool is_forwarded(const TraceRecord& r) noexcept;

}  // namespace vramtrace
