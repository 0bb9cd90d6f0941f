// Which entry point a call came in by, counted once.
//
// Note [count once]: a program's cudaMalloc enters our runtime hook, which calls the real cudart,
// which calls cuMemAlloc_v2 through the pointer our resolver handed it -- our driver hook again.
// The outermost hook on the thread owns the call: it is counted there, and its id is what the
// driver hook stamps on the allocator's events (Event::entry_point). A driver hook reached with
// no outer hook is itself the entry point (static cudart, cuGetProcAddress users, -lcuda).
//
// Note [recursion guard]: the caching allocator reaches the driver only through the real
// function pointers in CudaDriverApi, never through our exports, so it cannot re-enter a hook.
// The guard below is the second line of defence: a driver hook entered while the shim is already
// doing internal work on this thread (e.g. a driver that calls its own exports back) passes
// straight through, uncounted.
#pragma once

#include <atomic>
#include <cstdint>

#include "base/hooks.h"
#include "base/log.h"

namespace vramtrace::shim {

/// Calls per hook, counted at the level where the call entered. Relaxed atomics.
extern std::atomic<std::uint64_t> g_calls[kHookCount];

struct ThreadEntry {
  std::uint16_t entry = 0;     ///< outermost hook of the call in progress, 0 = none
  std::uint16_t internal = 0;  ///< >0 while the shim does its own work (Note [recursion guard])
  std::uint32_t stack = 0;     ///< call stack of the call in progress (base/stacks.h), once stack_taken
  bool stack_taken = false;    ///< the call's stack was captured (once per outermost call)
  bool capturing = false;      ///< a stack capture is running on this thread (Note [stack capture])
};
extern constinit thread_local ThreadEntry t_entry;

/// RAII: marks the call in progress on this thread. Counts `h` only when it is the outermost.
/// At debug, logs the hook's first call and its road (log_hook_entered).
class EntryScope {
 public:
  explicit EntryScope(Hook h) noexcept {
    std::uint16_t outer = t_entry.entry;
    if (outer == 0) {
      outer_ = true;
      outer = static_cast<std::uint16_t>(h);
      t_entry.entry = outer;
      g_calls[static_cast<std::size_t>(h)].fetch_add(1, std::memory_order_relaxed);
    }
    log_hook_entered(h, outer);
  }
  ~EntryScope() {
    if (outer_) {
      t_entry.entry = 0;
      t_entry.stack = 0;
      t_entry.stack_taken = false;
    }
  }
  EntryScope(const EntryScope&) = delete;
  EntryScope& operator=(const EntryScope&) = delete;
  /// The hook id to stamp on events: the outermost entry point of this call.
  std::uint16_t entry() const noexcept { return t_entry.entry; }
  bool outer() const noexcept { return outer_; }
  /// True when the shim itself is working on this thread (hooks must pass through).
  static bool internal() noexcept { return t_entry.internal != 0; }

 private:
  bool outer_ = false;
};

/// RAII: the shim's own work on this thread (see Note [recursion guard]).
class InternalScope {
 public:
  InternalScope() noexcept { ++t_entry.internal; }
  ~InternalScope() { --t_entry.internal; }
  InternalScope(const InternalScope&) = delete;
  InternalScope& operator=(const InternalScope&) = delete;
};

}  // namespace vramtrace::shim
