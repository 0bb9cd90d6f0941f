// Work on a stream other than the legacy default stream: what ends reuse:lazy_sync's sync-free
// reuse (Note [single stream needs no sync], context_pool.h).
//
// Note [work on another stream]: the single-stream rule holds while all device work is ordered on
// the legacy default stream of one context. What breaks it is work on another stream, not the
// stream's creation: PyTorch creates 32 pool streams at start-up and a single-GPU training may
// never put work on one. So every driver call that puts device work on a stream (kernel and graph
// launches, copies, sets, stream memory operations, batch decompression: the SUBMIT hooks of
// hooks.def, generated from cuda.h by scripts/gen_submit_hooks.py) reports its stream before it is
// forwarded. The first that is not the legacy stream -- a created stream, a per-thread default
// stream (_ptsz, _ptds, CU_STREAM_PER_THREAD), and also a copy between devices, a launch that may
// overlap its predecessor (programmatic dependent launch), or a second live context, whose
// legacy stream is another stream -- switches the process to the multi-stream rule (Note [lazy
// sync before reuse]), and everything freed so far becomes unsynchronised (mark_all_unsynced).
//
// Blocks handed out since the last synchronisation were reused in the legacy stream's order
// alone: their earlier users may still run there, and a later user on the new stream
// (non-blocking streams do not wait for legacy work) could race them. So if the cache served any
// allocation since the last synchronisation, the switch records an event on the legacy stream of
// every pool's context, and until those complete (polled with cuEventQuery, never waited on by the
// host) each submission on a non-legacy stream first makes its stream wait for them on the GPU
// (cuStreamWaitEvent). Once they complete the check is one load per call. Work captured into a
// graph does not run when it is submitted, so a capturing stream neither switches nor waits (its
// graph's launch is a submission); while any capture is active, events are waited for but not
// queried (a query could invalidate a global-mode capture). If another thread is capturing at the
// switch, no event can be recorded on a legacy stream: the switch then happens without them
// (shim.unguarded_switches). One hazard stays: a program whose legacy-stream kernel waits for
// work that it then puts on another stream (a persistent kernel polling a flag set from there)
// would wait for ever behind the event; reuse:device_sync has no events. Calls this list does not
// know (added to the driver after CUDA 13.0) are not seen: re-run the generator for a new toolkit.
#pragma once

#include <atomic>
#include <cstdint>

#include "base/cuda_api.h"
#include "base/hooks.h"
#include "base/streams.h"

namespace vramtrace::shim {

namespace stream_work_detail {
/// The state (low 2 bits) and the number of switches so far (above them), in one word so that a
/// late update for an earlier switch cannot change a later one's state. States: 0 while only the
/// legacy stream has work; 1 after a switch, until its events completed; 2 afterwards; 3 while a
/// synchronisation's return to 0 is being decided (side_work_after_sync).
extern std::atomic<std::uint64_t> g_word;
inline int state_of(std::uint64_t word) noexcept { return static_cast<int>(word & 3); }
/// Submissions on another stream in progress (between their report and the driver's return).
extern std::atomic<int> g_inflight;
/// Submissions on another stream that have returned, ever (Note [return to one stream]).
extern std::atomic<std::uint64_t> g_side_done;
/// Whether `s` (neither 0 nor a per-thread handle) names the legacy default stream. Cached.
bool legacy_handle(CUstream s) noexcept;
/// The slow path: the switch, and the GPU-side wait while its events are pending. `s` is the
/// handle to make wait (CU_STREAM_PER_THREAD for a per-thread stream).
void on_other_stream(Hook by, CUstream s) noexcept;
/// Whether reuse:lazy_barrier is in force (the streams with work are then registered). One load.
bool barrier_policy() noexcept;
/// reuse:lazy_barrier: work on created stream `s` (not the legacy stream, not a per-thread
/// default stream; null: a stream the registry was not told, so the next barriers fall back to a
/// synchronisation) has been submitted and the driver has returned. Thread-safe.
void note_stream_work(CUstream s) noexcept;

/// The stream of an argument if it is not the legacy stream (CU_STREAM_PER_THREAD for this
/// thread's default stream), else null.
inline CUstream other_stream(bool per_thread, CUstream s) noexcept {
  StreamId key = stream_key(s, per_thread);
  if (key.value == 0) return nullptr;
  if (is_per_thread_key(key)) return CU_STREAM_PER_THREAD;
  return legacy_handle(s) ? nullptr : s;
}

/// Whether a launch's attributes let it overlap the kernel before it on its stream
/// (programmatic dependent launch): then stream order no longer orders it after earlier users.
inline bool overlaps_predecessor(const CUlaunchConfig& config) noexcept {
  for (unsigned int i = 0; config.attrs && i < config.numAttrs; ++i) {
    const CUlaunchAttribute& a = config.attrs[i];
    if (a.id == CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION && a.value.programmaticStreamSerializationAllowed)
      return true;
    if (a.id == CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_EVENT) return true;
  }
  return false;
}

constexpr bool ends_with(const char* s, const char* suffix) noexcept {
  std::size_t n = 0, m = 0;
  while (s[n]) ++n;
  while (suffix[m]) ++m;
  if (m > n) return false;
  for (std::size_t i = 0; i < m; ++i)
    if (s[n - m + i] != suffix[i]) return false;
  return true;
}
constexpr bool contains(const char* s, const char* part) noexcept {
  for (std::size_t i = 0; s[i]; ++i) {
    std::size_t j = 0;
    while (part[j] && s[i + j] == part[j]) ++j;
    if (!part[j]) return true;
  }
  return false;
}
}  // namespace stream_work_detail

/// Whether a hook's ABI name is a per-thread variant: _ptsz (stream 0 is the thread's own default
/// stream) or _ptds (a synchronous call on the thread's own default stream).
constexpr bool per_thread_name(const char* name) noexcept {
  return stream_work_detail::ends_with(name, "_ptsz") || stream_work_detail::ends_with(name, "_ptds");
}

/// RAII around one work submission (a SUBMIT hook's call of the real function): the constructor
/// reports the work's stream before the call (arguments scanned by type for a CUstream or a
/// CUlaunchConfig; `synchronous_pt` for a _ptds call, whose work goes on the per-thread default
/// stream without a stream argument; `peer` for a copy between devices, which reaches another
/// context's memory whatever its stream), the destructor after the driver returned. Work on the
/// legacy stream costs a key computation; work on another stream three atomic updates and, until
/// the switch has settled, the slow path. Thread-safe.
class SubmitScope {
 public:
  template <class... A>
  SubmitScope(Hook by, bool per_thread, bool synchronous_pt, bool peer, A... a) noexcept {
    if (synchronous_pt) report(by, CU_STREAM_PER_THREAD);
    (visit(by, per_thread, a), ...);
    if (peer && !other_) report(by, CU_STREAM_LEGACY);
  }
  /// A multi-device cooperative launch: each device's stream.
  SubmitScope(Hook by, bool per_thread, bool, bool, CUDA_LAUNCH_PARAMS* list, unsigned int n, unsigned int) noexcept {
    for (unsigned int i = 0; list && i < n; ++i) visit(by, per_thread, list[i].hStream);
    if (n > 1 && !other_) report(by, CU_STREAM_LEGACY);  // several devices' memory
  }
  ~SubmitScope() {
    if (!other_) return;
    if (stream_work_detail::barrier_policy()) {
      if (streams_ > 0) stream_work_detail::note_stream_work(stream_[0]);
      if (streams_ > 1) stream_work_detail::note_stream_work(stream_[1]);
      if (streams_ > 2) stream_work_detail::note_stream_work(nullptr);
    }
    // Note [return to one stream] (stream_work.cpp): counted as done before it stops counting as
    // in progress.
    stream_work_detail::g_side_done.fetch_add(1, std::memory_order_seq_cst);
    stream_work_detail::g_inflight.fetch_sub(1, std::memory_order_seq_cst);
  }
  SubmitScope(const SubmitScope&) = delete;
  SubmitScope& operator=(const SubmitScope&) = delete;

 private:
  void report(Hook by, CUstream s) noexcept {
    if (!s) return;
    if (!other_) {
      other_ = true;
      stream_work_detail::g_inflight.fetch_add(1, std::memory_order_seq_cst);
    }
    // Created streams, for the GPU-side barrier's registry (the legacy and per-thread default
    // streams need none: Note [GPU-side barrier], stream_work.cpp).
    if (s != CU_STREAM_LEGACY && s != CU_STREAM_PER_THREAD) {
      if (streams_ < 2) stream_[streams_] = s;
      ++streams_;
    }
    if (stream_work_detail::state_of(stream_work_detail::g_word.load(std::memory_order_seq_cst)) != 2)
      stream_work_detail::on_other_stream(by, s);
  }
  void visit(Hook by, bool per_thread, CUstream s) noexcept {
    report(by, stream_work_detail::other_stream(per_thread, s));
  }
  void visit(Hook by, bool per_thread, const CUlaunchConfig* config) noexcept {
    if (!config) return;
    CUstream s = stream_work_detail::other_stream(per_thread, config->hStream);
    if (!s && stream_work_detail::overlaps_predecessor(*config)) s = CU_STREAM_LEGACY;
    report(by, s);
  }
  template <class T>
  void visit(Hook, bool, T) noexcept {}
  bool other_ = false;
  int streams_ = 0;  // created streams reported (the first two kept)
  CUstream stream_[2] = {nullptr, nullptr};
};

/// An allocation or free on a per-thread default stream (the memory's users will be work there):
/// the same switch as a submission there.
void note_per_thread_stream(Hook by) noexcept;

/// A second live context (a pool was created while another lives): the legacy streams of several
/// contexts are not one stream, so the multi-stream rule applies.
void note_several_contexts(Hook by) noexcept;

/// Whether the reuse policy is one of the two that reuse at once while only the legacy stream has
/// work (lazy_sync, lazy_barrier).
bool lazy_policy() noexcept;

/// Note [GPU-side barrier] (stream_work.cpp). Under reuse:lazy_barrier, in place of the context
/// synchronisation before a reuse of recently freed memory: orders every later operation on any
/// stream of context `ctx` (which must be current and the only one the process uses) after all
/// work submitted before the call, on the GPU; the host does not wait. Returns false where it
/// cannot guarantee that (another policy, several contexts, an active stream capture, a stream
/// the registry could not hold, a driver call that failed): the caller then synchronises the
/// context as lazy_sync does. Thread-safe (the switch's lock).
bool gpu_barrier(CUcontext ctx) noexcept;

/// A stream is about to be destroyed (before cuStreamDestroy(_v2) reaches the driver): under
/// reuse:lazy_barrier, its unfinished work is handed to the next barrier (an event recorded on it
/// now) and the handle leaves the registry. Thread-safe.
void note_stream_destroy(CUstream s) noexcept;

/// Whether the process is under the multi-stream rule. One relaxed load.
bool other_stream_used() noexcept;

/// A cached allocation is about to be served (call before it decides whether to synchronise):
/// a switch after it must make other streams wait for the legacy stream, unless a finished
/// synchronisation began after it. One atomic increment. Thread-safe.
void note_cached_allocation() noexcept;

/// Around a synchronisation of a whole context `ctx` (the shim's lazy sync or the program's
/// cuCtxSynchronize): side_work_before_sync before it (its result is the token), and
/// side_work_after_sync after it succeeded. When the process has one context and no work on
/// another stream was in progress or done in between, everything submitted before has finished,
/// and the process is back under the single-stream rule (Note [return to one stream] in
/// stream_work.cpp). Thread-safe.
struct SyncToken {
  std::uint64_t side_done = 0;
  std::uint64_t reuses = 0;
};
SyncToken side_work_before_sync() noexcept;
void side_work_after_sync(CUcontext ctx, SyncToken before) noexcept;

/// Forgets cached stream handles (a context was reset or destroyed: its handles may be reused).
void forget_stream_handles() noexcept;

/// In a fork child (lifecycle.cpp's atfork handler, before any other call): the child has none
/// of the parent's contexts (their pools are abandoned) and no work of its own yet, so it starts
/// under the single-stream rule with no events, counts or cached handles, and a fresh lock (the
/// parent's may have been held by a thread that does not exist here). Async-signal-safe.
void stream_work_after_fork_child() noexcept;

}  // namespace vramtrace::shim
