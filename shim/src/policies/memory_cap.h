// The memory cap (`limit` in VRAMTRACE_CONF, docs/configuration.md "Memory cap").
//
// Note [what the cap counts]: per CUDA device, the shim counts the device memory it can see and
// holds: the segments (and mapped pages of expandable segments) of every caching allocator of the
// device, plus the device memory it forwards and tracks (plain device memory forwarded under
// reuse:none or during a stream capture, pitched allocations, explicit-pool allocations,
// cuMemCreate handles). The CUDA context, module images and the driver's own bookkeeping are
// allocated inside the driver, never through an entry point, so no call shows them; they are
// counted from the driver's figures instead (Note [the cap counts the driver's share]). One atomic
// counter per device, so that two pools of one device (driver programs with several contexts)
// share the cap without taking each other's locks.
//
// Note [the cap counts the driver's share]: on a real card of C bytes the CUDA context, module
// images and the driver's bookkeeping come out of the C bytes (about 0.5 GiB of an H200's for a
// PyTorch process: docs/benchmarks.md), so a cap that counted only allocations would let a program
// use more than the card it stands for (PyTorch's OOM message read "this process has 15.15 GiB
// memory in use" under a 14.58 GiB cap). Under a cap the shim therefore also counts the device's
// used memory that it does not hold itself: share = (total - free) - (held - share), from the
// driver's own cuMemGetInfo, measured when it first meets a context of the device and again before
// each device allocation it makes (a segment, a mapped page range), so that modules loaded lazily
// and libraries' own allocations are counted as they appear. The share only grows between
// measurements that another thread's allocation in flight could skew (its bytes are held before
// the driver has them, which makes the share read low), and is measured exactly again after a
// context is destroyed. On a GPU shared with other processes their memory is part of the share,
// as it would be on a card of that size shared with them. Measurements never overlap (a busy
// flag: a second thread skips, the first one counts for both).
//
// Note [capped figures]: with a cap C on a device whose driver reports (free F, total T), and
// with H bytes held by the shim of which I are idle in our caches:
//   total' = min(C, T)
//   free'  = min(F + I, T, total' - min(total', H - I))
// so free' <= total' <= T. Idle cached bytes count as free with or without a cap (frameworks size
// their pools from this figure; memory we keep only for reuse is free to them). Without a cap
// only the first rule applies to cuMemGetInfo (free = min(T, F + I)) and the other queries are
// passed through untouched.
#pragma once

#include <atomic>
#include <cstdint>

#include "base/cuda_api.h"  // first: the exact ABI names (cuda_api.h)
#include "vramtrace/cuda_driver_device.h"
#include "vramtrace/device_backend.h"

namespace vramtrace::shim {

/// Devices the cap counter covers; ordinals beyond are uncapped and uncounted.
inline constexpr int kCapDevices = 64;

/// Cap of CUDA device `device` in bytes, 0 = none. Cheap (reads the parsed configuration).
std::uint64_t cap_of(int device) noexcept;

/// Device memory the shim holds on `device` (Note [what the cap counts]). Lock-free.
std::uint64_t held_bytes(int device) noexcept;

/// Counts `bytes` more on `device`. Unless `force`, refuses (returns false, counts nothing) when
/// that would exceed the device's cap. Atomic: two threads cannot both pass the cap. Lock-free.
bool hold(int device, std::uint64_t bytes, bool force = false) noexcept;

/// Counts `bytes` less on `device` (saturating at 0). Lock-free.
void unhold(int device, std::uint64_t bytes) noexcept;

/// Whether `bytes` more would still fit under the cap of `device` (always true without one).
/// A check only (nothing is counted): for forwarded allocations, counted after they succeed.
bool cap_admits(int device, std::uint64_t bytes) noexcept;

/// Applies Note [capped figures] to a driver's (free, total) for `device`. `idle` = idle cached
/// bytes of our pools on the device. Without a cap: free = min(total, free + idle), total as is.
void capped_figures(int device, std::uint64_t idle, std::uint64_t& free_bytes, std::uint64_t& total_bytes) noexcept;

/// Counts the device's used memory outside the shim's own holdings against the cap of `device`
/// (Note [the cap counts the driver's share]): `free_bytes` and `total_bytes` are the driver's
/// real cuMemGetInfo figures for the device, read just now. Nothing without a cap, for a device
/// beyond kCapDevices, or for figures that do not make sense (free > total). Lock-free; concurrent
/// calls for one device: one measures, the others return at once.
void count_driver_share(int device, std::uint64_t free_bytes, std::uint64_t total_bytes) noexcept;

/// The next count_driver_share of `device` sets the share exactly, lower too (a context of the
/// device is being destroyed and gives its memory back). Lock-free.
void driver_share_stale(int device) noexcept;

/// The share of `device` counted now, bytes (part of held_bytes). Lock-free.
std::uint64_t driver_share_bytes(int device) noexcept;

/// Forgets every count (fork child: the parent's memory is not the child's).
void memory_cap_after_fork_child() noexcept;

/// The backend a pool's caching allocator uses: the CUDA driver device, with device allocations
/// and mapped pages counted against the device's cap (hold/unhold) and mem_info() giving the
/// capped figures (without idle cached bytes: that is the driver's view the allocator's OOM figures
/// and PyTorch's message use). Without a cap it only counts. Thread safety: as CudaDriverDevice;
/// the counters are atomic.
class CappedDevice final : public DeviceBackend {
 public:
  CappedDevice(CudaDriverDevice& inner, int device) noexcept : inner_(inner), device_(device) {}

  Status allocate(std::uint64_t bytes, DevicePtr* out) noexcept override;
  Status deallocate(DevicePtr ptr, std::uint64_t bytes) noexcept override;
  MemInfo mem_info() noexcept override;
  bool supports_virtual_memory() const noexcept override { return inner_.supports_virtual_memory(); }
  std::uint64_t page_bytes() const noexcept override { return inner_.page_bytes(); }
  Status reserve_address(std::uint64_t bytes, DevicePtr* out) noexcept override {
    return inner_.reserve_address(bytes, out);
  }
  Status release_address(DevicePtr base, std::uint64_t bytes) noexcept override {
    return inner_.release_address(base, bytes);
  }
  Status map(DevicePtr at, std::uint64_t bytes) noexcept override;
  Status unmap(DevicePtr at, std::uint64_t bytes) noexcept override;
  EventHandle record_event(StreamId stream) noexcept override { return inner_.record_event(stream); }
  bool event_done(EventHandle ev) noexcept override { return inner_.event_done(ev); }
  void wait_event(EventHandle ev) noexcept override { inner_.wait_event(ev); }
  void destroy_event(EventHandle ev) noexcept override { inner_.destroy_event(ev); }
  void synchronize() noexcept override { inner_.synchronize(); }

  /// The pool's context died (or the process forked): its memory is gone, so its bytes leave the
  /// device's count at once, and later frees of its blocks count nothing. Idempotent.
  void abandon() noexcept;

 private:
  /// Counts `bytes` against the cap, then runs `call` (an allocation or a mapping); undone if it fails.
  template <class Call>
  Status taking(std::uint64_t bytes, Call call) noexcept;
  /// Runs `call` (a free or an unmapping); on success `bytes` leave the count (unless abandoned).
  template <class Call>
  Status giving(std::uint64_t bytes, Call call) noexcept;

  CudaDriverDevice& inner_;
  const int device_;
  std::atomic<std::uint64_t> held_{0};
  std::atomic<bool> abandoned_{false};
};

}  // namespace vramtrace::shim
