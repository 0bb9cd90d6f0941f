// Note [work on another stream] (stream_work.h), Note [return to one stream] and Note [GPU-side
// barrier] (below).
#include "policies/stream_work.h"

#include <execinfo.h>

#include <mutex>
#include <new>

#include "base/config.h"
#include "base/counters.h"
#include "base/entry.h"
#include "base/log.h"
#include "base/real.h"
#include "policies/capture.h"
#include "policies/context_pool.h"

namespace vramtrace::shim {
namespace stream_work_detail {

std::atomic<std::uint64_t> g_word{0};
std::atomic<int> g_inflight{0};
std::atomic<std::uint64_t> g_side_done{0};

namespace {
std::atomic<bool> g_other{false};  // the multi-stream rule is on (reuse_needs_sync)
std::mutex g_mu;                   // the switch and the return to one stream
bool g_switch_logged = false;      // under g_mu: the debug log has named the first switch

// Cached allocations, ever (counted before each decides whether to synchronise), and how many of
// them a finished synchronisation covers (counted before it began). The switch needs its events
// only when the first is ahead: a block handed out since may have been reused in the legacy
// stream's order alone. The switch reads the count after it marked every pool unsynchronised,
// so an allocation it does not count sees that mark and synchronises.
std::atomic<std::uint64_t> g_reuses{0};
std::atomic<std::uint64_t> g_reuses_synced{0};

// One event per context, recorded on its legacy stream at each switch (made once, recorded
// again at the next switch: an event records its latest submission, and a wait takes the one of
// its call). `armed` says which belong to the current switch. Slots are written under g_mu and
// read without it; a reader that meets a slot of a later switch waits for later work, which is
// also correct.
struct Slot {
  std::atomic<CUcontext> ctx{nullptr};
  std::atomic<CUevent> event{nullptr};
  std::atomic<bool> armed{false};
};
Slot g_slots[PoolRegistry::kMaxPools];

// Handles that turned out to name the legacy stream or another stream, so that their later calls
// skip the driver query. Cleared when a context goes (its handles may be reused).
constexpr int kCached = 64;
std::atomic<CUstream> g_aliases[kCached] = {};
std::atomic<CUstream> g_others[kCached] = {};

// Note [GPU-side barrier] (below): the registry of created streams with work. Open addressing by
// handle; a slot's handle is published (release) after its context and flags were written, and
// only ever changes under g_mu (to kGone at the stream's destruction; a later insertion may take
// a kGone slot). `stamp` is the barrier epoch that the stream's latest finished submission saw,
// raised only, never lowered. `event` is made by the first barrier that records on the stream.
struct StreamEntry {
  std::atomic<CUstream> stream{nullptr};
  std::atomic<std::uint64_t> stamp{0};
  CUcontext ctx = nullptr;
  bool nonblocking = true;
  CUevent event = nullptr;
};
constexpr int kStreamSlots = 1024;
StreamEntry g_streams[kStreamSlots];
const CUstream kGone = reinterpret_cast<CUstream>(~std::uintptr_t{0});
std::atomic<int> g_barrier_on{0};  // reuse:lazy_barrier: 0 not read yet, 1 off, 2 on (the setting never changes)
std::atomic<std::uint64_t> g_barrier_epoch{1};       // barriers so far + 1
std::atomic<std::uint64_t> g_blind_stamp{0};         // the stamp of the latest submission not registered
std::atomic<bool> g_several_stream_contexts{false};  // streams of two contexts seen: barriers are off
CUcontext g_stream_context = nullptr;                // under g_mu: the context of the first stream registered
// Events recorded on streams at their destruction whose work the next barrier must wait for.
constexpr int kDeparted = 64;
CUevent g_departed[kDeparted] = {};  // under g_mu
int g_departed_n = 0;                // under g_mu

void raise_to(std::atomic<std::uint64_t>& a, std::uint64_t v) noexcept {
  std::uint64_t cur = a.load(std::memory_order_seq_cst);
  while (cur < v && !a.compare_exchange_weak(cur, v, std::memory_order_seq_cst)) {
  }
}
// Raises `a` to the current barrier epoch, read again after the store: if no barrier began in
// between, the first barrier to begin after this returns sees the stamp (Note [GPU-side barrier]).
void stamp_now(std::atomic<std::uint64_t>& a) noexcept {
  for (;;) {
    const std::uint64_t e = g_barrier_epoch.load(std::memory_order_seq_cst);
    raise_to(a, e);
    if (g_barrier_epoch.load(std::memory_order_seq_cst) == e) return;
  }
}
std::size_t stream_hash(CUstream s) noexcept {
  return static_cast<std::size_t>((reinterpret_cast<std::uintptr_t>(s) >> 4) * 0x9E3779B97F4A7C15ull >> 54) %
         kStreamSlots;
}
StreamEntry* find_stream(CUstream s) noexcept {
  for (std::size_t i = 0, h = stream_hash(s); i < kStreamSlots; ++i) {
    StreamEntry& e = g_streams[(h + i) % kStreamSlots];
    CUstream cur = e.stream.load(std::memory_order_acquire);
    if (cur == s) return &e;
    if (!cur) return nullptr;
  }
  return nullptr;
}

void remember(std::atomic<CUstream> (&slots)[kCached], CUstream s) noexcept {
  for (auto& a : slots) {
    CUstream empty = nullptr;
    if (a.compare_exchange_strong(empty, s) || empty == s) return;
  }
}

// Whether `s` is the legacy default stream under another handle than 0 or CU_STREAM_LEGACY: the
// runtime passes some driver calls its own handle of the legacy stream. Compared by the driver's
// stream id (cuStreamGetId, CUDA 12.0), which names the stream behind any handle.
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

// Records context `ctx`'s event on its legacy stream and arms it; `ctx` must be current. Under
// g_mu. False when no slot is free or the driver refused.
bool arm_legacy_event(const DriverTable* d, CUcontext ctx) noexcept {
  const CudaDriverApi& api = d->api;
  Slot* slot = nullptr;
  for (Slot& s : g_slots)
    if (s.ctx.load(std::memory_order_relaxed) == ctx) slot = &s;
  for (Slot& s : g_slots)
    if (!slot && !s.ctx.load(std::memory_order_relaxed)) slot = &s;
  if (!slot) return false;
  CUevent e = slot->ctx.load(std::memory_order_relaxed) == ctx ? slot->event.load(std::memory_order_relaxed) : nullptr;
  bool ok = e && api.cuEventRecord(e, CU_STREAM_LEGACY) == CUDA_SUCCESS;
  if (!ok) {  // first use in this context, or its old event died with a reset
    e = nullptr;
    ok = api.cuEventCreate(&e, CU_EVENT_DISABLE_TIMING) == CUDA_SUCCESS &&
         api.cuEventRecord(e, CU_STREAM_LEGACY) == CUDA_SUCCESS;
    if (ok) {
      slot->ctx.store(ctx, std::memory_order_relaxed);
      slot->event.store(e, std::memory_order_relaxed);
    }
  }
  if (ok) slot->armed.store(true, std::memory_order_relaxed);
  return ok;
}

// Records each live pool context's event on its legacy stream (each context made current in
// turn, then the caller's restored). Under g_mu. Returns how many were armed.
int record_switch_events(const DriverTable* d) noexcept {
  const CudaDriverApi& api = d->api;
  for (Slot& slot : g_slots) slot.armed.store(false, std::memory_order_relaxed);
  if (!api.cuEventCreate || !api.cuEventRecord || !d->cuCtxGetCurrent || !d->cuCtxSetCurrent) return 0;
  CUcontext mine = nullptr;
  if (d->cuCtxGetCurrent(&mine) != CUDA_SUCCESS) return 0;
  int armed = 0;
  for (ContextPool* p : pools().all()) {
    if (p->dropped.load(std::memory_order_acquire)) continue;
    if (p->ctx != mine && d->cuCtxSetCurrent(p->ctx) != CUDA_SUCCESS) continue;
    if (arm_legacy_event(d, p->ctx)) ++armed;
    if (p->ctx != mine) d->cuCtxSetCurrent(mine);
  }
  return armed;
}

// Under g_mu, in state 0: the switch to the multi-stream rule (`by`, `s`: what switched, for the
// log). Returns the new word.
std::uint64_t switch_locked(const DriverTable* d, Hook by, CUstream s, std::uint64_t word) noexcept {
  g_other.store(true, std::memory_order_seq_cst);
  bump(g_counters.other_streams_seen);
  for (ContextPool* p : pools().all()) p->mark_all_unsynced();
  // The debug log says each thing once; a program that keeps returning to one stream switches
  // at every step, so later switches are logged only at trace level (and counted).
  const bool first = !g_switch_logged;
  g_switch_logged = true;
  if (log_enabled(first ? LogLevel::debug : LogLevel::trace))
    log_line(first ? LogLevel::debug : LogLevel::trace,
             "work on a stream other than the legacy default stream, first by {} (stream {}){}",
             hook_name(static_cast<std::uint16_t>(by)), static_cast<const void*>(s),
             first ? "; later switches are counted in shim.other_streams_seen" : "");
  if (log_enabled(LogLevel::trace)) {  // where the program put it: the native frames, to stderr
    void* frames[48];
    backtrace_symbols_fd(frames, backtrace(frames, 48), 2);
  }
  int armed = 0;
  // Only lazy_sync hands blocks out without a synchronisation on the legacy stream's order, and
  // the events are needed only if it did so since the last synchronisation.
  const bool reused = g_reuses.load(std::memory_order_seq_cst) != g_reuses_synced.load(std::memory_order_seq_cst);
  if (lazy_policy() && reused) {
    if (capture_active())
      bump(g_counters.unguarded_switches);  // a legacy-stream record would invalidate that capture
    else if (d->api.cuEventQuery)
      armed = record_switch_events(d);
  }
  const std::uint64_t next = ((word >> 2) + 1) << 2 | (armed > 0 ? 1 : 2);
  g_word.store(next, std::memory_order_seq_cst);
  return next;
}

// While the switch's events are pending: make `s` wait for them on the GPU; once all have
// completed, nothing is left to do at any submission (state 2, if no later switch came). While a
// capture is active anywhere, an event query could invalidate it: only wait. Only success, or a
// context that is gone with its work, counts as completed.
void wait_for_switch(const DriverTable* d, CUstream s, std::uint64_t word) noexcept {
  const bool query = !capture_active();
  bool pending = false;
  for (Slot& slot : g_slots) {
    if (!slot.armed.load(std::memory_order_relaxed)) continue;
    CUevent e = slot.event.load(std::memory_order_relaxed);
    if (query) {
      const CUresult r = d->api.cuEventQuery(e);
      if (r == CUDA_SUCCESS || r == CUDA_ERROR_CONTEXT_IS_DESTROYED || r == CUDA_ERROR_INVALID_CONTEXT) continue;
    }
    pending = true;
    if (d->cuStreamWaitEvent && d->cuStreamWaitEvent(s, e, 0) == CUDA_SUCCESS) bump(g_counters.other_stream_waits);
  }
  if (!pending) g_word.compare_exchange_strong(word, (word & ~std::uint64_t{3}) | 2, std::memory_order_seq_cst);
}
}  // namespace

void on_other_stream(Hook by, CUstream s) noexcept {
  if (EntryScope::internal()) return;
  const DriverTable* d = driver();
  if (!d) return;
  InternalScope internal;
  if (s != CU_STREAM_LEGACY && capturing(d, s)) return;  // captured work runs at its graph's launch
  std::uint64_t word = g_word.load(std::memory_order_seq_cst);
  if (state_of(word) == 0 || state_of(word) == 3) {
    std::lock_guard<std::mutex> lock(g_mu);  // a return to one stream in progress ends first
    word = g_word.load(std::memory_order_seq_cst);
    if (state_of(word) == 0) word = switch_locked(d, by, s, word);
  }
  if (state_of(word) == 1) wait_for_switch(d, s, word);
}

}  // namespace stream_work_detail

using namespace stream_work_detail;

void note_per_thread_stream(Hook by) noexcept {
  if (state_of(g_word.load(std::memory_order_seq_cst)) == 2) return;
  // Counted as work on another stream in progress, so that a return to one stream cannot pass it.
  g_inflight.fetch_add(1, std::memory_order_seq_cst);
  on_other_stream(by, CU_STREAM_PER_THREAD);
  g_side_done.fetch_add(1, std::memory_order_seq_cst);
  g_inflight.fetch_sub(1, std::memory_order_seq_cst);
}

void note_several_contexts(Hook by) noexcept {
  if (EntryScope::internal()) return;
  const DriverTable* d = driver();
  if (!d) return;
  InternalScope internal;
  std::lock_guard<std::mutex> lock(g_mu);
  const std::uint64_t word = g_word.load(std::memory_order_seq_cst);
  if (state_of(word) == 0) switch_locked(d, by, nullptr, word);
}

bool stream_work_detail::legacy_handle(CUstream s) noexcept {
  const DriverTable* d = driver();
  return d && legacy_alias(d, s);
}

bool other_stream_used() noexcept { return g_other.load(std::memory_order_relaxed); }

bool lazy_policy() noexcept {
  const ReusePolicy r = config().settings.reuse;
  return r == ReusePolicy::lazy_sync || r == ReusePolicy::lazy_barrier;
}

// Note [GPU-side barrier] (reuse:lazy_barrier). Under the multi-stream rule, lazy_sync
// synchronises the context before handing out recently freed memory, so that nothing submitted
// before the free can still use the block. A reuse needs less: the block's *next* users must run
// after every piece of work submitted before the free; the host need not wait for it. The barrier
// orders them on the GPU:
//  1. for each non-blocking stream with work since the barrier before: an event recorded on it,
//     and the legacy default stream made to wait for it (cuStreamWaitEvent); and the same for the
//     events recorded on streams at their destruction since then (a destroyed stream's queued
//     work still runs);
//  2. an event e recorded on the legacy stream: it completes after all earlier work of the legacy
//     stream, of every blocking stream (the per-thread default streams too: the legacy stream's
//     implicit synchronisation) and, by step 1, of every non-blocking stream;
//  3. every later submission on another stream waits for e on the GPU until e has completed: the
//     state of the switch (Note [work on another stream]) with e as its event, so a stream created
//     after the barrier waits too. Later work on the legacy stream and on blocking streams is
//     ordered after e by the legacy stream's rules.
// Which streams had work: each submission on a created stream registers it after the driver
// returned (note_stream_work), stamped with the barrier epoch read again after the stamp
// (stamp_now), and a barrier that raises the epoch from k records on every stream stamped k or
// later. A submission that returned before the free was stamped before the barrier began, so
// either this barrier sees its stamp, or an earlier barrier that began after the stamp recorded
// on its stream after the work, which the legacy stream has waited for since. Stamps only rise.
// The barrier synchronises instead (returns false; shim.barrier_fallbacks) wherever this does not
// hold: another context with streams or a pool (one context's legacy stream orders nothing in
// another), a submission the registry could not hold (1,024 streams, three or more streams in one
// call, 64 destroyed streams with unfinished work) since the barrier before, an active stream
// capture (a record or wait on the legacy stream would join or invalidate it), or a failed driver
// call. Blocking streams need no event: the legacy stream already waits for them. The cost is a
// record and a wait per non-blocking stream with recent work plus one record, all on the calling
// thread without waiting, and a query and a wait at the next submissions on other streams while
// e is pending. One order it adds: the legacy stream waits for work then queued on the side
// streams (a collective in flight), where lazy_sync's host waited for everything.
bool stream_work_detail::barrier_policy() noexcept {
  int on = g_barrier_on.load(std::memory_order_relaxed);
  if (on == 0) {
    on = config().settings.reuse == ReusePolicy::lazy_barrier ? 2 : 1;
    g_barrier_on.store(on, std::memory_order_relaxed);
  }
  return on == 2;
}

void stream_work_detail::note_stream_work(CUstream s) noexcept {
  if (!s) {
    stamp_now(g_blind_stamp);
    return;
  }
  if (StreamEntry* e = find_stream(s)) {
    stamp_now(e->stamp);
    return;
  }
  // A new stream: its context and flags first, outside the lock (driver queries).
  const DriverTable* d = driver();
  if (!d) return;
  InternalScope internal;
  CUcontext ctx = nullptr;
  unsigned flags = CU_STREAM_NON_BLOCKING;
  if (!d->cuStreamGetCtx || d->cuStreamGetCtx(s, &ctx) != CUDA_SUCCESS || !ctx) {
    stamp_now(g_blind_stamp);
    return;
  }
  if (d->cuStreamGetFlags && d->cuStreamGetFlags(s, &flags) != CUDA_SUCCESS) flags = CU_STREAM_NON_BLOCKING;
  StreamEntry* e = nullptr;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    if (!g_stream_context) g_stream_context = ctx;
    if (ctx != g_stream_context) g_several_stream_contexts.store(true, std::memory_order_seq_cst);
    StreamEntry* free_slot = nullptr;
    for (std::size_t i = 0, h = stream_hash(s); i < kStreamSlots && !e; ++i) {
      StreamEntry& slot = g_streams[(h + i) % kStreamSlots];
      CUstream cur = slot.stream.load(std::memory_order_relaxed);
      if (cur == s) e = &slot;
      if (cur == kGone && !free_slot) free_slot = &slot;
      if (!cur) {
        if (!free_slot) free_slot = &slot;
        break;
      }
    }
    if (!e && free_slot) {
      e = free_slot;
      e->ctx = ctx;
      e->nonblocking = (flags & CU_STREAM_NON_BLOCKING) != 0;
      e->event = nullptr;
      e->stamp.store(0, std::memory_order_relaxed);
      e->stream.store(s, std::memory_order_release);
    }
  }
  stamp_now(e ? e->stamp : g_blind_stamp);
}

bool gpu_barrier(CUcontext ctx) noexcept {
  if (!barrier_policy()) return false;
  const DriverTable* d = driver();
  const CudaDriverApi* api = d ? &d->api : nullptr;
  bool mine = false;
  if (!d || !api->cuEventCreate || !api->cuEventRecord || !api->cuEventQuery || !d->cuStreamWaitEvent ||
      g_several_stream_contexts.load(std::memory_order_seq_cst) || capture_active() || pools().live(ctx, &mine) != 1 ||
      !mine) {
    bump(g_counters.barrier_fallbacks);
    return false;
  }
  InternalScope internal;
  std::lock_guard<std::mutex> lock(g_mu);
  const std::uint64_t k = g_barrier_epoch.fetch_add(1, std::memory_order_seq_cst);
  bool ok = g_blind_stamp.load(std::memory_order_seq_cst) < k && (!g_stream_context || g_stream_context == ctx);
  // 1. the legacy stream waits for the recent work of every non-blocking stream
  for (StreamEntry& e : g_streams) {
    CUstream s = e.stream.load(std::memory_order_relaxed);
    if (!ok) break;
    if (!s || s == kGone || !e.nonblocking || e.stamp.load(std::memory_order_seq_cst) < k) continue;
    if (!e.event && api->cuEventCreate(&e.event, CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS) e.event = nullptr;
    ok = e.event && api->cuEventRecord(e.event, s) == CUDA_SUCCESS &&
         d->cuStreamWaitEvent(CU_STREAM_LEGACY, e.event, 0) == CUDA_SUCCESS;
  }
  for (int i = 0; ok && i < g_departed_n; ++i)
    ok = d->cuStreamWaitEvent(CU_STREAM_LEGACY, g_departed[i], 0) == CUDA_SUCCESS;
  // 2. and 3.: the legacy stream's event, armed as the switch's
  ok = ok && arm_legacy_event(d, ctx);
  if (!ok) {
    bump(g_counters.barrier_fallbacks);
    return false;  // the caller's synchronisation finishes everything, departed work included
  }
  for (int i = 0; i < g_departed_n; ++i)
    if (api->cuEventDestroy_v2) api->cuEventDestroy_v2(g_departed[i]);  // the waits above hold their state
  g_departed_n = 0;
  const std::uint64_t word = g_word.load(std::memory_order_seq_cst);
  if (state_of(word) != 0) g_word.store(((word >> 2) + 1) << 2 | 1, std::memory_order_seq_cst);
  bump(g_counters.gpu_barriers);
  return true;
}

void note_stream_destroy(CUstream s) noexcept {
  if (!s || s == CU_STREAM_LEGACY || s == CU_STREAM_PER_THREAD || EntryScope::internal() || !barrier_policy()) return;
  StreamEntry* e = find_stream(s);
  if (!e) return;
  const DriverTable* d = driver();
  if (!d) return;
  InternalScope internal;
  std::lock_guard<std::mutex> lock(g_mu);
  if (e->stream.load(std::memory_order_relaxed) != s) return;
  // Work a barrier has not covered yet: an event recorded now completes after it, and the next
  // barrier makes the legacy stream wait for it. Blocking streams need none.
  if (e->nonblocking && e->stamp.load(std::memory_order_seq_cst) >= g_barrier_epoch.load(std::memory_order_seq_cst)) {
    bool handed = false;
    if (g_departed_n < kDeparted && e->event && d->api.cuEventRecord &&
        d->api.cuEventRecord(e->event, s) == CUDA_SUCCESS) {
      g_departed[g_departed_n++] = e->event;
      e->event = nullptr;
      handed = true;
    } else if (g_departed_n < kDeparted && !e->event && d->api.cuEventCreate && d->api.cuEventRecord) {
      CUevent ev = nullptr;
      if (d->api.cuEventCreate(&ev, CU_EVENT_DISABLE_TIMING) == CUDA_SUCCESS) {
        if (d->api.cuEventRecord(ev, s) == CUDA_SUCCESS) {
          g_departed[g_departed_n++] = ev;
          handed = true;
        } else if (d->api.cuEventDestroy_v2) {
          d->api.cuEventDestroy_v2(ev);
        }
      }
    }
    if (!handed) raise_to(g_blind_stamp, g_barrier_epoch.load(std::memory_order_seq_cst));
  }
  if (e->event && d->api.cuEventDestroy_v2) d->api.cuEventDestroy_v2(e->event);
  e->event = nullptr;
  e->stream.store(kGone, std::memory_order_release);
}

void note_cached_allocation() noexcept { g_reuses.fetch_add(1, std::memory_order_seq_cst); }

void forget_stream_handles() noexcept {
  for (auto& a : g_aliases) a.store(nullptr, std::memory_order_relaxed);
  for (auto& a : g_others) a.store(nullptr, std::memory_order_relaxed);
}

void stream_work_after_fork_child() noexcept {
  new (&g_mu) std::mutex;
  g_switch_logged = false;
  g_word.store(0, std::memory_order_seq_cst);
  g_other.store(false, std::memory_order_seq_cst);
  g_inflight.store(0, std::memory_order_seq_cst);
  g_side_done.store(0, std::memory_order_seq_cst);
  g_reuses.store(0, std::memory_order_seq_cst);
  g_reuses_synced.store(0, std::memory_order_seq_cst);
  for (Slot& s : g_slots) {  // the parent's events belong to its contexts
    s.ctx.store(nullptr, std::memory_order_relaxed);
    s.event.store(nullptr, std::memory_order_relaxed);
    s.armed.store(false, std::memory_order_relaxed);
  }
  for (StreamEntry& e : g_streams) {  // and its streams
    e.stream.store(nullptr, std::memory_order_relaxed);
    e.stamp.store(0, std::memory_order_relaxed);
    e.event = nullptr;
  }
  g_barrier_epoch.store(1, std::memory_order_relaxed);
  g_blind_stamp.store(0, std::memory_order_relaxed);
  g_several_stream_contexts.store(false, std::memory_order_relaxed);
  g_stream_context = nullptr;
  g_departed_n = 0;
  forget_stream_handles();
}

// Note [return to one stream]: the switch need not last. Libraries put work on streams of their
// own now and then -- on the H200, cuDNN's handle creation (PyTorch's first attention call) sets
// memory on a stream of its own, once -- and a synchronisation of the whole context finishes all
// of it. If no work on another stream was in progress or done from the moment a synchronisation
// began until it returned, every block's earlier users have finished or are ordered on the
// legacy stream, and the single-stream rule holds again: back to state 0, with no range
// remembered; the next work on another stream switches again, events and GPU-side waits included.
// Only with one context: another context's streams are not finished by this one's
// synchronisation.
//
// The decision races with submissions on other streams that saw state 2 and go on without the
// lock. Each such submission counts itself in g_inflight (seq_cst) before it reads the state, and
// counts itself in g_side_done before it stops counting as in progress. The return sets state 3,
// then reads g_inflight, then g_side_done (all seq_cst): either it sees the submission (in
// progress, or done since the synchronisation began) and stays switched, or the submission reads
// state 3 and takes the slow path, which waits for g_mu and then switches again. A counter, not a
// flag, so that overlapping synchronisations of several threads cannot clear each other's view.
// A submission that finished before the synchronisation began was covered by it.
SyncToken side_work_before_sync() noexcept {
  return {g_side_done.load(std::memory_order_seq_cst), g_reuses.load(std::memory_order_seq_cst)};
}

void side_work_after_sync(CUcontext ctx, SyncToken before) noexcept {
  // The reuses handed out before the synchronisation began are covered by it.
  std::uint64_t synced = g_reuses_synced.load(std::memory_order_relaxed);
  while (synced < before.reuses &&
         !g_reuses_synced.compare_exchange_weak(synced, before.reuses, std::memory_order_seq_cst)) {
  }
  if (state_of(g_word.load(std::memory_order_seq_cst)) == 0 || !lazy_policy()) return;
  std::lock_guard<std::mutex> lock(g_mu);
  const std::uint64_t word = g_word.load(std::memory_order_seq_cst);
  if (state_of(word) == 0 || g_side_done.load(std::memory_order_seq_cst) != before.side_done) return;
  bool mine = false;
  const int live = pools().live(ctx, &mine);
  if (live > 1 || (live == 1 && !mine)) return;
  const std::uint64_t base = word & ~std::uint64_t{3};
  g_word.store(base | 3, std::memory_order_seq_cst);
  if (g_inflight.load(std::memory_order_seq_cst) != 0 ||
      g_side_done.load(std::memory_order_seq_cst) != before.side_done) {
    g_word.store(word, std::memory_order_seq_cst);
    return;
  }
  g_other.store(false, std::memory_order_seq_cst);
  for (Slot& slot : g_slots) slot.armed.store(false, std::memory_order_relaxed);
  bump(g_counters.returns_to_one_stream);
  g_word.store(base, std::memory_order_seq_cst);
}

}  // namespace vramtrace::shim
