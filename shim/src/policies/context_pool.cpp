#include "policies/context_pool.h"

#include <new>

#include "base/config.h"
#include "base/counters.h"
#include "base/entry.h"
#include "base/log.h"
#include "base/process.h"
#include "base/real.h"
#include "base/sink.h"
#include "policies/memory_cap.h"
#include "policies/stream_work.h"

namespace vramtrace::shim {

ContextPool::ContextPool(CUcontext c, int dev, bool is_primary, const CudaDriverApi& api,
                         const AllocatorSettings& settings, EventSink* s)
    : ctx(c),
      device(dev),
      primary(is_primary),
      backend(api, dev),
      capped(backend, dev),
      allocator(capped, settings, DeviceId{dev}, s) {}

void ContextPool::note_freed(DevicePtr addr, std::uint64_t bytes) noexcept {
  std::lock_guard<std::mutex> lock(mu_);
  try {
    auto [it, inserted] = unsynced_.try_emplace(addr, addr + bytes, epoch_);
    if (!inserted) it->second = {std::max(it->second.first, addr + bytes), epoch_};
  } catch (...) {
    // Cannot remember this range: treat every block as recently freed until the next
    // synchronisation, so no reuse goes unguarded.
    lost_ = true;
    lost_epoch_ = epoch_;
  }
}

bool ContextPool::overlaps_unsynced(DevicePtr addr, std::uint64_t bytes, bool recorded_only) noexcept {
  std::lock_guard<std::mutex> lock(mu_);
  if (lost_ || (all_unsynced_ && !recorded_only)) return true;
  if (unsynced_.empty()) return false;
  // The last range starting below addr + bytes is the only one that can overlap: ranges in the
  // set do not overlap each other (a range can only be freed again after it was handed out,
  // which synchronised and cleared whatever it overlapped).
  auto it = unsynced_.lower_bound(addr + bytes);
  if (it == unsynced_.begin()) return false;
  --it;
  return it->second.first > addr;
}

std::uint64_t ContextPool::begin_sync() noexcept {
  std::lock_guard<std::mutex> lock(mu_);
  return ++epoch_;
}

void ContextPool::mark_all_unsynced() noexcept {
  // A pool that holds no segment has no block to reuse (the second context's new pool at the
  // switch it causes; a segment it releases goes back through cuMemFree, which synchronises):
  // marking it would only cost its first allocation a synchronisation.
  if (allocator.stats().reserved_bytes[kStatAll].current == 0) return;
  std::lock_guard<std::mutex> lock(mu_);
  all_unsynced_ = true;
  all_unsynced_epoch_ = epoch_;
}

void ContextPool::end_sync(std::uint64_t epoch) noexcept {
  std::lock_guard<std::mutex> lock(mu_);
  if (all_unsynced_ && all_unsynced_epoch_ < epoch) all_unsynced_ = false;
  if (lost_ && lost_epoch_ < epoch) lost_ = false;
  for (auto it = unsynced_.begin(); it != unsynced_.end();) {
    if (it->second.second < epoch)
      it = unsynced_.erase(it);
    else
      ++it;
  }
}

void ContextPool::sync_for_reuse() noexcept {
  std::uint64_t e = begin_sync();
  if (gpu_barrier(ctx)) {  // reuse:lazy_barrier (Note [GPU-side barrier], stream_work.cpp)
    end_sync(e);
    return;
  }
  bump(g_counters.lazy_syncs);
  const SyncToken token = side_work_before_sync();
  const bool ok = backend.synchronize_context();
  end_sync(e);
  if (ok) side_work_after_sync(ctx, token);
}

void ContextPool::mark_exported(DevicePtr addr) noexcept {
  std::lock_guard<std::mutex> lock(mu_);
  try {
    exported_.insert(addr);
    any_exported_.store(true, std::memory_order_release);
  } catch (...) {
  }
}

bool ContextPool::take_exported(DevicePtr addr) noexcept {
  if (!any_exported_.load(std::memory_order_acquire)) return false;
  std::lock_guard<std::mutex> lock(mu_);
  return exported_.erase(addr) != 0;
}

std::uint64_t ContextPool::buffer_id(DevicePtr block) noexcept {
  static std::atomic<std::uint64_t> next{1};
  std::lock_guard<std::mutex> lock(mu_);
  try {
    auto [it, made] = buffer_ids_.try_emplace(block, 0);
    if (made) {
      it->second = (std::uint64_t{1} << 63) | next.fetch_add(1, std::memory_order_relaxed);
      any_buffer_ids_.store(true, std::memory_order_release);
    }
    return it->second;
  } catch (...) {
    // Out of host memory: an id that is never handed out twice, though not stable across calls.
    return (std::uint64_t{1} << 63) | next.fetch_add(1, std::memory_order_relaxed);
  }
}

void ContextPool::forget_buffer_id(DevicePtr block) noexcept {
  if (!any_buffer_ids_.load(std::memory_order_acquire)) return;
  std::lock_guard<std::mutex> lock(mu_);
  buffer_ids_.erase(block);
}

bool reuse_needs_sync() noexcept {
  const ReusePolicy r = config().settings.reuse;
  return r == ReusePolicy::device_sync ||
         ((r == ReusePolicy::lazy_sync || r == ReusePolicy::lazy_barrier) && other_stream_used());
}

// ---------------------------------------------------------------------------------------------

ContextPool* PoolRegistry::find(CUcontext ctx) noexcept {
  for (auto& slot : slots_) {
    ContextPool* p = slot.load(std::memory_order_acquire);
    if (p && p->ctx == ctx && !p->dropped.load(std::memory_order_acquire)) return p;
  }
  return nullptr;
}

namespace {
// The last pool this thread used, for the common case of one context per thread.
struct LastPool {
  CUcontext ctx = nullptr;
  ContextPool* pool = nullptr;
};
constinit thread_local LastPool t_last;
}  // namespace

ContextPool* PoolRegistry::current() noexcept {
  const DriverTable* d = driver();
  if (!d || !d->cuCtxGetCurrent) return nullptr;
  CUcontext ctx = nullptr;
  if (d->cuCtxGetCurrent(&ctx) != CUDA_SUCCESS || !ctx) return nullptr;
  if (t_last.ctx == ctx && t_last.pool && !t_last.pool->dropped.load(std::memory_order_acquire)) return t_last.pool;
  ContextPool* p = find(ctx);
  if (!p) {
    p = create(ctx);
    // Several contexts: their legacy streams are not one stream (Note [work on another stream]).
    if (p && live() > 1) note_several_contexts(Hook::none);
  }
  if (p) t_last = {ctx, p};
  return p;
}

namespace {
// Note [the context's share]
// The CUDA context, the module images loaded into it and the driver's bookkeeping take device
// memory that no allocation call returns, so no event of the trace can show it. The first time
// the shim meets a context of a device (its pool is created here, before the context's first
// allocation through us), it asks the driver for the device's free and total memory, as the
// driver says them (the real cuMemGetInfo_v2, not our figures of Note [capped figures]), and
// notes what the shim itself holds on the device then (held_bytes: other contexts' pools, memory
// it forwarded). total - free - held is the memory of the context and of whatever else used the
// device at that moment (other processes); on an otherwise idle GPU, the context's own size. The
// reports show it as the context row of the memory ledger (reporter/model/ledger.h). One cheap,
// non-blocking query on a thread that is already in a driver call with the context current;
// pools are never created once exit has begun, so nothing here runs at exit.
struct ContextShare {
  std::uint64_t free_bytes = 0, total_bytes = 0, held_bytes = 0;  // all 0: not measured
};

ContextShare measure_context_share(const DriverTable& d, CUdevice dev) noexcept {
  ContextShare out;
  auto mem_get_info =
      reinterpret_cast<CUresult (*)(size_t*, size_t*)>(d.real[static_cast<std::size_t>(Hook::cuMemGetInfo_v2)]);
  size_t free_bytes = 0, total_bytes = 0;
  if (!mem_get_info || mem_get_info(&free_bytes, &total_bytes) != CUDA_SUCCESS || total_bytes == 0 ||
      free_bytes > total_bytes)
    return out;
  out.free_bytes = free_bytes;
  out.total_bytes = total_bytes;
  out.held_bytes = held_bytes(static_cast<int>(dev));
  return out;
}

}  // namespace

void measure_driver_share(int device) noexcept {
  if (cap_of(device) == 0) return;
  const DriverTable* d = driver();
  auto mem_get_info =
      d ? reinterpret_cast<CUresult (*)(size_t*, size_t*)>(d->real[static_cast<std::size_t>(Hook::cuMemGetInfo_v2)])
        : nullptr;
  size_t free_bytes = 0, total_bytes = 0;
  if (mem_get_info && mem_get_info(&free_bytes, &total_bytes) == CUDA_SUCCESS && total_bytes != 0)
    count_driver_share(device, free_bytes, total_bytes);
}

namespace {

// The trace header lists each device (name, total memory, Note [the context's share]) and the
// driver version.
void note_device_for_trace(const DriverTable& d, CUdevice dev, const ContextShare& share) noexcept {
  int version = 0;
  char name[256] = {};
  size_t total = 0;
  if (d.cuDriverGetVersion) d.cuDriverGetVersion(&version);
  if (d.cuDeviceGetName) d.cuDeviceGetName(name, sizeof name - 1, dev);
  if (d.cuDeviceTotalMem_v2) d.cuDeviceTotalMem_v2(&total, dev);
  // Under a cap the trace describes the device the program saw (Note [capped figures]).
  if (std::uint64_t cap = cap_of(static_cast<int>(dev)); cap != 0 && (total == 0 || cap < total)) total = cap;
  sink_note_device(static_cast<int>(dev), version, name, total,
                   {share.free_bytes, share.total_bytes, share.held_bytes});
}
}  // namespace

ContextPool* PoolRegistry::create(CUcontext ctx) noexcept {
  const DriverTable* d = driver();
  CUdevice dev = 0;
  if (!d->cuCtxGetDevice || d->cuCtxGetDevice(&dev) != CUDA_SUCCESS) return nullptr;
  // Is this the device's primary context? Only ask when the primary context is active: a retain
  // would otherwise create it.
  bool primary = false;
  unsigned flags = 0;
  int active = 0;
  if (d->cuDevicePrimaryCtxGetState && d->cuDevicePrimaryCtxRetain &&
      d->cuDevicePrimaryCtxGetState(dev, &flags, &active) == CUDA_SUCCESS && active) {
    CUcontext pctx = nullptr;
    auto release =
        reinterpret_cast<CUresult (*)(CUdevice)>(d->real[static_cast<std::size_t>(Hook::cuDevicePrimaryCtxRelease_v2)]);
    if (release && d->cuDevicePrimaryCtxRetain(&pctx, dev) == CUDA_SUCCESS) {
      primary = pctx == ctx;
      release(dev);
    }
  }
  // Before the pool exists: nothing of this context has been allocated through us yet.
  const ContextShare share = measure_context_share(*d, dev);
  if (share.total_bytes != 0) count_driver_share(static_cast<int>(dev), share.free_bytes, share.total_bytes);
  std::lock_guard<std::mutex> lock(mu_);
  if (ContextPool* p = find(ctx)) return p;  // another thread won the race
  for (auto& slot : slots_) {
    if (slot.load(std::memory_order_relaxed)) continue;
    ContextPool* pool = nullptr;
    try {
      InternalScope internal;
      // The device's cap also becomes the allocator's own `limit` (PyTorch's "allowed" memory:
      // an allocation over it fails before the device is asked, and garbage collection acts).
      AllocatorSettings settings = config().settings;
      settings.limit_bytes = cap_of(static_cast<int>(dev));
      pool = new ContextPool(ctx, static_cast<int>(dev), primary, d->api, settings, sink());
    } catch (...) {
      return nullptr;
    }
    // Named in the trace before any thread can allocate from the pool: the header (or a device
    // record) precedes the device's first event.
    note_device_for_trace(*d, dev, share);
    slot.store(pool, std::memory_order_release);
    bump(g_counters.pools_created);
    log_line(LogLevel::info, "cuda:{}: caching allocator created for context {} ({})", static_cast<int>(dev),
             fmt::ptr(ctx), primary ? "the device's primary context" : "not the primary context");
    lifecycle_pool_created();
    return pool;
  }
  return nullptr;  // all slots taken: calls pass through
}

Owner PoolRegistry::owner_of(DevicePtr addr) noexcept {
  for (auto& slot : slots_) {
    ContextPool* p = slot.load(std::memory_order_acquire);
    if (!p) continue;
    if (auto b = p->allocator.find(addr)) return Owner{p, true, *b};
    if (p->backend.contains(addr)) return Owner{p, false, {}};
  }
  return Owner{};
}

Owner PoolRegistry::owner_containing(DevicePtr addr) noexcept {
  for (auto& slot : slots_) {
    ContextPool* p = slot.load(std::memory_order_acquire);
    if (!p || !p->backend.contains(addr)) continue;
    if (auto b = p->allocator.find_containing(addr)) return Owner{p, true, *b};
    return Owner{p, false, {}};
  }
  return Owner{};
}

std::uint64_t PoolRegistry::cached_free_bytes(int device) noexcept {
  std::uint64_t sum = 0;
  for (auto& slot : slots_) {
    ContextPool* p = slot.load(std::memory_order_acquire);
    if (p && p->device == device) sum += p->allocator.cached_free_bytes();
  }
  return sum;
}

// Note [context reset drops the cache]: cudaDeviceReset (cuDevicePrimaryCtxReset), the last
// release of a primary context and cuCtxDestroy destroy every allocation of the context; the
// driver then reuses the same context handle and often the same addresses (research 5.3,
// LUPINE #844/#845, CUDA.jl #16). So the pool is dropped *before* the real call: its backend is
// abandoned (no driver call ever again: the memory is gone with the context), it leaves the
// registry, and the next allocation in the new context gets a fresh pool. Pointers of the old
// pool are unknown afterwards, so a late free goes to the real driver, which reports the error.
template <class Pred>
int PoolRegistry::drop_if(Pred pred) noexcept {
  std::lock_guard<std::mutex> lock(mu_);
  int n = 0;
  for (auto& slot : slots_) {
    ContextPool* p = slot.load(std::memory_order_acquire);
    if (!p || !pred(*p)) continue;
    p->dropped.store(true, std::memory_order_release);
    p->backend.abandon();
    p->capped.abandon();            // its memory died with the context: it leaves the cap's count
    driver_share_stale(p->device);  // and so does the context's own (Note [the cap counts the driver's share])
    slot.store(nullptr, std::memory_order_release);
    ++n;
    bump(g_counters.pools_dropped);
    log_line(LogLevel::info, "cuda:{}: cache of context {} dropped: the context was reset, released or destroyed",
             p->device, fmt::ptr(p->ctx));
  }
  if (n > 0) forget_stream_handles();  // the context's stream handles may be reused
  return n;
}

int PoolRegistry::drop_context(CUcontext ctx) noexcept {
  return drop_if([ctx](const ContextPool& p) { return p.ctx == ctx; });
}

int PoolRegistry::drop_primary(int device) noexcept {
  return drop_if([device](const ContextPool& p) { return p.primary && p.device == device; });
}

int PoolRegistry::live(CUcontext ctx, bool* has) noexcept {
  int n = 0;
  if (has) *has = false;
  for (auto& slot : slots_) {
    ContextPool* p = slot.load(std::memory_order_acquire);
    if (!p || p->dropped.load(std::memory_order_acquire)) continue;
    ++n;
    if (has && p->ctx == ctx) *has = true;
  }
  return n;
}

std::vector<ContextPool*> PoolRegistry::all() noexcept {
  std::vector<ContextPool*> v;
  try {
    for (auto& slot : slots_)
      if (ContextPool* p = slot.load(std::memory_order_acquire)) v.push_back(p);
  } catch (...) {
  }
  return v;
}

void PoolRegistry::abandon_all(bool forget) noexcept {
  if (forget) new (&mu_) std::mutex;  // fork child: the parent's lock state is meaningless here
  for (auto& slot : slots_) {
    ContextPool* p = slot.load(std::memory_order_acquire);
    if (!p) continue;
    p->backend.abandon();
    if (forget) {
      p->capped.abandon();
      // Never destroyed: allocator locks may be held by threads that did not survive the fork.
      p->dropped.store(true, std::memory_order_release);
      slot.store(nullptr, std::memory_order_release);
    }
  }
  if (forget) t_last = {};
}

PoolRegistry& pools() noexcept {
  static PoolRegistry* r = new PoolRegistry;  // never destroyed: hooks run during exit
  return *r;
}

}  // namespace vramtrace::shim
