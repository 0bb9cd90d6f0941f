// Memory that bypasses the caching allocator but is traced: which pointers we forwarded, so that
// their free is traced too and never mistaken for an unknown pointer.
#pragma once

#include <cstdint>
#include <optional>

#include "base/sink.h"

namespace vramtrace::shim {

struct PassThrough {
  std::uint64_t size_bytes = 0;
  MemoryKind kind = MemoryKind::device;
  int device = 0;
};

/// Records a forwarded allocation (address or handle) and emits segment_alloc (aux = kind).
void passthrough_alloc(std::uint64_t addr, std::uint64_t size_bytes, MemoryKind kind, std::uint16_t entry,
                       std::uint64_t stream = 0) noexcept;
/// Forgets a forwarded allocation and emits segment_free; nullopt (no event) if unknown.
std::optional<PassThrough> passthrough_free(std::uint64_t addr, std::uint16_t entry, std::uint64_t stream = 0) noexcept;
/// Records a device allocation forwarded past the caching allocator (reuse:none, a stream
/// capture) that failed for lack of memory (refused by the cap, or by the driver): an `oom` event
/// of `bytes`, with the device's free bytes as the program sees them (Note [capped figures]) and
/// no snapshot, so that the reports count it (Note [one OOM per failed request],
/// reporter/model/oom_count.h). `retries` is 0: no allocator released anything. Nothing at exit
/// (Note [no CUDA call at exit]) or while the shim does its own work.
void passthrough_oom(std::uint64_t bytes, std::uint16_t entry, std::uint64_t stream = 0) noexcept;
/// Whether `addr` is a forwarded allocation we still track.
bool passthrough_contains(std::uint64_t addr) noexcept;
/// Drops every record (fork child). No events.
void passthrough_after_fork_child() noexcept;
/// Creates the registry now (library load), so that a fork child never meets its lazy
/// initialisation half done by a thread that did not survive the fork.
void passthrough_init() noexcept;

/// Device ordinal of the calling thread's current context (0 if none).
int current_device() noexcept;

/// Whether `bytes` of device memory forwarded to the driver on `device` fit under the memory cap
/// (memory_cap.h), the driver's share measured first. True without a cap, for 0 bytes, for the
/// shim's own calls, when disabled and during exit. A check, not a reservation: two threads
/// forwarding at once may both pass (Note [forwarded memory under the cap], tracers.cpp).
/// Thread-safe.
bool forwarded_fits(int device, std::uint64_t bytes) noexcept;

}  // namespace vramtrace::shim
