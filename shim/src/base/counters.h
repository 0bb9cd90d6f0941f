// The shim's own counters (one list: struct, names and the stats file come from it).
#pragma once

#include <atomic>
#include <cstdint>

namespace vramtrace::shim {

#define VT_SHIM_COUNTERS(X)                                                                               \
  X(cached_allocs)          /* device allocations served by the caching allocator */                      \
  X(cached_frees)           /* frees of blocks we handed out */                                           \
  X(passthrough_allocs)     /* allocations forwarded to the driver and traced (managed, pitched...) */    \
  X(passthrough_frees)      /* frees of those */                                                          \
  X(unknown_frees)          /* frees of pointers we never saw, forwarded to the real free */              \
  X(double_frees)           /* frees of a pointer inside our cache that is not a live block */            \
  X(capture_passthrough)    /* allocations forwarded because a stream capture was active */               \
  X(lazy_syncs)             /* device synchronisations done by the lazy_sync policy */                    \
  X(other_streams_seen)     /* switches: work on another stream after only the legacy stream had work */  \
  X(other_stream_waits)     /* GPU-side waits for the legacy stream's work at that switch */              \
  X(unguarded_switches)     /* switches made while another stream was capturing (no events) */            \
  X(returns_to_one_stream)  /* synchronisations after which only the legacy stream had work again */      \
  X(gpu_barriers)           /* reuse:lazy_barrier: GPU-side barriers made in place of a lazy sync */      \
  X(barrier_fallbacks)      /* reuse:lazy_barrier: reuses that synchronised instead of the barrier */     \
  X(runtime_fast_allocs)    /* cudaMalloc served without entering cudart (Note [runtime fast path]) */    \
  X(runtime_fast_frees)     /* cudaFree served without entering cudart */                                 \
  X(program_syncs)          /* device synchronisations the program did itself (cuCtxSynchronize) */       \
  X(cross_stream_frees)     /* async frees on another stream than the allocation's (event-guarded) */     \
  X(pools_created)          /* per-context caching allocators created */                                  \
  X(pools_dropped)          /* dropped by a reset, release or destroy of their context */                 \
  X(resolver_substitutions) /* cuGetProcAddress / cudaGetDriverEntryPoint results replaced */             \
  X(resolver_unmapped)      /* a hooked family resolved to a pointer we could not map (bypasses us) */    \
  X(exit_frees)             /* frees after process exit began (forgotten, no driver call) */              \
  X(oom_fallbacks)          /* allocator OOMs served by forwarding the exact request (no spurious OOM) */ \
  X(stacks_captured)        /* call stacks captured (once per allocating call; base/stacks.h) */          \
  X(python_stacks)          /* of those, with Python frames (the thread held the GIL) */                  \
  X(unwind_cached)          /* native stacks walked with cached rules (Note [cached unwinding]) */        \
  X(unwind_full)            /* native stacks walked by _Unwind_Backtrace */                               \
  X(unwind_mismatches)      /* stacks walked both ways that differed (the cache is then off) */

struct Counters {
#define VT_DECLARE_COUNTER(name) std::atomic<std::uint64_t> name{0};
  VT_SHIM_COUNTERS(VT_DECLARE_COUNTER)
#undef VT_DECLARE_COUNTER
  void reset() noexcept {
#define VT_RESET_COUNTER(name) name.store(0, std::memory_order_relaxed);
    VT_SHIM_COUNTERS(VT_RESET_COUNTER)
#undef VT_RESET_COUNTER
  }
};

extern Counters g_counters;

inline void bump(std::atomic<std::uint64_t>& c) noexcept { c.fetch_add(1, std::memory_order_relaxed); }

}  // namespace vramtrace::shim
