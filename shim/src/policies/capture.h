// Stream capture state, for Note [capture passes through]: while any stream is being captured
// into a CUDA graph, device allocations are forwarded to the driver (and traced), never served or
// grown from the cache: a captured cudaMallocAsync must become a graph allocation node, and a
// global-mode capture makes cudaMalloc fail, which the program must see as it would without us.
#pragma once

#include "base/streams.h"

namespace vramtrace::shim {

/// A capture began on `key` (cuStreamBeginCapture_v2 succeeded).
void capture_begin(StreamId key) noexcept;
/// A capture on `key` ended (cuStreamEndCapture returned, successfully or not).
void capture_end(StreamId key) noexcept;
/// Whether any capture is active in the process. Lock-free.
bool capture_active() noexcept;
/// Forget everything (fork child).
void capture_after_fork_child() noexcept;

}  // namespace vramtrace::shim
