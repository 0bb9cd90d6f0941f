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
/// 2 afterwards; 3 while a synchronisation's return to 0 is being decided (return_to_single).
extern std::atomic<int> g_state;
/// Submissions on another stream in progress (between their report and the driver's return).
extern std::atomic<int> g_inflight;
/// Work went on another stream since the last synchronisation began (side_work_before_sync).
extern std::atomic<bool> g_side_work;
/// Whether `s` (neither 0 nor a per-thread handle) names the legacy default stream. Cached.
bool legacy_handle(CUstream s) noexcept;
/// The slow path: the switch, and the GPU-side wait while its events are pending. `s` is the
/// handle to make wait (CU_STREAM_PER_THREAD for a per-thread stream).
void on_other_stream(Hook by, CUstream s) noexcept;

/// The stream of an argument if it is not the legacy stream (CU_STREAM_PER_THREAD for this
/// thread's default stream), else null.
inline CUstream other_stream(bool per_thread, CUstream s) noexcept {
  StreamId key = stream_key(s, per_thread);
  if (key.value == 0) return nullptr;
  if (is_per_thread_key(key)) return CU_STREAM_PER_THREAD;
  return legacy_handle(s) ? nullptr : s;
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
}  // namespace stream_work_detail

/// Whether a hook's ABI name is a per-thread variant: _ptsz (stream 0 is the thread's own default
/// stream) or _ptds (a synchronous call on the thread's own default stream).
constexpr bool per_thread_name(const char* name) noexcept {
  return stream_work_detail::ends_with(name, "_ptsz") || stream_work_detail::ends_with(name, "_ptds");
}

/// RAII around one work submission (a SUBMIT hook's call of the real function): the constructor
/// reports the work's stream before the call (arguments scanned by type for a CUstream or a
/// CUlaunchConfig; `synchronous_pt` for a _ptds call, whose work goes on the per-thread default
/// stream without a stream argument), the destructor after the driver returned. Work on the
/// legacy stream costs a key computation; work on another stream two atomic updates and, until
/// the switch has settled, the slow path. Thread-safe.
class SubmitScope {
 public:
  template <class... A>
  SubmitScope(Hook by, bool per_thread, bool synchronous_pt, A... a) noexcept {
    if (synchronous_pt)
      report(by, CU_STREAM_PER_THREAD);
    else
      (visit(by, per_thread, a), ...);
  }
  /// A multi-device cooperative launch: each device's stream.
  SubmitScope(Hook by, bool per_thread, bool, CUDA_LAUNCH_PARAMS* list, unsigned int n, unsigned int) noexcept {
    for (unsigned int i = 0; list && i < n; ++i) visit(by, per_thread, list[i].hStream);
  }
  ~SubmitScope() {
    if (!other_) return;
    // Note [return to one stream] (stream_work.cpp): the work is marked before it stops counting
    // as in progress.
    stream_work_detail::g_side_work.store(true, std::memory_order_seq_cst);
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
    if (stream_work_detail::g_state.load(std::memory_order_seq_cst) != 2) stream_work_detail::on_other_stream(by, s);
  }
  void visit(Hook by, bool per_thread, CUstream s) noexcept {
    report(by, stream_work_detail::other_stream(per_thread, s));
  }
  void visit(Hook by, bool per_thread, const CUlaunchConfig* config) noexcept {
    if (config) visit(by, per_thread, config->hStream);
  }
  template <class T>
  void visit(Hook, bool, T) noexcept {}
  bool other_ = false;
};

/// An allocation or free on a per-thread default stream (the memory's users will be work there):
/// the same switch as a submission there.
void note_per_thread_stream(Hook by) noexcept;

/// Whether the process is under the multi-stream rule. One relaxed load.
bool other_stream_used() noexcept;

/// Around a synchronisation of a whole context `ctx` (the shim's lazy sync or the program's
/// cuCtxSynchronize): call side_work_before_sync before it, and side_work_after_sync after it
/// succeeded. When the process has one context and no work went on another stream in between,
/// everything submitted before has finished, and the process is back under the single-stream
/// rule (Note [return to one stream] in stream_work.cpp). Thread-safe.
void side_work_before_sync() noexcept;
void side_work_after_sync(CUcontext ctx) noexcept;

}  // namespace vramtrace::shim
