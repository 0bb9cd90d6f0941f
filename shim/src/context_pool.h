// One caching allocator per CUDA context, and the registry that finds it.
//
// Pools are per context (driver programs may create several per device) and therefore per
// device for runtime programs, which use one primary context per device. A pool dies with its
// context: Note [context reset drops the cache].
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <atomic>
#include <vector>

#include "cuda_api.h"
#include "memory_cap.h"
#include "vramtrace/caching_allocator.h"
#include "vramtrace/cuda_driver_device.h"

namespace vramtrace::shim {

class ContextPool {
 public:
  ContextPool(CUcontext ctx, int device, bool primary, const CudaDriverApi& api,
              const AllocatorSettings& settings, EventSink* sink);

  const CUcontext ctx;
  const int device;
  const bool primary;  ///< the device's primary context (what the runtime uses)
  CudaDriverDevice backend;
  /// What the allocator allocates from: `backend`, counted against the device's cap (memory_cap.h).
  CappedDevice capped;
  CachingAllocator allocator;

  // Note [lazy sync before reuse] (reuse:lazy_sync, the default). cudaFree synchronises
  // implicitly, so a program may free a buffer that a kernel still reads and rely on the next
  // cudaMalloc of that memory being safe. We therefore remember the ranges freed by cuMemFree_v2
  // since the last device synchronisation. When the allocator hands out a block that overlaps
  // one of them, we synchronise the context once before returning it; that one synchronisation
  // makes every range freed before it safe, so they are all forgotten together (batched). A
  // synchronisation the program does itself (cuCtxSynchronize) counts too. Blocks that do not
  // overlap a recently freed range (fresh segments, blocks freed long ago) need no sync at all.
  // Stream-ordered frees (cuMemFreeAsync) never enter the set: the allocator only reuses them
  // on the same stream, or after an event (Note [stream-ordered reuse]).

  /// Remembers [addr, addr + bytes) as freed in the current epoch.
  void note_freed(DevicePtr addr, std::uint64_t bytes) noexcept;
  /// Whether [addr, addr + bytes) overlaps a range freed since the last synchronisation.
  bool overlaps_unsynced(DevicePtr addr, std::uint64_t bytes) noexcept;
  /// Begins a device synchronisation; returns its epoch for end_sync.
  std::uint64_t begin_sync() noexcept;
  /// After a successful synchronisation begun at `epoch`: forgets every range freed before it.
  void end_sync(std::uint64_t epoch) noexcept;
  /// One lazy synchronisation (cuCtxSynchronize on this context, which must be current).
  void sync_for_reuse() noexcept;

  // IPC: a block whose handle was exported is never reused (the importer may still map it):
  // its free is quarantined (research/interposition.md 5.5).
  void mark_exported(DevicePtr addr) noexcept;
  bool take_exported(DevicePtr addr) noexcept;

  /// Set when the pool's context was reset or destroyed (then it is out of the registry).
  std::atomic<bool> dropped{false};

 private:
  std::mutex mu_;
  std::uint64_t epoch_ = 0;
  std::map<DevicePtr, std::pair<DevicePtr, std::uint64_t>> unsynced_;  // start -> (end, epoch)
  std::set<DevicePtr> exported_;
  std::atomic<bool> any_exported_{false};  // lets take_exported skip the lock when nothing was
};

/// Result of looking a pointer up in every pool.
struct Owner {
  ContextPool* pool = nullptr;  ///< null: not ours
  bool live = false;            ///< a live block (else: inside our cache, not live)
  BlockInfo block;
};

/// All live pools. Lookups are lock-free: pools sit in a fixed array of atomic slots and a pool
/// object is never destroyed (a dropped pool is abandoned and leaks its host-side bookkeeping,
/// a few KiB per context reset), so a pointer read from a slot stays valid forever. Creation and
/// dropping take a mutex. Never holds a lock across a driver call that can block.
class PoolRegistry {
 public:
  static constexpr int kMaxPools = 64;
  /// The pool of the calling thread's current context, created on first use. Null when no
  /// context is current, the driver is missing, all slots are taken, or creation failed.
  ContextPool* current() noexcept;
  /// The live pool of `ctx`, or null.
  ContextPool* find(CUcontext ctx) noexcept;
  /// Which pool `addr` belongs to.
  Owner owner_of(DevicePtr addr) noexcept;
  /// Idle cached bytes of the pools on `device` (what cuMemGetInfo adds to free).
  std::uint64_t cached_free_bytes(int device) noexcept;
  /// Drops (abandons, without any driver call) the pools of a context, or of the primary context
  /// of a device. Returns how many were dropped.
  int drop_context(CUcontext ctx) noexcept;
  int drop_primary(int device) noexcept;
  /// Every live pool, for stats.
  std::vector<ContextPool*> all() noexcept;
  /// Process exit or fork child: abandon every backend; in the child also forget the pools.
  void abandon_all(bool forget) noexcept;

 private:
  ContextPool* create(CUcontext ctx) noexcept;
  template <class Pred>
  int drop_if(Pred pred) noexcept;
  std::mutex mu_;  // creation and dropping only
  std::atomic<ContextPool*> slots_[kMaxPools] = {};
};

PoolRegistry& pools() noexcept;

}  // namespace vramtrace::shim
