// Memory that bypasses the caching allocator but is traced: which pointers we forwarded, so that
// their free is traced too and never mistaken for an unknown pointer.
#pragma once

#include <cstdint>

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
/// The two halves of the free of a forwarded allocation, around the driver's call.
///
/// Note [a free is recorded before it happens]: the driver may give a freed address (or handle)
/// to another thread's allocation as soon as the free returns, and that thread records its
/// allocation then. So the segment_free is recorded before the driver's free is called, and in the
/// trace every reuse of the address comes after its release (the caching allocator does the same:
/// release_block records before it frees). The cap keeps counting the memory until the driver has
/// freed it. A free the driver refuses leaves the memory the program's: it is recorded again at
/// once as a segment_alloc, and tracked as before.
///
/// passthrough_free_begin forgets `addr` and records segment_free; false (no event) when `addr`
/// is not a forwarded allocation we track. passthrough_free_end, called by the same thread after
/// the driver's call with whether it freed, finishes the begin for the same `addr` (no-op when
/// there was none). Thread-safe; the pair must not be nested on one thread.
bool passthrough_free_begin(std::uint64_t addr, std::uint16_t entry, std::uint64_t stream = 0) noexcept;
void passthrough_free_end(std::uint64_t addr, bool freed, std::uint16_t entry, std::uint64_t stream = 0) noexcept;
/// Records a device allocation forwarded past the caching allocator (reuse:none, a stream
/// capture) that failed for lack of memory (refused by the cap, or by the driver): an `oom` event
/// of `bytes`, with the device's free bytes as the program sees them (Note [capped figures]) and
/// no snapshot, so that the reports count it (Note [one OOM per failed request],
/// reporter/model/oom_count.h). `retries` is 0: no allocator released anything. Nothing at exit
/// (Note [no CUDA call at exit]) or while the shim does its own work.
void passthrough_oom(std::uint64_t bytes, std::uint16_t entry, std::uint64_t stream = 0) noexcept;
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
