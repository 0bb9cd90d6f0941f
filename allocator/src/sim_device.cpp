// A simulated device for replay and tests: capacity accounting, fake addresses, virtual memory
// at page granularity, stream events that can be held pending, fault injection.
#include "vramtrace/sim_device.h"

#include <algorithm>

namespace vramtrace {
namespace {
std::uint64_t round_up(std::uint64_t v, std::uint64_t to) { return (v + to - 1) / to * to; }
}  // namespace

SimulatedDevice::SimulatedDevice() : SimulatedDevice(Options{}) {}

SimulatedDevice::SimulatedDevice(const Options& options) : options_(options) {
  if (options_.page_bytes == 0) options_.page_bytes = 2 * kMiB;
  next_address_ =
      round_up(options_.base_address == 0 ? options_.page_bytes : options_.base_address, options_.page_bytes);
  plan_.assign(options_.address_plan.begin(), options_.address_plan.end());
  used_bytes_ = options_.outside_bytes;
}

bool SimulatedDevice::inject_failure_locked() noexcept {
  ++attempts_;
  if (options_.fail_nth_allocation != 0 && attempts_ == options_.fail_nth_allocation) return true;
  if (options_.fail_after_allocations != 0 && attempts_ > options_.fail_after_allocations) return true;
  return false;
}

Status SimulatedDevice::allocate(std::uint64_t bytes, DevicePtr* out) noexcept {
  if (bytes == 0 || out == nullptr) return Status::invalid_value;
  std::lock_guard<std::mutex> lock(mu_);
  if (inject_failure_locked()) return Status::out_of_memory;
  const std::uint64_t charged = round_up(bytes, options_.page_bytes);
  if (charged < bytes || used_bytes_ + charged > options_.capacity_bytes || used_bytes_ + charged < used_bytes_)
    return Status::out_of_memory;
  DevicePtr addr = 0;
  if (!plan_abandoned_ && !plan_.empty()) {
    const auto [plan_bytes, plan_addr] = plan_.front();
    if (plan_bytes == bytes && plan_addr != 0 && range_free_locked(plan_addr, charged)) {
      addr = plan_addr;
      plan_.pop_front();
    } else {
      plan_abandoned_ = true;  // diverged from the recorded run
      plan_.clear();
    }
  }
  if (addr == 0) {
    addr = next_address_;
    next_address_ += charged;
  }
  allocations_.emplace(addr, charged);
  used_bytes_ += charged;
  ++successes_;
  *out = addr;
  return Status::ok;
}

bool SimulatedDevice::range_free_locked(DevicePtr addr, std::uint64_t bytes) const noexcept {
  auto next = allocations_.lower_bound(addr);
  if (next != allocations_.end() && next->first < addr + bytes) return false;
  if (next != allocations_.begin() && std::prev(next)->first + std::prev(next)->second > addr) return false;
  return true;
}

Status SimulatedDevice::deallocate(DevicePtr ptr, std::uint64_t) noexcept {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = allocations_.find(ptr);
  if (it == allocations_.end()) return Status::invalid_value;
  used_bytes_ -= it->second;
  allocations_.erase(it);
  // cudaFree synchronises the device: every recorded event completes.
  pending_events_.clear();
  return Status::ok;
}

MemInfo SimulatedDevice::mem_info() noexcept {
  std::lock_guard<std::mutex> lock(mu_);
  const std::uint64_t used = std::min(used_bytes_, options_.capacity_bytes);
  return MemInfo{options_.capacity_bytes - used, options_.capacity_bytes};
}

Status SimulatedDevice::reserve_address(std::uint64_t bytes, DevicePtr* out) noexcept {
  if (bytes == 0 || out == nullptr) return Status::invalid_value;
  std::lock_guard<std::mutex> lock(mu_);
  const std::uint64_t size = round_up(bytes, options_.page_bytes);
  const DevicePtr addr = next_address_;
  next_address_ += size;
  reservations_.emplace(addr, size);
  *out = addr;
  return Status::ok;
}

Status SimulatedDevice::release_address(DevicePtr base, std::uint64_t) noexcept {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = reservations_.find(base);
  if (it == reservations_.end()) return Status::invalid_value;
  auto page = mapped_.lower_bound(base);
  if (page != mapped_.end() && page->first < base + it->second) return Status::invalid_value;  // still mapped
  reservations_.erase(it);
  return Status::ok;
}

Status SimulatedDevice::map(DevicePtr at, std::uint64_t bytes) noexcept {
  if (bytes == 0 || at % options_.page_bytes != 0 || bytes % options_.page_bytes != 0) return Status::invalid_value;
  std::lock_guard<std::mutex> lock(mu_);
  auto res = reservations_.upper_bound(at);
  if (res == reservations_.begin()) return Status::invalid_value;
  --res;
  if (at + bytes > res->first + res->second) return Status::invalid_value;
  for (DevicePtr p = at; p < at + bytes; p += options_.page_bytes)
    if (mapped_.count(p)) return Status::invalid_value;
  if (inject_failure_locked()) return Status::out_of_memory;
  if (used_bytes_ + bytes > options_.capacity_bytes) return Status::out_of_memory;
  for (DevicePtr p = at; p < at + bytes; p += options_.page_bytes) mapped_.emplace(p, options_.page_bytes);
  used_bytes_ += bytes;
  ++successes_;
  return Status::ok;
}

Status SimulatedDevice::unmap(DevicePtr at, std::uint64_t bytes) noexcept {
  if (bytes == 0 || at % options_.page_bytes != 0 || bytes % options_.page_bytes != 0) return Status::invalid_value;
  std::lock_guard<std::mutex> lock(mu_);
  for (DevicePtr p = at; p < at + bytes; p += options_.page_bytes)
    if (!mapped_.count(p)) return Status::invalid_value;
  for (DevicePtr p = at; p < at + bytes; p += options_.page_bytes) mapped_.erase(p);
  used_bytes_ -= bytes;
  return Status::ok;
}

EventHandle SimulatedDevice::record_event(StreamId) noexcept {
  std::lock_guard<std::mutex> lock(mu_);
  EventHandle ev = next_event_++;
  if (!options_.events_complete_immediately) pending_events_.insert(ev);
  return ev;
}

bool SimulatedDevice::event_done(EventHandle ev) noexcept {
  std::lock_guard<std::mutex> lock(mu_);
  return pending_events_.count(ev) == 0;
}

void SimulatedDevice::wait_event(EventHandle ev) noexcept {
  std::lock_guard<std::mutex> lock(mu_);
  pending_events_.erase(ev);
}

void SimulatedDevice::destroy_event(EventHandle ev) noexcept {
  std::lock_guard<std::mutex> lock(mu_);
  pending_events_.erase(ev);
}

void SimulatedDevice::synchronize() noexcept { complete_events(); }

void SimulatedDevice::plan_address(std::uint64_t bytes, DevicePtr addr) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!plan_abandoned_) plan_.emplace_back(bytes, addr);
}

void SimulatedDevice::complete_events() noexcept {
  std::lock_guard<std::mutex> lock(mu_);
  pending_events_.clear();
}

std::uint64_t SimulatedDevice::used_bytes() const noexcept {
  std::lock_guard<std::mutex> lock(mu_);
  return used_bytes_;
}

std::uint64_t SimulatedDevice::device_allocations() const noexcept {
  std::lock_guard<std::mutex> lock(mu_);
  return successes_;
}

void SimulatedDevice::set_outside_bytes(std::uint64_t bytes) noexcept {
  std::lock_guard<std::mutex> lock(mu_);
  used_bytes_ = used_bytes_ - options_.outside_bytes + bytes;
  options_.outside_bytes = bytes;
}

}  // namespace vramtrace
