// The caching allocator of one device: PyTorch's native policy (block pools, best fit per
// stream, splitting and merging, max_split_size, roundup_power2_divisions, garbage collection,
// release-and-retry before an OOM, expandable segments) over a DeviceBackend.
//
// Every rule follows c10/cuda/CUDACachingAllocator.cpp; docs/pytorch-allocator.md states them,
// and the named notes in caching_allocator.cpp mark where we differ.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>

#include "vramtrace/device_backend.h"
#include "vramtrace/event.h"
#include "vramtrace/settings.h"
#include "vramtrace/size_rules.h"
#include "vramtrace/snapshot.h"
#include "vramtrace/stats.h"

namespace vramtrace {

/// Facts about a live block, for the shim's pointer lookups and for reports.
struct BlockInfo {
  DevicePtr address = 0;
  std::uint64_t size = 0;            ///< rounded block bytes
  std::uint64_t requested_size = 0;  ///< bytes asked for
  StreamId stream{};
  PoolKind pool = PoolKind::large;
};

/// What the last failed allocation saw, for OOM reports (filled before Status::out_of_memory).
struct OomInfo {
  std::uint64_t requested_bytes = 0;  ///< what the program asked for
  std::uint64_t alloc_bytes = 0;      ///< the segment (or mapping) size asked of the device
  std::uint64_t device_free_bytes = 0;
  std::uint64_t device_total_bytes = 0;
  std::uint64_t allocated_bytes = 0;
  std::uint64_t reserved_bytes = 0;
  std::uint64_t allowed_bytes = 0;  ///< fraction or limit in force; total when none
};

class CachingAllocator {
 public:
  /// `backend` must outlive the allocator. `sink` (optional) receives every event and must
  /// outlive it too. `device` is stamped on events and snapshots.
  CachingAllocator(DeviceBackend& backend, const AllocatorSettings& settings, DeviceId device = {},
                   EventSink* sink = nullptr);
  ~CachingAllocator();
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  /// Allocates `bytes` for use on `stream`. bytes == 0 returns ok with *out = 0 (as PyTorch).
  /// On Status::out_of_memory the cache was released and retried once first (a counted retry),
  /// num_ooms was incremented, an `oom` event was emitted, and `*out` is unchanged.
  /// Thread-safe. `entry_point` is copied into the alloc event.
  Status allocate(std::uint64_t bytes, StreamId stream, DevicePtr* out, std::uint16_t entry_point = 0) noexcept;

  /// Frees a block returned by allocate. If other streams used it (record_stream), the block
  /// stays active until their events complete. Returns invalid_value for an address that is
  /// not a live block of this allocator (nothing changes). Thread-safe.
  Status deallocate(DevicePtr ptr, std::uint16_t entry_point = 0) noexcept;

  /// Replay of a trace's free_requested whose free_completed comes later: stats drop now, the
  /// block stays active_pending_free until complete_deferred_free(ptr). Thread-safe.
  Status deallocate_deferred(DevicePtr ptr) noexcept;
  /// Second half of deallocate_deferred. invalid_value if ptr is not pending. Thread-safe.
  Status complete_deferred_free(DevicePtr ptr) noexcept;

  /// Marks `ptr` as used on `stream` (Tensor.record_stream); a later free waits for an event
  /// recorded on that stream. Uses on the allocation stream are ignored. Thread-safe.
  Status record_stream(DevicePtr ptr, StreamId stream) noexcept;

  /// Releases every fully free cached segment (and unmaps free pages of expandable segments),
  /// after waiting for pending events: torch.cuda.empty_cache(). Thread-safe.
  void empty_cache() noexcept;

  /// Looks up a live (allocated or pending) block by its exact start address. Thread-safe.
  std::optional<BlockInfo> find(DevicePtr ptr) const noexcept;

  /// The allocated block holding `addr` (its start or any of the bytes the program asked for;
  /// not a freed block waiting for events, not the rounding after the request), for the driver's
  /// pointer queries, which accept interior pointers. A start address costs one hash lookup; an interior
  /// address a scan of the live blocks (O(live blocks), a few ns each), so this is for rare
  /// queries, never for the allocation path. Thread-safe.
  std::optional<BlockInfo> find_containing(DevicePtr addr) const noexcept;

  /// Bytes cached but not allocated (reserved - allocated - pending); what cudaMemGetInfo
  /// should add to the device's free bytes. Thread-safe.
  std::uint64_t cached_free_bytes() const noexcept;

  /// Copy of the statistics. Thread-safe.
  DeviceStats stats() const noexcept;
  /// torch.cuda.reset_peak_memory_stats. Thread-safe.
  void reset_peak_stats() noexcept;
  /// Segments and blocks now, sorted by address. Thread-safe.
  Snapshot snapshot() const;
  /// Figures of the last OOM (zeros if none). Thread-safe.
  OomInfo last_oom() const noexcept;

  const AllocatorSettings& settings() const noexcept;
  DeviceId device() const noexcept;

  /// Debug check of every invariant (no overlap, blocks tile segments, free lists consistent,
  /// statistics equal a recount). Returns false and describes the first violation in `error`.
  /// O(blocks). Thread-safe.
  bool check_invariants(std::string& error) const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace vramtrace
