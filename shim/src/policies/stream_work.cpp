// Note [work on another stream] (stream_work.h).
#include "policies/stream_work.h"

#include <mutex>

#include "base/config.h"
#include "base/counters.h"
#include "base/entry.h"
#include "base/log.h"
#include "base/real.h"
#include "policies/capture.h"
#include "policies/context_pool.h"

namespace vramtrace::shim {
namespace stream_work_detail {

std::atomic<int> g_state{0};

namespace {
std::atomic<bool> g_other{false};  // the multi-stream rule is on (reuse_needs_sync)
std::mutex g_mu;                   // the switch only
// Events recorded on each pool context's legacy stream at the switch; immutable once g_state
// is 1 (published with release), read without the lock.
CUevent g_events[PoolRegistry::kMaxPools] = {};
int g_event_count = 0;

// Handles that turned out to name the legacy stream (below), so that their later calls skip the
// driver query. Slots are claimed once and never cleared.
constexpr int kAliases = 8;
std::atomic<CUstream> g_aliases[kAliases] = {};

// Whether `s` is the legacy default stream under another handle than 0 or CU_STREAM_LEGACY: the
// runtime passes some driver calls its own handle of the legacy stream (on the H200, PyTorch's
// cudaMemsetAsync on its default stream reached cuMemsetD8Async that way). Compared by the
// driver's stream id (cuStreamGetId, CUDA 12.0), which names the stream behind any handle.
bool legacy_alias(const DriverTable* d, CUstream s) noexcept {
  for (auto& a : g_aliases)
    if (a.load(std::memory_order_relaxed) == s) return true;
  unsigned long long id = 0, legacy = 0;
  if (!d->cuStreamGetId || d->cuStreamGetId(s, &id) != CUDA_SUCCESS ||
      d->cuStreamGetId(CU_STREAM_LEGACY, &legacy) != CUDA_SUCCESS || id != legacy)
    return false;
  for (auto& a : g_aliases) {
    CUstream empty = nullptr;
    if (a.compare_exchange_strong(empty, s) || empty == s) break;
  }
  return true;
}

bool capturing(const DriverTable* d, CUstream s) noexcept {
  CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
  return d->cuStreamIsCapturing && d->cuStreamIsCapturing(s, &st) == CUDA_SUCCESS &&
         st != CU_STREAM_CAPTURE_STATUS_NONE;
}

// Records one event on the legacy stream of each live pool's context (each made current in turn,
// then the caller's restored). Under g_mu.
void record_switch_events(const DriverTable* d) noexcept {
  const CudaDriverApi& api = d->api;
  if (!api.cuEventCreate || !api.cuEventRecord || !d->cuCtxGetCurrent || !d->cuCtxSetCurrent) return;
  CUcontext mine = nullptr;
  if (d->cuCtxGetCurrent(&mine) != CUDA_SUCCESS) return;
  for (ContextPool* p : pools().all()) {
    if (p->dropped.load(std::memory_order_acquire) || g_event_count == PoolRegistry::kMaxPools) continue;
    if (p->ctx != mine && d->cuCtxSetCurrent(p->ctx) != CUDA_SUCCESS) continue;
    CUevent e = nullptr;
    if (api.cuEventCreate(&e, CU_EVENT_DISABLE_TIMING) == CUDA_SUCCESS) {
      if (api.cuEventRecord(e, CU_STREAM_LEGACY) == CUDA_SUCCESS)
        g_events[g_event_count++] = e;
      else if (api.cuEventDestroy_v2)
        api.cuEventDestroy_v2(e);
    }
    if (p->ctx != mine) d->cuCtxSetCurrent(mine);
  }
}

// While the switch's events are pending: make `s` wait for them on the GPU; once all have
// completed, nothing is left to do at any submission (state 2). An event whose context is gone
// answers an error, not CUDA_ERROR_NOT_READY: its work is gone with it.
void wait_for_switch(const DriverTable* d, CUstream s) noexcept {
  bool pending = false;
  for (int i = 0; i < g_event_count; ++i) {
    if (d->api.cuEventQuery(g_events[i]) != CUDA_ERROR_NOT_READY) continue;
    pending = true;
    if (d->cuStreamWaitEvent && d->cuStreamWaitEvent(s, g_events[i], 0) == CUDA_SUCCESS)
      bump(g_counters.other_stream_waits);
  }
  if (!pending) g_state.store(2, std::memory_order_release);
}
}  // namespace

void on_other_stream(Hook by, CUstream s) noexcept {
  if (EntryScope::internal()) return;
  const DriverTable* d = driver();
  if (!d) return;
  InternalScope internal;
  if (capturing(d, s)) return;  // captured work runs at its graph's launch, a submission itself
  if (s != CU_STREAM_PER_THREAD && legacy_alias(d, s)) return;
  int state = g_state.load(std::memory_order_acquire);
  if (state == 0) {
    std::lock_guard<std::mutex> lock(g_mu);
    state = g_state.load(std::memory_order_acquire);
    if (state == 0) {
      g_other.store(true, std::memory_order_seq_cst);
      bump(g_counters.other_streams_seen);
      for (ContextPool* p : pools().all()) p->mark_all_unsynced();
      if (log_enabled(LogLevel::debug))
        log_line(LogLevel::debug, "work on a stream other than the legacy default stream, first by {} (stream {})",
                 hook_name(static_cast<std::uint16_t>(by)), static_cast<const void*>(s));
      // Only lazy_sync reused blocks without a synchronisation on the legacy stream's order.
      if (config().settings.reuse == ReusePolicy::lazy_sync) {
        if (capture_active())
          bump(g_counters.unguarded_switches);
        else if (d->api.cuEventQuery)
          record_switch_events(d);
      }
      state = g_event_count > 0 ? 1 : 2;
      g_state.store(state, std::memory_order_release);
    }
  }
  if (state == 1) wait_for_switch(d, s);
}

}  // namespace stream_work_detail

void note_per_thread_stream(Hook by) noexcept {
  if (stream_work_detail::g_state.load(std::memory_order_acquire) == 2) return;
  stream_work_detail::on_other_stream(by, CU_STREAM_PER_THREAD);
}

bool other_stream_used() noexcept { return stream_work_detail::g_other.load(std::memory_order_relaxed); }

}  // namespace vramtrace::shim
