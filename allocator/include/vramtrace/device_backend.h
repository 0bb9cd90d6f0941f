// The narrow interface between the caching allocator and a device: plain device allocations,
// the virtual-memory calls behind expandable segments, memory info and stream events.
#pragma once

#include <cstdint>

#include "vramtrace/types.h"

namespace vramtrace {

/// Free and total bytes of a device, as cudaMemGetInfo reports them.
struct MemInfo {
  std::uint64_t free_bytes = 0;
  std::uint64_t total_bytes = 0;
};

/// Opaque handle of a recorded stream event (cudaEvent_t in the CUDA backend). 0 = none.
using EventHandle = std::uint64_t;

/// A device the caching allocator draws segments from. Implementations: SimulatedDevice
/// (vramtrace/sim_device.h), CudaDriverDevice (vramtrace/cuda_driver_device.h), and adaptors such
/// as LimitingDevice that wrap another backend.
///
/// Units: bytes and device addresses. Alignment: `allocate` returns addresses aligned to at least
/// 512 bytes (CUDA guarantees 256). Thread safety: the caching allocator serialises its calls per
/// device; a backend shared between devices must be thread-safe itself.
class DeviceBackend {
 public:
  virtual ~DeviceBackend() = default;

  /// Allocates `bytes` (> 0) of device memory (cudaMalloc / cuMemAlloc). Returns
  /// Status::out_of_memory when the device cannot serve it; `*out` is then left unchanged.
  virtual Status allocate(std::uint64_t bytes, DevicePtr* out) noexcept = 0;
  /// Frees an allocation made by `allocate` (cudaFree: synchronises the device implicitly).
  virtual Status deallocate(DevicePtr ptr, std::uint64_t bytes) noexcept = 0;

  /// Free and total device memory (cudaMemGetInfo).
  virtual MemInfo mem_info() noexcept = 0;

  // --- Virtual memory, for expandable segments (cuMemAddressReserve/cuMemCreate/cuMemMap) ---
  /// Whether the reserve/map calls below work. Default false.
  virtual bool supports_virtual_memory() const noexcept { return false; }
  /// Physical page granularity in bytes for `map`/`unmap` (2 MiB on current GPUs).
  virtual std::uint64_t page_bytes() const noexcept { return 2 * kMiB; }
  /// Reserves `bytes` of address space, no physical memory.
  virtual Status reserve_address(std::uint64_t bytes, DevicePtr* out) noexcept { return Status::not_supported; }
  /// Returns an address range from reserve_address. All pages must be unmapped.
  virtual Status release_address(DevicePtr base, std::uint64_t bytes) noexcept { return Status::not_supported; }
  /// Creates physical memory for [at, at+bytes) and maps it read-write for this device; `at` and
  /// `bytes` are multiples of page_bytes(). out_of_memory leaves nothing mapped.
  virtual Status map(DevicePtr at, std::uint64_t bytes) noexcept { return Status::not_supported; }
  /// Unmaps and releases the physical memory of [at, at+bytes). Does not synchronise: the
  /// caller synchronises first (Note [sync before unmap] in caching_allocator.cpp).
  virtual Status unmap(DevicePtr at, std::uint64_t bytes) noexcept { return Status::not_supported; }

  // --- Streams and events, for frees that other streams still use (record_stream) ---
  /// Records an event on `stream` now. 0 if events are not supported (then uses are ignored).
  virtual EventHandle record_event(StreamId stream) noexcept { return 0; }
  /// Non-blocking: has the event completed? (cudaEventQuery)
  virtual bool event_done(EventHandle ev) noexcept { return true; }
  /// Blocks until the event completed (cudaEventSynchronize).
  virtual void wait_event(EventHandle ev) noexcept {}
  /// Returns the event to the backend.
  virtual void destroy_event(EventHandle ev) noexcept {}
  /// Blocks until all work on the device has finished (cudaDeviceSynchronize).
  virtual void synchronize() noexcept {}
};

}  // namespace vramtrace
