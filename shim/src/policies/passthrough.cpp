#include "policies/passthrough.h"

#include <mutex>
#include <new>
#include <unordered_map>

#include "base/config.h"
#include "base/counters.h"
#include "base/entry.h"
#include "base/log.h"
#include "base/process.h"
#include "base/real.h"
#include "base/streams.h"
#include "policies/context_pool.h"
#include "policies/memory_cap.h"

namespace vramtrace::shim {
namespace {

// Kinds of forwarded memory that occupy device memory, counted by the cap (memory_cap.h). Managed
// memory migrates on demand (not resident), host and arrays are not device bytes we can size.
bool device_resident(MemoryKind k) noexcept {
  return k == MemoryKind::device || k == MemoryKind::pitched || k == MemoryKind::pool || k == MemoryKind::vmm;
}

// Why memory of kind `k` is forwarded, for the debug log. Plain device memory is forwarded for
// a reason of its caller (capture, reuse:none, ...), which the caller logs (driver_memory.cpp).
void log_kind(MemoryKind k, std::uint16_t entry) noexcept {
  switch (k) {
    case MemoryKind::managed:
      log_decision(Decision::pass_managed, entry);
      break;
    case MemoryKind::pitched:
      log_decision(Decision::pass_pitched, entry);
      break;
    case MemoryKind::pool:
      log_decision(Decision::pass_pool, entry);
      break;
    case MemoryKind::pinned_host:
      log_decision(Decision::pass_host, entry);
      break;
    case MemoryKind::array:
      log_decision(Decision::pass_array, entry);
      break;
    case MemoryKind::vmm:
      log_decision(Decision::pass_vmm, entry);
      break;
    case MemoryKind::allocator:
    case MemoryKind::device:
      break;
  }
}

struct Registry {
  std::mutex mu;
  std::unordered_map<std::uint64_t, PassThrough> live;
};

Registry& registry() noexcept {
  static Registry* r = new Registry;  // never destroyed: frees may come during exit
  return *r;
}

}  // namespace

int current_device() noexcept {
  const DriverTable* d = driver();
  CUdevice dev = 0;
  if (!d || !d->cuCtxGetDevice || d->cuCtxGetDevice(&dev) != CUDA_SUCCESS) return 0;
  return dev;
}

bool forwarded_fits(int device, std::uint64_t bytes) noexcept {
  if (bytes == 0 || EntryScope::internal() || !enabled() || exiting() || cap_of(device) == 0) return true;
  measure_driver_share(device);
  return cap_admits(device, bytes);
}

void passthrough_oom(std::uint64_t bytes, std::uint16_t entry, std::uint64_t stream) noexcept {
  if (!enabled() || exiting() || EntryScope::internal()) return;
  EventSink* s = sink();
  if (!s) return;
  const int device = current_device();
  using Fn = CUresult (*)(size_t*, size_t*);
  std::uint64_t free_bytes = 0, total_bytes = 0;
  if (Fn info = real_driver<Fn>(Hook::cuMemGetInfo_v2)) {
    size_t f = 0, t = 0;
    if (info(&f, &t) == CUDA_SUCCESS) {
      free_bytes = f;
      total_bytes = t;
    }
  }
  capped_figures(device, 0, free_bytes, total_bytes);
  Event e;
  e.time_ns = event_time_ns();
  e.size_bytes = bytes;
  e.block_bytes = bytes;
  e.stream = stream;
  e.aux = free_bytes;  // the oom line's "free"
  e.addr = 0;          // its "retries"
  e.device = device;
  e.thread_id = this_thread_id();
  e.action = Action::oom;
  e.entry_point = entry;
  s->record(e);
}

void passthrough_alloc(std::uint64_t addr, std::uint64_t size_bytes, MemoryKind kind, std::uint16_t entry,
                       std::uint64_t stream) noexcept {
  PassThrough p{size_bytes, kind, current_device()};
  try {
    std::lock_guard<std::mutex> lock(registry().mu);
    registry().live[addr] = p;
  } catch (...) {
    return;  // out of host memory: untracked, its free will be forwarded as unknown
  }
  if (device_resident(kind)) hold(p.device, size_bytes, /*force=*/true);
  bump(g_counters.passthrough_allocs);
  if (log_enabled(LogLevel::debug)) log_kind(kind, entry);
  emit(Action::segment_alloc, addr, size_bytes, stream, entry, kind, p.device);
}

namespace {
// The forwarded allocation whose free this thread is making (between passthrough_free_begin and
// passthrough_free_end: one driver call, never nested, because the shim's own calls are not traced).
struct PendingFree {
  std::uint64_t addr = 0;
  PassThrough p;
  bool valid = false;
};
constinit thread_local PendingFree t_pending_free;
}  // namespace

bool passthrough_free_begin(std::uint64_t addr, std::uint16_t entry, std::uint64_t stream) noexcept {
  PassThrough p;
  {
    std::lock_guard<std::mutex> lock(registry().mu);
    auto it = registry().live.find(addr);
    if (it == registry().live.end()) return false;
    p = it->second;
    registry().live.erase(it);
  }
  t_pending_free = {addr, p, true};
  emit(Action::segment_free, addr, p.size_bytes, stream, entry, p.kind, p.device);
  return true;
}

void passthrough_free_end(std::uint64_t addr, bool freed, std::uint16_t entry, std::uint64_t stream) noexcept {
  PendingFree f = t_pending_free;
  t_pending_free.valid = false;
  if (!f.valid || f.addr != addr) return;
  if (freed) {
    // Counted against the cap until the driver has really freed it.
    if (device_resident(f.p.kind)) unhold(f.p.device, f.p.size_bytes);
    bump(g_counters.passthrough_frees);
    return;
  }
  // The driver kept it: the program still holds it, so the trace takes it back.
  try {
    std::lock_guard<std::mutex> lock(registry().mu);
    registry().live[addr] = f.p;
  } catch (...) {
    if (device_resident(f.p.kind)) unhold(f.p.device, f.p.size_bytes);  // untracked from now on
    return;
  }
  emit(Action::segment_alloc, addr, f.p.size_bytes, stream, entry, f.p.kind, f.p.device);
}

void passthrough_after_fork_child() noexcept {
  new (&registry().mu) std::mutex;  // the parent may have held it at fork
  // A parent thread may have been inside an insert at fork: the old table is abandoned (leaked),
  // not walked.
  new (&registry().live) std::unordered_map<std::uint64_t, PassThrough>;
}

void passthrough_init() noexcept { (void)registry(); }

}  // namespace vramtrace::shim
