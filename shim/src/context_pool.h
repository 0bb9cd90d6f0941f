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
#include <vector>

#include "cuda_api.h"
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

 private:
  std::mutex mu_;
  std::uint64_t epoch_ = 0;
  std::map<DevicePtr, std::pair<DevicePtr, std::uint64_t>> unsynced_;  // start -> (end, epoch)
  std::set<DevicePtr> exported_;
};

/// Result of looking a pointer up in every pool.
struct Owner {
  std::shared_ptr<ContextPool> pool;  ///< null: not ours
  bool live = false;                  ///< a live block (else: inside our cache, not live)
  BlockInfo block;
};

/// All live pools. Thread-safe; never holds its lock across a driver call that can block.
class PoolRegistry {
 public:
  /// The pool of the calling thread's current context, created on first use. Null when no
  /// context is current, the driver is missing, or creation failed.
  std::shared_ptr<ContextPool> current() noexcept;
  /// The pool of `ctx` if it exists.
  std::shared_ptr<ContextPool> find(CUcontext ctx) noexcept;
  /// Which pool `addr` belongs to.
  Owner owner_of(DevicePtr addr) noexcept;
  /// Idle cached bytes of the pools on `device` (what cuMemGetInfo adds to free).
  std::uint64_t cached_free_bytes(int device) noexcept;
  /// Drops (abandons, without any driver call) the pools matching: a context, or the primary
  /// context of a device. Returns how many were dropped.
  int drop_context(CUcontext ctx) noexcept;
  int drop_primary(int device) noexcept;
  /// Every pool, for stats.
  std::vector<std::shared_ptr<ContextPool>> all() noexcept;
  /// Process exit or fork child: abandon every backend; in the child also forget the pools
  /// without destroying them (their locks may have been held by a thread that no longer exists).
  void abandon_all(bool forget) noexcept;

 private:
  std::shared_ptr<ContextPool> create(CUcontext ctx) noexcept;
  std::mutex mu_;
  std::vector<std::shared_ptr<ContextPool>> pools_;
};

PoolRegistry& pools() noexcept;

}  // namespace vramtrace::shim
