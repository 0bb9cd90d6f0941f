// Work on a stream other than the legacy default stream: what ends reuse:lazy_sync's sync-free
// reuse (Note [single stream needs no sync], context_pool.h).
//
// Note [work on another stream]: the single-stream rule holds while all device work is ordered on
// the legacy default stream. What breaks it is work on another stream, not the stream's creation:
// PyTorch creates 32 pool streams at start-up and a single-GPU training may never put work on one.
// So every driver call that puts device work on a stream (kernel and graph launches, copies, sets,
// stream memory operations, batch decompression: the SUBMIT hooks of hooks.def, generated from
// cuda.h by scripts/gen_submit_hooks.py) reports its stream before it is forwarded. The first one
// that is not the legacy stream -- a created stream, or a per-thread default stream (_ptsz, _ptds,
// CU_STREAM_PER_THREAD) -- switches the process to the multi-stream rule (Note [lazy sync before
// reuse]) for good, and everything freed so far becomes unsynchronised (mark_all_unsynced).
//
// Blocks handed out before the switch were reused without a synchronisation, which was safe only
// in the order of the legacy stream: their earlier users may still run there, and a later user on
// the new stream (non-blocking streams do not wait for legacy work) could race them. So at the
// switch an event is recorded on the legacy stream of every pool's context, and until those
// events have completed (polled with cuEventQuery, never waited on by the host) each submission on
// a non-legacy stream first makes its stream wait for them on the GPU (cuStreamWaitEvent). Once
// they complete -- usually within milliseconds -- the check is one relaxed load per call. Work
// captured into a graph does not run when it is submitted, so a capturing stream neither switches
// nor waits; its graph's launch is a submission like any other. If another thread is capturing at
// the switch, no event can be recorded on a legacy stream (that would invalidate its capture):
// the switch then happens without the events (counted as shim.unguarded_switches).
// Calls this list does not know (added to the driver after CUDA 13.0) are not seen: re-run the
// generator for a new toolkit.
#pragma once

#include <atomic>
#include <cstdint>

#include "base/cuda_api.h"
#include "base/hooks.h"
#include "base/streams.h"

namespace vramtrace::shim {

namespace stream_work_detail {
/// 0 while only the legacy stream has work; 1 after the switch, until its events completed;
/// 2 afterwards (nothing left to do at any submission).
extern std::atomic<int> g_state;
/// The slow path of note_stream_work: the switch, and the GPU-side wait while its events are
/// pending. `s` is the handle to make wait (CU_STREAM_PER_THREAD for a per-thread stream).
void on_other_stream(Hook by, CUstream s) noexcept;

inline void note_arg(Hook by, bool per_thread, CUstream s) noexcept {
  StreamId key = stream_key(s, per_thread);
  if (key.value != 0) on_other_stream(by, is_per_thread_key(key) ? CU_STREAM_PER_THREAD : s);
}
inline void note_arg(Hook by, bool per_thread, const CUlaunchConfig* config) noexcept {
  if (config) note_arg(by, per_thread, config->hStream);
}
template <class T>
inline void note_arg(Hook, bool, T) noexcept {}

constexpr bool ends_with(const char* s, const char* suffix) noexcept {
  std::size_t n = 0, m = 0;
  while (s[n]) ++n;
  while (suffix[m]) ++m;
  if (m > n) return false;
  for (std::size_t i = 0; i < m; ++i)
    if (s[n - m + i] != suffix[i]) return false;
  return true;
}
}  // namespace stream_work_detail

/// Whether a hook's ABI name is a per-thread variant: _ptsz (stream 0 is the thread's own default
/// stream) or _ptds (a synchronous call on the thread's own default stream).
constexpr bool per_thread_name(const char* name) noexcept {
  return stream_work_detail::ends_with(name, "_ptsz") || stream_work_detail::ends_with(name, "_ptds");
}

/// Reports the stream of work about to be submitted by hook `by` (its arguments `a`, scanned by
/// type for a CUstream or a CUlaunchConfig). Call before forwarding the call. `synchronous_pt`:
/// a _ptds call, whose work goes on the per-thread default stream without a stream argument.
/// Thread-safe; after the switch has settled, one relaxed load.
template <class... A>
inline void note_stream_work(Hook by, bool per_thread, bool synchronous_pt, A... a) noexcept {
  if (stream_work_detail::g_state.load(std::memory_order_acquire) == 2) return;
  if (synchronous_pt) {
    stream_work_detail::on_other_stream(by, CU_STREAM_PER_THREAD);
    return;
  }
  (stream_work_detail::note_arg(by, per_thread, a), ...);
}

/// A multi-device cooperative launch: each device's stream.
inline void note_stream_work(Hook by, bool per_thread, bool, CUDA_LAUNCH_PARAMS* list, unsigned int n,
                             unsigned int) noexcept {
  if (stream_work_detail::g_state.load(std::memory_order_acquire) == 2 || !list) return;
  for (unsigned int i = 0; i < n; ++i) stream_work_detail::note_arg(by, per_thread, list[i].hStream);
}

/// An allocation or free on a per-thread default stream (the memory's users will be work there):
/// the same switch as note_stream_work.
void note_per_thread_stream(Hook by) noexcept;

/// Whether the process has switched to the multi-stream rule. One relaxed load.
bool other_stream_used() noexcept;

}  // namespace vramtrace::shim
