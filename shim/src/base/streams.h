// Canonical stream keys for the caching allocator.
//
// Note [per-thread default stream]: stream 0 means the legacy default stream in a legacy entry
// point but this thread's own default stream in a _ptsz entry point, and CU_STREAM_PER_THREAD
// (0x2) means the latter anywhere (docs/interposition.md, "Per-thread default stream"). Blocks
// are reused at once only on the same stream, so a per-thread stream must get a key of its own
// in every thread:
// ((tid << 3) | 2). Real stream handles are 8-byte aligned pointers and never take this form;
// CU_STREAM_LEGACY (0x1) and 0 in a legacy entry point are the legacy stream, key 0.
// to_cu_stream (cuda_driver_device.h) maps a key back for event records.
#pragma once

#include <sys/syscall.h>
#include <unistd.h>

#include <cstdint>

#include "base/cuda_api.h"
#include "vramtrace/types.h"

namespace vramtrace::shim {

/// gettid() of the calling thread, cached.
inline std::uint32_t this_thread_id() noexcept {
  static thread_local std::uint32_t tid = static_cast<std::uint32_t>(syscall(SYS_gettid));
  return tid;
}

/// Key of the calling thread's per-thread default stream.
inline StreamId per_thread_stream_key() noexcept {
  return StreamId{(static_cast<std::uint64_t>(this_thread_id()) << 3) | 2};
}

/// Whether `key` is a per-thread default stream's key (per_thread_stream_key).
inline bool is_per_thread_key(StreamId key) noexcept { return (key.value & 7) == 2; }

/// Canonical key of `s` as passed to an entry point; `per_thread_entry` for _ptsz variants.
inline StreamId stream_key(CUstream s, bool per_thread_entry) noexcept {
  auto v = reinterpret_cast<std::uintptr_t>(s);
  if (v == 0) return per_thread_entry ? per_thread_stream_key() : StreamId{0};
  if (s == CU_STREAM_LEGACY) return StreamId{0};
  if (s == CU_STREAM_PER_THREAD) return per_thread_stream_key();
  return StreamId{v};
}

}  // namespace vramtrace::shim
