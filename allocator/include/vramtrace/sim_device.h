// A simulated GPU: capacity, fake addresses, page granularity, fault injection. No CUDA needed.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <set>
#include <utility>
#include <vector>

#include "vramtrace/device_backend.h"

namespace vramtrace {

/// A device with `capacity_bytes` of memory and fake, never-reused-while-live addresses.
/// Device allocations (`allocate`, `map`) are rounded up to `page_bytes` when charged against
/// capacity, as the driver does at 2 MiB. Thread-safe.
class SimulatedDevice final : public DeviceBackend {
 public:
  struct Options {
    std::uint64_t capacity_bytes = 80 * kGiB;
    /// Memory held outside the allocator (CUDA context, other libraries), counted as used.
    std::uint64_t outside_bytes = 0;
    std::uint64_t page_bytes = 2 * kMiB;
    /// First fake address; allocations are placed at increasing page-aligned addresses. The
    /// default (2^52) stays clear of the addresses real CUDA hands out (below 2^48) so that a
    /// replay's planned addresses never collide with fake ones, and below 2^53 so that
    /// JavaScript reads them exactly.
    DevicePtr base_address = 0x10000000000000ull;
    /// Fault injection: fail the Nth device allocation (allocate or map), 1-based; 0 = never.
    std::uint64_t fail_nth_allocation = 0;
    /// Fault injection: fail every device allocation after the Nth; 0 = never.
    std::uint64_t fail_after_allocations = 0;
    /// When false, recorded events stay pending until wait_event/synchronize/complete_events.
    bool events_complete_immediately = true;
    /// Addresses to hand out, in order: while the k-th `allocate` asks for exactly
    /// address_plan[k].first bytes and that range is free, it gets address_plan[k].second. The
    /// first mismatch abandons the plan. Replay uses this to place segments where the recorded
    /// program got them, because best fit breaks ties between equal sizes by address.
    std::vector<std::pair<std::uint64_t, DevicePtr>> address_plan;
  };

  SimulatedDevice();
  explicit SimulatedDevice(const Options& options);

  Status allocate(std::uint64_t bytes, DevicePtr* out) noexcept override;
  Status deallocate(DevicePtr ptr, std::uint64_t bytes) noexcept override;
  MemInfo mem_info() noexcept override;

  bool supports_virtual_memory() const noexcept override { return true; }
  std::uint64_t page_bytes() const noexcept override { return options_.page_bytes; }
  Status reserve_address(std::uint64_t bytes, DevicePtr* out) noexcept override;
  Status release_address(DevicePtr base, std::uint64_t bytes) noexcept override;
  Status map(DevicePtr at, std::uint64_t bytes) noexcept override;
  Status unmap(DevicePtr at, std::uint64_t bytes) noexcept override;

  EventHandle record_event(StreamId stream) noexcept override;
  bool event_done(EventHandle ev) noexcept override;
  void wait_event(EventHandle ev) noexcept override;
  void destroy_event(EventHandle ev) noexcept override;
  void synchronize() noexcept override;

  /// Appends to the address plan (see Options::address_plan); ignored once the plan was
  /// abandoned. Lets a streaming replay plan each segment when it reads the trace's segment_alloc.
  void plan_address(std::uint64_t bytes, DevicePtr addr);

  /// Completes every pending event (as if the GPU caught up).
  void complete_events() noexcept;
  /// Bytes in use on the device (allocations + mapped pages + outside bytes).
  std::uint64_t used_bytes() const noexcept;
  /// Number of successful allocate + map calls so far.
  std::uint64_t device_allocations() const noexcept;
  /// Changes the memory held outside the allocator.
  void set_outside_bytes(std::uint64_t bytes) noexcept;

 private:
  Options options_;
  mutable std::mutex mu_;
  std::uint64_t used_bytes_ = 0;
  std::uint64_t attempts_ = 0;
  std::uint64_t successes_ = 0;
  DevicePtr next_address_ = 0;
  std::map<DevicePtr, std::uint64_t> allocations_;  // address -> charged bytes
  std::map<DevicePtr, std::uint64_t> reservations_;
  std::map<DevicePtr, std::uint64_t> mapped_;  // page address -> bytes
  std::set<EventHandle> pending_events_;
  EventHandle next_event_ = 1;

  std::deque<std::pair<std::uint64_t, DevicePtr>> plan_;
  bool plan_abandoned_ = false;

  bool inject_failure_locked() noexcept;
  bool range_free_locked(DevicePtr addr, std::uint64_t bytes) const noexcept;
};

}  // namespace vramtrace
