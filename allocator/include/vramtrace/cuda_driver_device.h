// A DeviceBackend over the CUDA driver API, for libvramtrace.so: segments from cuMemAlloc_v2,
// expandable segments from the virtual-memory calls, stream events for cross-stream frees.
//
// The backend never links libcuda and never goes through the shim's exported symbols: the shim
// hands it a table of the REAL driver functions (resolved with dlopen("libcuda.so.1") and the
// real dlsym), so the allocator's own driver calls can never re-enter the shim's hooks (Note
// [recursion guard] in shim/src/base/entry.h).
#pragma once

#include <cuda.h>

#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>

#include "vramtrace/device_backend.h"

namespace vramtrace {

/// The real driver entry points the backend needs, by exact ABI name. Any pointer may be null
/// when the driver lacks the call; the backend then reports not_supported / device_error for the
/// features that need it (virtual memory needs all seven VMM calls).
struct CudaDriverApi {
  CUresult (*cuMemAlloc_v2)(CUdeviceptr*, size_t) = nullptr;
  CUresult (*cuMemFree_v2)(CUdeviceptr) = nullptr;
  CUresult (*cuMemGetInfo_v2)(size_t*, size_t*) = nullptr;
  CUresult (*cuMemAddressReserve)(CUdeviceptr*, size_t, size_t, CUdeviceptr, unsigned long long) = nullptr;
  CUresult (*cuMemAddressFree)(CUdeviceptr, size_t) = nullptr;
  CUresult (*cuMemCreate)(CUmemGenericAllocationHandle*, size_t, const CUmemAllocationProp*,
                          unsigned long long) = nullptr;
  CUresult (*cuMemRelease)(CUmemGenericAllocationHandle) = nullptr;
  CUresult (*cuMemMap)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle, unsigned long long) = nullptr;
  CUresult (*cuMemUnmap)(CUdeviceptr, size_t) = nullptr;
  CUresult (*cuMemSetAccess)(CUdeviceptr, size_t, const CUmemAccessDesc*, size_t) = nullptr;
  CUresult (*cuMemGetAllocationGranularity)(size_t*, const CUmemAllocationProp*,
                                            CUmemAllocationGranularity_flags) = nullptr;
  CUresult (*cuEventCreate)(CUevent*, unsigned int) = nullptr;
  CUresult (*cuEventRecord)(CUevent, CUstream) = nullptr;
  CUresult (*cuEventQuery)(CUevent) = nullptr;
  CUresult (*cuEventSynchronize)(CUevent) = nullptr;
  CUresult (*cuEventDestroy_v2)(CUevent) = nullptr;
  CUresult (*cuCtxSynchronize)() = nullptr;
};

/// Maps a StreamId of the shim to the CUstream to record events on. The shim encodes the
/// per-thread default stream of a thread as ((tid << 3) | 2): real stream handles are 8-byte
/// aligned pointers, so such a value never equals one. See Note [per-thread default stream] in
/// shim/src/base/streams.h.
CUstream to_cu_stream(StreamId s) noexcept;

/// One CUDA context's device memory, as a DeviceBackend.
///
/// Context: every call must be made with the owning context current on the calling thread (the
/// shim keys its allocators by the current context, so this holds). Thread-safe: the segment
/// table has its own lock; the driver is thread-safe.
///
/// Lifetime: after `abandon()` (context reset or destroyed, process forked or exiting) the
/// backend makes no driver call again: allocate/map fail with device_error, frees only forget.
class CudaDriverDevice final : public DeviceBackend {
 public:
  /// `api` must outlive the backend. `device` is the ordinal for cuMemCreate's location.
  CudaDriverDevice(const CudaDriverApi& api, int device) noexcept;

  Status allocate(std::uint64_t bytes, DevicePtr* out) noexcept override;
  Status deallocate(DevicePtr ptr, std::uint64_t bytes) noexcept override;
  MemInfo mem_info() noexcept override;

  bool supports_virtual_memory() const noexcept override;
  std::uint64_t page_bytes() const noexcept override { return page_bytes_; }
  Status reserve_address(std::uint64_t bytes, DevicePtr* out) noexcept override;
  Status release_address(DevicePtr base, std::uint64_t bytes) noexcept override;
  Status map(DevicePtr at, std::uint64_t bytes) noexcept override;
  Status unmap(DevicePtr at, std::uint64_t bytes) noexcept override;

  EventHandle record_event(StreamId stream) noexcept override;
  bool event_done(EventHandle ev) noexcept override;
  void wait_event(EventHandle ev) noexcept override;
  void destroy_event(EventHandle ev) noexcept override;
  void synchronize() noexcept override;
  /// cuCtxSynchronize of the owning context (current on the calling thread); true when it
  /// succeeded, false when it failed or the backend is abandoned. Thread-safe.
  bool synchronize_context() noexcept;

  /// Whether `ptr` lies inside a live segment or reserved range of this backend (used by the shim
  /// to tell a double free of a cached block from a pointer it never handed out).
  bool contains(DevicePtr ptr) const noexcept;
  /// The start of the segment or reserved range holding `ptr`, or 0 when none does.
  DevicePtr range_start(DevicePtr ptr) const noexcept;
  /// Bytes currently held from the driver (segments + mapped pages).
  std::uint64_t held_bytes() const noexcept;
  /// Stops all driver calls for good (see class comment). Thread-safe, idempotent.
  void abandon() noexcept { abandoned_.store(true, std::memory_order_release); }
  bool abandoned() const noexcept { return abandoned_.load(std::memory_order_acquire); }
  /// The CUresult of the last failed driver call (CUDA_SUCCESS if none), for error reports.
  CUresult last_error() const noexcept { return last_error_.load(std::memory_order_relaxed); }

 private:
  Status fail(CUresult r) noexcept;

  const CudaDriverApi& api_;
  int device_;
  std::uint64_t page_bytes_ = 2 * kMiB;
  std::atomic<bool> abandoned_{false};
  std::atomic<CUresult> last_error_{CUDA_SUCCESS};
  mutable std::mutex mu_;
  std::map<DevicePtr, std::uint64_t> ranges_;                // segments and reservations
  std::map<DevicePtr, CUmemGenericAllocationHandle> pages_;  // mapped page -> handle
  std::uint64_t held_bytes_ = 0;
};

}  // namespace vramtrace
