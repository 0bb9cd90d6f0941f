// Device allocation hooks served by the caching allocator (policy CACHE). The REPORT hooks are in
// memory_queries.cpp. See Note [count once] (entry.h), Note [lazy sync before reuse] (context_pool.h),
// Note [per-thread default stream] (streams.h), Note [capture passes through] (capture.h),
// Note [no CUDA call at exit] (base/process.h).
#include "base/config.h"
#include "base/counters.h"
#include "base/entry.h"
#include "base/log.h"
#include "base/process.h"
#include "base/real.h"
#include "base/stacks.h"
#include "base/streams.h"
#include "policies/capture.h"
#include "policies/context_pool.h"
#include "policies/memory_cap.h"
#include "policies/passthrough.h"
#include "policies/stream_work.h"

using namespace vramtrace;
using namespace vramtrace::shim;

namespace {

CUresult to_cuda(Status s, const ContextPool& pool) noexcept {
  switch (s) {
    case Status::ok:
      return CUDA_SUCCESS;
    case Status::out_of_memory:
      return CUDA_ERROR_OUT_OF_MEMORY;
    case Status::invalid_value:
      return CUDA_ERROR_INVALID_VALUE;
    case Status::not_supported:
      return CUDA_ERROR_NOT_SUPPORTED;
    case Status::device_error:
      break;
  }
  CUresult r = pool.backend.last_error();
  return r != CUDA_SUCCESS ? r : CUDA_ERROR_UNKNOWN;
}

/// Whether this call must bypass the cache (and be forwarded, traced).
// Note [one cache]: set when the program's own caching allocator is in charge (PyTorch's native
// allocator, told by the tensor-level recorder through vramtrace_forward_allocations). Its
// segments then go to the driver as it asked for them, as without vramtrace: a second cache below
// PyTorch's would keep the segments PyTorch releases on an OOM (its memory queries count them as
// free, but only their own sizes can reuse them), so a capped run would fail where a card of that
// size would not, and `tune`'s verdicts would not be a real card's.
std::atomic<bool> g_forward_all{false};

bool bypass_cache() noexcept {
  return EntryScope::internal() || !config().caching || g_forward_all.load(std::memory_order_relaxed) || exiting() ||
         capture_active();
}

// Forwarding all allocations, the context still gets its pool record: that is where the trace
// header learns the device (name, total, the context's share) and the cap counts the context.
void meet_context_when_forwarding() noexcept {
  if (g_forward_all.load(std::memory_order_relaxed) && !EntryScope::internal() && enabled() && !exiting())
    (void)pools().current();
}

/// Why an allocation was forwarded instead of served from the cache, for the debug log: the
/// conditions of the callers in the order they test them. An explicit pool (alloc_async) is
/// named by passthrough_alloc (Decision::pass_pool).
void log_bypass(std::uint16_t entry, CUdeviceptr* dptr, size_t bytes, bool custom_pool = false) noexcept {
  Decision d = Decision::pass_no_pool;
  if (!dptr || bytes == 0)
    d = Decision::pass_invalid;
  else if (EntryScope::internal())
    d = Decision::pass_internal;
  else if (!enabled())
    d = Decision::pass_disabled;
  else if (!config().caching || g_forward_all.load(std::memory_order_relaxed))
    d = Decision::pass_reuse_none;
  else if (exiting())
    d = Decision::pass_exit;
  else if (capture_active())
    d = Decision::pass_capture;
  else if (custom_pool)
    return;
  log_decision(d, entry);
}

// Note [no spurious OOM]: the allocator rounds requests up to its segment sizes (a 6 MiB request
// asks the device for 20 MiB, as PyTorch does), so on a nearly full device it can fail where the
// program's own request would have fitted. After the allocator's OOM (it has already released its
// cache and retried), the exact request is forwarded to the driver; if that succeeds the program
// gets it, traced as pass-through memory, and the trace still shows the allocator's `oom` event.
//
// Under a cap there is no fallback: the capped device is what the allocator says it is (as for
// PyTorch under a memory fraction, its segment rounding is part of the figure), and the program
// gets CUDA_ERROR_OUT_OF_MEMORY (cudaErrorMemoryAllocation through the runtime) exactly where
// `vramtrace replay --capacity` of the same sequence fails.
template <class Fn, class... Extra>
CUresult oom_fallback(const ContextPool& pool, Fn real, std::uint16_t entry, CUdeviceptr* dptr, size_t bytes,
                      Extra... extra) noexcept {
  if (cap_of(pool.device) != 0) return CUDA_ERROR_OUT_OF_MEMORY;
  CUresult r = real(dptr, bytes, extra...);
  if (r == CUDA_SUCCESS) {
    bump(g_counters.oom_fallbacks);
    log_decision(Decision::pass_oom_fallback, entry);
    passthrough_alloc(*dptr, bytes, MemoryKind::device, entry);
  }
  return r;
}

// Plain device memory forwarded past the cache (reuse:none, forwarding, stream capture, exit)
// still counts against the cap (memory_cap.h): refused when it would not fit.
bool forwarded_fits(CUdeviceptr* dptr, size_t bytes) noexcept {
  if (!dptr || bytes == 0 || EntryScope::internal() || !enabled() || exiting()) return true;  // before any driver call
  return vramtrace::shim::forwarded_fits(current_device(), bytes);
}

// Note [stream-ordered reuse]: cuMemAllocAsync/cuMemFreeAsync blocks are kept per stream by the
// allocator, so a block freed on stream S is reused at once only by later work on S (stream order
// makes that safe). A block freed on another stream than it was allocated on is first marked used
// on that stream (record_stream), so the allocator reuses it only after an event recorded there
// at the free has completed. Explicit pools (cuMemAllocFromPoolAsync, or a pool set with
// cuDeviceSetMemPool) are forwarded: their attributes belong to the program.
std::atomic<bool> g_custom_pool{false};

CUresult alloc_async(Hook hook, bool per_thread, CUdeviceptr* dptr, size_t bytes, CUstream s) noexcept {
  EntryScope e(hook);
  using Fn = CUresult (*)(CUdeviceptr*, size_t, CUstream);
  Fn real = real_driver<Fn>(hook);
  if (!real) return CUDA_ERROR_NOT_INITIALIZED;
  StreamId key = stream_key(s, per_thread);
  if (is_per_thread_key(key)) note_per_thread_stream(hook);  // Note [work on another stream]
  ContextPool* pool = nullptr;
  meet_context_when_forwarding();
  if (!dptr || bytes == 0 || bypass_cache() || g_custom_pool.load(std::memory_order_relaxed) ||
      !(pool = pools().current())) {
    if (log_enabled(LogLevel::debug)) log_bypass(e.entry(), dptr, bytes, g_custom_pool.load(std::memory_order_relaxed));
    if (!forwarded_fits(dptr, bytes)) {
      passthrough_oom(bytes, e.entry(), key.value);
      return CUDA_ERROR_OUT_OF_MEMORY;
    }
    CUresult r = real(dptr, bytes, s);
    if (r == CUDA_SUCCESS && !EntryScope::internal() && enabled()) {
      if (capture_active()) bump(g_counters.capture_passthrough);
      passthrough_alloc(*dptr, bytes, g_custom_pool ? MemoryKind::pool : MemoryKind::device, e.entry(), key.value);
    } else if (r == CUDA_ERROR_OUT_OF_MEMORY && dptr && bytes != 0) {
      passthrough_oom(bytes, e.entry(), key.value);
    }
    return r;
  }
  DevicePtr p = 0;
  call_stack();  // Note [stack capture]: before the allocator's lock; its events get it
  note_cached_allocation();
  Status st = pool->allocator.allocate(bytes, key, &p, e.entry());
  if (st == Status::out_of_memory) return oom_fallback(*pool, real, e.entry(), dptr, bytes, s);
  if (st != Status::ok) return to_cuda(st, *pool);
  // A block given back with a plain cuMemFree_v2 (legal for stream-ordered memory) while other
  // streams had work is in the recently freed set like any other plain free, and reusing it on
  // any stream needs the lazy synchronisation (Note [lazy sync before reuse]); blocks given
  // back in stream order need none, so only recorded frees count here.
  if (reuse_needs_sync() && pool->overlaps_unsynced(p, bytes, true)) pool->sync_for_reuse();
  bump(g_counters.cached_allocs);
  log_decision(Decision::served_cache, e.entry());
  *dptr = p;
  return CUDA_SUCCESS;
}

/// The free of `p`, memory the cache does not hold, by the driver's own call `real_free` (a
/// callable returning its CUresult), recorded before it happens (Note [a free is recorded before
/// it happens], passthrough.h; `stream` the trace's stream key, 0 for cuMemFree_v2). Memory the
/// shim never saw allocated is counted as an unknown free and still given to the driver, whose
/// answer is returned. Thread-safe as the pass-through table is.
template <class RealFree>
CUresult forwarded_free(CUdeviceptr p, std::uint16_t entry, std::uint64_t stream, RealFree real_free) noexcept {
  const bool pass = passthrough_free_begin(p, entry, stream);
  const CUresult r = real_free();
  if (!pass) {
    bump(g_counters.unknown_frees);
    log_decision(Decision::free_unknown, entry);
  } else {
    passthrough_free_end(p, r == CUDA_SUCCESS, entry, stream);
  }
  return r;
}

CUresult free_async(Hook hook, bool per_thread, CUdeviceptr p, CUstream s) noexcept {
  EntryScope e(hook);
  using Fn = CUresult (*)(CUdeviceptr, CUstream);
  Fn real = real_driver<Fn>(hook);
  if (!real) return CUDA_ERROR_NOT_INITIALIZED;
  if (EntryScope::internal() || !enabled()) return real(p, s);
  StreamId key = stream_key(s, per_thread);
  if (is_per_thread_key(key)) note_per_thread_stream(hook);  // Note [work on another stream]
  Owner o = pools().owner_of(p);
  if (o.pool && o.live) {
    bump(g_counters.cached_frees);
    if (o.pool->take_exported(p)) {  // quarantined (context_pool.h, IPC)
      log_decision(Decision::free_ipc, e.entry());
      return CUDA_SUCCESS;
    }
    if (exiting()) {
      bump(g_counters.exit_frees);
      log_decision(Decision::free_exit, e.entry());
      return CUDA_SUCCESS;
    }
    if (o.block.stream != key) {
      bump(g_counters.cross_stream_frees);
      o.pool->allocator.record_stream(p, key);
    }
    // The buffer id is forgotten after the free: a query in between finds no allocated block
    // (Note [a block answers as an allocation]).
    const Status st = o.pool->allocator.deallocate(p, e.entry());
    o.pool->forget_buffer_id(p);
    return to_cuda(st, *o.pool);
  }
  if (o.pool) {
    bump(g_counters.double_frees);
    log_decision(Decision::free_double, e.entry());
    return CUDA_ERROR_INVALID_VALUE;
  }
  return forwarded_free(p, e.entry(), key.value, [&] { return real(p, s); });
}

}  // namespace

namespace vramtrace::shim {
/// Set by Tracer<cuDeviceSetMemPool> (tracers.cpp): async allocations are forwarded from now on.
void note_custom_mem_pool() noexcept { g_custom_pool.store(true, std::memory_order_relaxed); }
/// Note [one cache]: every device allocation is forwarded from now on (vramtrace_forward_allocations).
void forward_all_allocations() noexcept { g_forward_all.store(true, std::memory_order_relaxed); }
}  // namespace vramtrace::shim

namespace {

// Set by the runtime fast path after the allocator ran out of memory for this call, so that the
// cuMemAlloc_v2 that cudart then makes forwards the exact request (Note [no spurious OOM])
// instead of asking the allocator a second time (one OOM, counted once).
constinit thread_local bool t_fast_path_oom = false;

/// A cuMemAlloc_v2-style allocation served by `pool` for entry point `entry` (cuMemAlloc_v2 or
/// the runtime fast path), stream-ordered on the legacy stream, with the lazy sync of
/// Note [lazy sync before reuse] when reuse_needs_sync().
Status cached_alloc(ContextPool& pool, size_t bytes, std::uint16_t entry, DevicePtr* p) noexcept {
  call_stack();              // Note [stack capture]: before the allocator's lock; its events get it
  note_cached_allocation();  // Note [work on another stream]: before the decision below
  Status st = pool.allocator.allocate(bytes, StreamId{0}, p, entry);
  if (st != Status::ok) return st;
  if (reuse_needs_sync() && pool.overlaps_unsynced(*p, bytes)) pool.sync_for_reuse();
  bump(g_counters.cached_allocs);
  return st;
}

/// Frees the live block `p` of `o.pool` (cuMemFree_v2 or the runtime fast path).
Status cached_free(const Owner& o, DevicePtr p, std::uint16_t entry) noexcept {
  bump(g_counters.cached_frees);
  if (o.pool->take_exported(p)) {  // quarantined (context_pool.h, IPC)
    log_decision(Decision::free_ipc, entry);
    return Status::ok;
  }
  if (exiting()) {
    bump(g_counters.exit_frees);
    log_decision(Decision::free_exit, entry);
    return Status::ok;
  }
  // Note [lazy sync before reuse]: remember the range before the block can be handed out again.
  if (reuse_needs_sync()) o.pool->note_freed(p, o.block.size);
  // The buffer id is forgotten after the free: a query in between finds no allocated block
  // (Note [a block answers as an allocation]).
  const Status st = o.pool->allocator.deallocate(p, entry);
  o.pool->forget_buffer_id(p);
  return st;
}

}  // namespace

extern "C" CUresult cuMemAlloc_v2(CUdeviceptr* dptr, size_t bytes) {
  EntryScope e(Hook::cuMemAlloc_v2);
  using Fn = CUresult (*)(CUdeviceptr*, size_t);
  Fn real = real_driver<Fn>(Hook::cuMemAlloc_v2);
  if (!real) return CUDA_ERROR_NOT_INITIALIZED;
  ContextPool* pool = nullptr;
  meet_context_when_forwarding();
  // bytes == 0 keeps the driver's CUDA_ERROR_INVALID_VALUE (research 5.10).
  if (!dptr || bytes == 0 || bypass_cache() || !(pool = pools().current())) {
    if (log_enabled(LogLevel::debug)) log_bypass(e.entry(), dptr, bytes);
    if (!forwarded_fits(dptr, bytes)) {
      passthrough_oom(bytes, e.entry());
      return CUDA_ERROR_OUT_OF_MEMORY;
    }
    CUresult r = real(dptr, bytes);
    if (r == CUDA_SUCCESS && !EntryScope::internal() && enabled()) {
      if (capture_active()) bump(g_counters.capture_passthrough);
      passthrough_alloc(*dptr, bytes, MemoryKind::device, e.entry());
    } else if (r == CUDA_ERROR_OUT_OF_MEMORY && dptr && bytes != 0) {
      passthrough_oom(bytes, e.entry());
    }
    return r;
  }
  if (t_fast_path_oom) {
    t_fast_path_oom = false;
    return oom_fallback(*pool, real, e.entry(), dptr, bytes);
  }
  DevicePtr p = 0;
  Status st = cached_alloc(*pool, bytes, e.entry(), &p);
  if (st == Status::out_of_memory) return oom_fallback(*pool, real, e.entry(), dptr, bytes);
  if (st != Status::ok) return to_cuda(st, *pool);
  log_decision(Decision::served_cache, e.entry());
  *dptr = p;
  return CUDA_SUCCESS;
}

extern "C" CUresult cuMemFree_v2(CUdeviceptr p) {
  EntryScope e(Hook::cuMemFree_v2);
  using Fn = CUresult (*)(CUdeviceptr);
  Fn real = real_driver<Fn>(Hook::cuMemFree_v2);
  if (!real) return CUDA_ERROR_NOT_INITIALIZED;
  if (EntryScope::internal() || !enabled() || p == 0) return real(p);
  Owner o = pools().owner_of(p);
  if (o.pool && o.live) return to_cuda(cached_free(o, p, e.entry()), *o.pool);
  if (o.pool) {
    // Inside our cache but not a live block: a double free (or an interior pointer). The real
    // driver answers both with CUDA_ERROR_INVALID_VALUE; forwarding would free our segment.
    bump(g_counters.double_frees);
    log_decision(Decision::free_double, e.entry());
    return CUDA_ERROR_INVALID_VALUE;
  }
  return forwarded_free(p, e.entry(), 0, [&] { return real(p); });
}

extern "C" CUresult cuMemAllocAsync(CUdeviceptr* dptr, size_t bytes, CUstream s) {
  return alloc_async(Hook::cuMemAllocAsync, false, dptr, bytes, s);
}
extern "C" CUresult cuMemAllocAsync_ptsz(CUdeviceptr* dptr, size_t bytes, CUstream s) {
  return alloc_async(Hook::cuMemAllocAsync_ptsz, true, dptr, bytes, s);
}
extern "C" CUresult cuMemFreeAsync(CUdeviceptr p, CUstream s) { return free_async(Hook::cuMemFreeAsync, false, p, s); }
extern "C" CUresult cuMemFreeAsync_ptsz(CUdeviceptr p, CUstream s) {
  return free_async(Hook::cuMemFreeAsync_ptsz, true, p, s);
}

// Note [runtime fast path]: PyTorch in tensor mode calls cudaMalloc and cudaFree once per tensor
// (about 1,500 of each per GPT-2 step, docs/h200.md). The shared cudart would check its
// own state and then call our cuMemAlloc_v2 through its driver table; when a context is current
// on the thread -- the context cudart itself would use, since the runtime adopts the current
// context -- we serve the call from that context's pool directly and skip cudart. Everything
// else goes to the real cudart, which reaches our driver hooks as before, so that cudart keeps
// producing the error codes and cudaGetLastError state: no current context (cudart creates the
// primary context), NULL or size 0, a capture, a pointer that is not a live block of ours (a
// double free, host or foreign memory), and any allocator failure (after an OOM, cudart's
// cuMemAlloc_v2 forwards the exact request once: t_fast_path_oom).
extern "C" cudaError_t cudaMalloc(void** devPtr, size_t size) {
  EntryScope e(Hook::cudaMalloc);
  auto real = reinterpret_cast<cudaError_t (*)(void**, size_t)>(real_runtime(Hook::cudaMalloc));
  if (!real) return cudaErrorSharedObjectSymbolNotFound;
  if (devPtr && size != 0 && e.outer() && !bypass_cache()) {
    if (ContextPool* pool = pools().current()) {
      DevicePtr p = 0;
      Status st = cached_alloc(*pool, size, e.entry(), &p);
      if (st == Status::ok) {
        bump(g_counters.runtime_fast_allocs);
        log_decision(Decision::served_fast, e.entry());
        *devPtr = reinterpret_cast<void*>(static_cast<std::uintptr_t>(p));
        return cudaSuccess;
      }
      t_fast_path_oom = st == Status::out_of_memory;
      cudaError_t r = real(devPtr, size);
      t_fast_path_oom = false;
      return r;
    }
  }
  return real(devPtr, size);
}

extern "C" cudaError_t cudaFree(void* devPtr) {
  EntryScope e(Hook::cudaFree);
  auto real = reinterpret_cast<cudaError_t (*)(void*)>(real_runtime(Hook::cudaFree));
  if (!real) return cudaErrorSharedObjectSymbolNotFound;
  if (devPtr && e.outer() && !EntryScope::internal() && enabled()) {
    const auto p = static_cast<DevicePtr>(reinterpret_cast<std::uintptr_t>(devPtr));
    Owner o = pools().owner_of(p);
    if (o.pool && o.live && cached_free(o, p, e.entry()) == Status::ok) {
      bump(g_counters.runtime_fast_frees);
      return cudaSuccess;
    }
  }
  return real(devPtr);
}
