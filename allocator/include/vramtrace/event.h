// The allocator's event stream: one fixed-size record per allocator action, PyTorch's action names.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include "vramtrace/types.h"

namespace vramtrace {

struct Snapshot;

// One list drives the enum, the names and the parser (see docs/design.md, "one list").
// Names are PyTorch's TraceEntry actions (torch/csrc/cuda/memory_snapshot.cpp) plus `mark`.
#define VRAMTRACE_ACTIONS(X) \
  X(alloc)                   \
  X(free_requested)          \
  X(free_completed)          \
  X(segment_alloc)           \
  X(segment_free)            \
  X(segment_map)             \
  X(segment_unmap)           \
  X(oom)                     \
  X(snapshot)                \
  X(mark)

enum class Action : std::uint8_t {
#define VRAMTRACE_ACTION_ENUM(name) name,
  VRAMTRACE_ACTIONS(VRAMTRACE_ACTION_ENUM)
#undef VRAMTRACE_ACTION_ENUM
};

/// PyTorch's spelling of an action ("alloc", "segment_map", ...). Never null.
const char* action_name(Action a) noexcept;
/// Inverse of action_name; nullopt for an unknown name.
std::optional<Action> parse_action(std::string_view name) noexcept;

/// Memory pool of a block or segment, PyTorch's small (<= 1 MiB rounded) and large pools.
enum class PoolKind : std::uint8_t { small = 0, large = 1 };

/// Kind of memory of a segment_* event: the caching allocator's own segment, or memory that the
/// shim passed through to the driver untouched (Event::aux of the shim's segment events, "k" in
/// docs/trace-format.md; the values are the format's and never change).
enum class MemoryKind : std::uint8_t {
  allocator = 0,    ///< a segment of the caching allocator (never set by the shim; "k" left out)
  device = 1,       ///< plain device memory forwarded: reuse:none, stream capture, exit, disabled pool
  managed = 2,      ///< cuMemAllocManaged
  pitched = 3,      ///< cuMemAllocPitch_v2 (size = pitch * height)
  pool = 4,         ///< cuMemAllocFromPoolAsync, or cuMemAllocAsync after a custom pool was set
  pinned_host = 5,  ///< pinned host memory (cuMemHostAlloc, cuMemAllocHost_v2): not device memory
  array = 6,        ///< CUDA arrays (address = handle, size 0: not known without the driver's query)
  vmm = 7,          ///< cuMemCreate/cuMemRelease (address = handle) and cuMemMap/cuMemUnmap ranges
};

/// Whether `k`, a kind as a trace or an Event stores it (a plain integer), is `kind`. A value
/// outside the list is none of them.
constexpr bool is_memory_kind(std::uint64_t k, MemoryKind kind) noexcept {
  return k == static_cast<std::uint64_t>(kind);
}

/// The clock of Event::time_ns: CLOCK_MONOTONIC, in nanoseconds. Every event is stamped with it
/// (the allocator's, the shim's own and the trace writer's marks), and the trace's origin
/// (origin_monotonic_ns) is read from it. Thread-safe, async-signal-safe, never fails.
std::uint64_t event_time_ns() noexcept;

/// One allocator event. Fixed size (64 bytes) and trivially copyable so that the shim can append
/// it to a ring buffer without allocating or formatting on the calling thread.
///
/// Field meaning by action:
///  - alloc, free_requested, free_completed: `addr` block address, `size_bytes` the size the
///    program asked for, `block_bytes` the rounded block size handed out.
///  - segment_alloc, segment_free: `addr`/`size_bytes` the device allocation (cudaMalloc'd segment).
///  - segment_map, segment_unmap: `addr`/`size_bytes` the range of pages mapped or unmapped in an
///    expandable segment.
///  - oom: `size_bytes` the request, `block_bytes` the segment size the allocator asked the device
///    for, `aux` the device's free bytes (cudaMemGetInfo) at the failure, `addr` the allocator's
///    num_alloc_retries at the failure (its own retry included; there is no address).
///  - mark: `aux` the id of the mark's name in the sink's string table.
///
/// `stack_id` is the call stack that made the event (an id of the trace writer's stack table,
/// vramtrace/trace/stack_interner.h), 0 = none. Only allocations carry one (carries_stack):
/// freeing memory needs no stack, because the reports name memory by the code that allocated it.
struct Event {
  std::uint64_t time_ns = 0;  ///< event_time_ns(): CLOCK_MONOTONIC in nanoseconds
  DevicePtr addr = 0;
  std::uint64_t size_bytes = 0;
  std::uint64_t block_bytes = 0;
  std::uint64_t stream = 0;  ///< StreamId::value
  std::uint64_t aux = 0;
  std::int32_t device = 0;
  std::uint32_t thread_id = 0;  ///< kernel thread id (gettid) of the caller, 0 in replay
  Action action = Action::alloc;
  PoolKind pool = PoolKind::large;
  std::uint16_t entry_point = 0;  ///< shim's hook id (shim/src/base/hooks.def), 0 = not from the shim
  std::uint32_t stack_id = 0;     ///< call stack of an allocation (carries_stack), 0 = none recorded
};
static_assert(sizeof(Event) == 64, "Event must stay 64 bytes: it is copied into the trace ring buffer");

/// Whether events of action `a` carry a call stack (Event::stack_id, "st" in
/// docs/trace-format.md): the actions that make memory exist, alloc, segment_alloc, segment_map,
/// and the oom that refused it.
constexpr bool carries_stack(Action a) noexcept {
  return a == Action::alloc || a == Action::segment_alloc || a == Action::segment_map || a == Action::oom;
}

/// Receives allocator events. Implemented by the trace writer (shim), by replay statistics and by
/// tests.
///
/// Thread safety: the allocator calls `record` with its per-device lock held, so an
/// implementation must be cheap and must never call back into the allocator.
class EventSink {
 public:
  virtual ~EventSink() = default;
  /// One event; must not throw and should not block for long.
  virtual void record(const Event& e) noexcept = 0;
  /// An OOM, with the allocator's state at the failure. Default: record(e) only.
  virtual void record_oom(const Event& e, const Snapshot& state) noexcept { record(e); }
};

}  // namespace vramtrace
