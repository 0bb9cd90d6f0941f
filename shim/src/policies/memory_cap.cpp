#include "policies/memory_cap.h"

#include <algorithm>

#include "base/config.h"

namespace vramtrace::shim {
namespace {

std::atomic<std::uint64_t> g_held[kCapDevices];
std::atomic<std::uint64_t> g_share[kCapDevices];  // part of g_held (Note [the cap counts the driver's share])
std::atomic<bool> g_share_stale[kCapDevices];
std::atomic<bool> g_share_busy[kCapDevices];

bool counted(int device) noexcept { return device >= 0 && device < kCapDevices; }

}  // namespace

std::uint64_t cap_of(int device) noexcept {
  const Config& c = config();
  if (!c.enabled || device < 0) return 0;
  return c.limits.for_device(device);
}

std::uint64_t held_bytes(int device) noexcept {
  return counted(device) ? g_held[device].load(std::memory_order_acquire) : 0;
}

bool hold(int device, std::uint64_t bytes, bool force) noexcept {
  if (!counted(device)) return true;
  const std::uint64_t cap = force ? 0 : cap_of(device);
  std::uint64_t cur = g_held[device].load(std::memory_order_relaxed);
  for (;;) {
    if (cap != 0 && (bytes > cap || cur > cap - bytes)) return false;
    if (g_held[device].compare_exchange_weak(cur, cur + bytes, std::memory_order_acq_rel)) return true;
  }
}

void unhold(int device, std::uint64_t bytes) noexcept {
  if (!counted(device)) return;
  std::uint64_t cur = g_held[device].load(std::memory_order_relaxed);
  while (!g_held[device].compare_exchange_weak(cur, cur > bytes ? cur - bytes : 0, std::memory_order_acq_rel)) {
  }
}

bool cap_admits(int device, std::uint64_t bytes) noexcept {
  const std::uint64_t cap = cap_of(device);
  if (cap == 0) return true;
  const std::uint64_t cur = held_bytes(device);
  return bytes <= cap && cur <= cap - bytes;
}

void capped_figures(int device, std::uint64_t idle, std::uint64_t& free_bytes, std::uint64_t& total_bytes) noexcept {
  const std::uint64_t t = total_bytes;
  std::uint64_t f = std::min<std::uint64_t>(t, free_bytes + idle);
  const std::uint64_t cap = cap_of(device);
  if (cap != 0) {
    const std::uint64_t total = std::min(cap, t);
    const std::uint64_t held = held_bytes(device);
    const std::uint64_t in_use = std::min(total, held > idle ? held - idle : 0);
    f = std::min(f, total - in_use);
    total_bytes = total;
  }
  free_bytes = f;
}

void count_driver_share(int device, std::uint64_t free_bytes, std::uint64_t total_bytes) noexcept {
  if (!counted(device) || free_bytes > total_bytes || cap_of(device) == 0) return;
  if (g_share_busy[device].exchange(true, std::memory_order_acquire)) return;
  const bool exact = g_share_stale[device].exchange(false, std::memory_order_acq_rel);
  const std::uint64_t used = total_bytes - free_bytes;
  const std::uint64_t share = g_share[device].load(std::memory_order_relaxed);
  const std::uint64_t held = g_held[device].load(std::memory_order_acquire);
  const std::uint64_t mine = held > share ? held - share : 0;
  const std::uint64_t now = used > mine ? used - mine : 0;
  if (now > share) {
    hold(device, now - share, /*force=*/true);
    g_share[device].store(now, std::memory_order_relaxed);
  } else if (exact && now < share) {
    unhold(device, share - now);
    g_share[device].store(now, std::memory_order_relaxed);
  }
  g_share_busy[device].store(false, std::memory_order_release);
}

void driver_share_stale(int device) noexcept {
  if (counted(device)) g_share_stale[device].store(true, std::memory_order_release);
}

std::uint64_t driver_share_bytes(int device) noexcept {
  return counted(device) ? g_share[device].load(std::memory_order_relaxed) : 0;
}

void memory_cap_after_fork_child() noexcept {
  for (auto& h : g_held) h.store(0, std::memory_order_relaxed);
  for (auto& h : g_share) h.store(0, std::memory_order_relaxed);
  for (auto& h : g_share_stale) h.store(false, std::memory_order_relaxed);
  for (auto& h : g_share_busy) h.store(false, std::memory_order_relaxed);
}

// ---------------------------------------------------------------------------------------------

template <class Call>
Status CappedDevice::taking(std::uint64_t bytes, Call call) noexcept {
  if (cap_of(device_) != 0) {
    const MemInfo m = inner_.mem_info();  // the driver's own figures
    if (m.total_bytes != 0) count_driver_share(device_, m.free_bytes, m.total_bytes);
  }
  if (!hold(device_, bytes)) return Status::out_of_memory;  // over the cap: the device is not asked
  Status s = call();
  if (s != Status::ok) {
    unhold(device_, bytes);
    return s;
  }
  held_.fetch_add(bytes, std::memory_order_relaxed);
  return s;
}

template <class Call>
Status CappedDevice::giving(std::uint64_t bytes, Call call) noexcept {
  Status s = call();
  if (s == Status::ok && !abandoned_.load(std::memory_order_acquire)) {
    held_.fetch_sub(std::min(bytes, held_.load(std::memory_order_relaxed)), std::memory_order_relaxed);
    unhold(device_, bytes);
  }
  return s;
}

Status CappedDevice::allocate(std::uint64_t bytes, DevicePtr* out) noexcept {
  return taking(bytes, [&] { return inner_.allocate(bytes, out); });
}
Status CappedDevice::deallocate(DevicePtr ptr, std::uint64_t bytes) noexcept {
  return giving(bytes, [&] { return inner_.deallocate(ptr, bytes); });
}
Status CappedDevice::map(DevicePtr at, std::uint64_t bytes) noexcept {
  return taking(bytes, [&] { return inner_.map(at, bytes); });
}
Status CappedDevice::unmap(DevicePtr at, std::uint64_t bytes) noexcept {
  return giving(bytes, [&] { return inner_.unmap(at, bytes); });
}

MemInfo CappedDevice::mem_info() noexcept {
  MemInfo m = inner_.mem_info();
  if (cap_of(device_) != 0) capped_figures(device_, 0, m.free_bytes, m.total_bytes);
  return m;
}

void CappedDevice::abandon() noexcept {
  if (abandoned_.exchange(true, std::memory_order_acq_rel)) return;
  unhold(device_, held_.exchange(0, std::memory_order_acq_rel));
}

}  // namespace vramtrace::shim
