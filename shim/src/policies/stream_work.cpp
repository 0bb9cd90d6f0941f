// Note [work on another stream] (stream_work.h).
#include "policies/stream_work.h"

#include <execinfo.h>

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
std::atomic<int> g_inflight{0};
std::atomic<bool> g_side_work{false};

namespace {
std::atomic<bool> g_other{false};  // the multi-stream rule is on (reuse_needs_sync)
std::mutex g_mu;                   // the switch and the return to one stream
// Events recorded on each pool context's legacy stream at the switch; written under g_mu before
// g_state becomes 1 (release), read without the lock in state 1.
// Atomic: a submission still waiting on the events of an earlier switch may read a slot while a
// later switch writes it (either event is a correct one to wait for).
std::atomic<CUevent> g_events[PoolRegistry::kMaxPools] = {};
std::atomic<int> g_event_count{0};

// Handles that turned out to name the legacy stream (below) or another stream, so that their
// later calls skip the driver query. Slots are claimed once and never cleared; a handle of
// another stream stays one when the driver reuses its value for a new stream.
constexpr int kCached = 8;
std::atomic<CUstream> g_aliases[kCached] = {};
std::atomic<CUstream> g_others[kCached] = {};

void remember(std::atomic<CUstream> (&slots)[kCached], CUstream s) noexcept {
  for (auto& a : slots) {
    CUstream empty = nullptr;
    if (a.compare_exchange_strong(empty, s) || empty == s) return;
  }
}

// Whether `s` is the legacy default stream under another handle than 0 or CU_STREAM_LEGACY: the
// runtime passes some driver calls its own handle of the legacy stream (on the H200, PyTorch's
// cudaMemsetAsync on its default stream reached cuMemsetD8Async that way). Compared by the
// driver's stream id (cuStreamGetId, CUDA 12.0), which names the stream behind any handle.
bool legacy_alias(const DriverTable* d, CUstream s) noexcept {
  for (auto& a : g_aliases)
    if (a.load(std::memory_order_relaxed) == s) return true;
  for (auto& a : g_others)
    if (a.load(std::memory_order_relaxed) == s) return false;
  unsigned long long id = 0, legacy = 0;
  if (!d->cuStreamGetId || d->cuStreamGetId(s, &id) != CUDA_SUCCESS ||
      d->cuStreamGetId(CU_STREAM_LEGACY, &legacy) != CUDA_SUCCESS)
    return false;  // not cached: the next call asks again
  remember(id == legacy ? g_aliases : g_others, s);
  return id == legacy;
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
    const int n = g_event_count.load(std::memory_order_relaxed);
    if (p->dropped.load(std::memory_order_acquire) || n == PoolRegistry::kMaxPools) continue;
    if (p->ctx != mine && d->cuCtxSetCurrent(p->ctx) != CUDA_SUCCESS) continue;
    CUevent e = nullptr;
    if (api.cuEventCreate(&e, CU_EVENT_DISABLE_TIMING) == CUDA_SUCCESS) {
      if (api.cuEventRecord(e, CU_STREAM_LEGACY) == CUDA_SUCCESS) {
        g_events[n].store(e, std::memory_order_relaxed);
        g_event_count.store(n + 1, std::memory_order_relaxed);
      } else if (api.cuEventDestroy_v2)
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
  const int n = g_event_count.load(std::memory_order_relaxed);
  for (int i = 0; i < n; ++i) {
    CUevent e = g_events[i].load(std::memory_order_relaxed);
    if (d->api.cuEventQuery(e) != CUDA_ERROR_NOT_READY) continue;
    pending = true;
    if (d->cuStreamWaitEvent && d->cuStreamWaitEvent(s, e, 0) == CUDA_SUCCESS) bump(g_counters.other_stream_waits);
  }
  int one = 1;
  if (!pending) g_state.compare_exchange_strong(one, 2, std::memory_order_acq_rel);
}
}  // namespace

void on_other_stream(Hook by, CUstream s) noexcept {
  if (EntryScope::internal()) return;
  const DriverTable* d = driver();
  if (!d) return;
  InternalScope internal;
  if (capturing(d, s)) return;  // captured work runs at its graph's launch, a submission itself
  int state = g_state.load(std::memory_order_acquire);
  if (state == 0 || state == 3) {
    std::lock_guard<std::mutex> lock(g_mu);  // a return to one stream in progress ends first
    state = g_state.load(std::memory_order_acquire);
    if (state == 0) {
      g_event_count.store(0, std::memory_order_relaxed);
      g_other.store(true, std::memory_order_seq_cst);
      bump(g_counters.other_streams_seen);
      for (ContextPool* p : pools().all()) p->mark_all_unsynced();
      if (log_enabled(LogLevel::debug))
        log_line(LogLevel::debug, "work on a stream other than the legacy default stream, first by {} (stream {})",
                 hook_name(static_cast<std::uint16_t>(by)), static_cast<const void*>(s));
      if (log_enabled(LogLevel::trace)) {  // where the program put it: the native frames, to stderr
        void* frames[48];
        backtrace_symbols_fd(frames, backtrace(frames, 48), 2);
      }
      // Only lazy_sync reused blocks without a synchronisation on the legacy stream's order.
      if (config().settings.reuse == ReusePolicy::lazy_sync) {
        if (capture_active())
          bump(g_counters.unguarded_switches);
        else if (d->api.cuEventQuery)
          record_switch_events(d);
      }
      state = g_event_count.load(std::memory_order_relaxed) > 0 ? 1 : 2;
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

bool stream_work_detail::legacy_handle(CUstream s) noexcept {
  const DriverTable* d = driver();
  return d && legacy_alias(d, s);
}

bool other_stream_used() noexcept { return stream_work_detail::g_other.load(std::memory_order_relaxed); }

// Note [return to one stream]: the switch need not last. Libraries put work on streams of their
// own now and then -- on the H200, cuDNN's handle creation (PyTorch's first attention call) sets
// memory on a stream of its own, once -- and a synchronisation of the whole context finishes all
// of it. If no work went on another stream from the moment a synchronisation began until it
// returned, every block's earlier users have finished or are ordered on the legacy stream, and
// the single-stream rule holds again: back to state 0, with no range remembered; the next work on
// another stream switches again, events and GPU-side waits included. Only with one context:
// another context's streams are not finished by this one's synchronisation.
//
// The decision races with submissions on other streams that saw state 2 and go on without the
// lock. Each such submission counts itself in g_inflight (seq_cst) before it reads g_state, and
// sets g_side_work before it stops counting. The return sets g_state to 3, then reads g_inflight,
// then g_side_work (all seq_cst): either it sees the submission (in progress, or done and marked)
// and stays switched, or the submission reads 3 and takes the slow path, which waits for g_mu and
// then switches again. A submission that finished before the synchronisation began was covered by it.
void side_work_before_sync() noexcept {
  if (stream_work_detail::g_state.load(std::memory_order_acquire) != 0)
    stream_work_detail::g_side_work.store(false, std::memory_order_seq_cst);
}

void side_work_after_sync(CUcontext ctx) noexcept {
  using namespace stream_work_detail;
  if (g_state.load(std::memory_order_acquire) == 0 || config().settings.reuse != ReusePolicy::lazy_sync) return;
  std::lock_guard<std::mutex> lock(g_mu);
  const int state = g_state.load(std::memory_order_acquire);
  if (state == 0 || g_side_work.load(std::memory_order_seq_cst)) return;
  int live = 0;
  bool mine = false;
  for (ContextPool* p : pools().all()) {
    if (p->dropped.load(std::memory_order_acquire)) continue;
    ++live;
    mine = mine || p->ctx == ctx;
  }
  if (live > 1 || (live == 1 && !mine)) return;
  g_state.store(3, std::memory_order_seq_cst);
  if (g_inflight.load(std::memory_order_seq_cst) != 0 || g_side_work.load(std::memory_order_seq_cst)) {
    g_state.store(state, std::memory_order_seq_cst);
    return;
  }
  g_other.store(false, std::memory_order_seq_cst);
  bump(g_counters.returns_to_one_stream);
  g_state.store(0, std::memory_order_release);
}

}  // namespace vramtrace::shim
