// An OOM seen from below a framework's caching allocator: what a trace of that allocator's
// segments (model/allocation_level.h) can say about it, and what it cannot.
#pragma once

#include "analyses/oom/diagnosis.h"
#include "model/allocation_level.h"

namespace vramtrace {

/// Note [an OOM seen from below the allocator]
/// In a trace whose allocations are a framework allocator's segments (Note [the level of a
/// trace]), the model's allocated memory is what that allocator held in segments (its reserved
/// memory), and what the shim itself cached below it is memory outside the framework. How much
/// the framework held free inside its segments, and its largest free block, are not in the trace:
/// "fragmentation" and "capacity" (free memory scattered in its cache, or too little of it) cannot
/// be told apart. The figures keep what is known (the request, the device's free memory, the cap,
/// the framework's segments as its reserved memory) and drop the cache figures; the diagnosis then
/// gives only what needs none of them (the request larger than the device or the cap, a device
/// that had room, memory outside the framework that covers the shortfall), else `undetermined`
/// with the figures it has and the way to record the tensor level.
///
/// Rewrites `f` to those figures, from the model's `allocated_bytes` (the framework's segments),
/// and returns their diagnosis; `how` is the advice that records the tensor level. Pure.
Diagnosis diagnose_below_allocator(OomFigures& f, std::uint64_t framework_segments_bytes,
                                   const AllocationLevelFinding& level, const std::string& how);

}  // namespace vramtrace
