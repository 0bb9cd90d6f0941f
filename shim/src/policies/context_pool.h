// One caching allocator per CUDA context, and the registry that finds it.
//
// Pools are per context (driver programs may create several per device) and therefore per
// device for runtime programs, which use one primary context per device. A pool dies with its
// context: Note [context reset drops the cache].
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <vector>

#include "base/cuda_api.h"
#include "policies/memory_cap.h"
#include "vramtrace/caching_allocator.h"
#include "vramtrace/cuda_driver_device.h"

namespace vramtrace::shim {

class ContextPool {
 public:
  ContextPool(CUcontext ctx, int device, bool primary, const CudaDriverApi& api, const AllocatorSettings& settings,
              EventSink* sink);

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

  // Note [single stream needs no sync] (reuse:lazy_sync). While every stream the process has
  // used is the legacy default stream, all device work is ordered on that one stream: the kernel
  // that last used a freed block was submitted before the free (program order, then our lock),
  // and whatever uses the block next is submitted after the allocation, on the same stream. The
  // reuse is then stream-ordered and needs no synchronisation, exactly as PyTorch's own cache
  // reuses a block on its stream at once. The first work on another stream -- a created stream or
  // a per-thread default stream, in any launch, copy, set or stream memory operation (Note [work
  // on another stream], stream_work.h), or an allocation on a per-thread default stream -- ends
  // that for the whole process: every block freed so far becomes unsynchronised in every pool
  // (mark_all_unsynced), so the next reuse synchronises once, and from then on frees are
  // remembered as below. A stream that is created but given no work changes nothing.

  /// Remembers [addr, addr + bytes) as freed in the current epoch.
  void note_freed(DevicePtr addr, std::uint64_t bytes) noexcept;
  /// Whether [addr, addr + bytes) overlaps a range freed since the last synchronisation. With
  /// `recorded_only`, the blocks that mark_all_unsynced made count only where their frees were
  /// recorded: what a stream-ordered allocation asks, since a block given back in stream order
  /// needs no synchronisation and one given back by a plain free before the switch was used
  /// only in the legacy stream's order, which the switch's event covers (Note [work on another
  /// stream]). Thread-safe.
  bool overlaps_unsynced(DevicePtr addr, std::uint64_t bytes, bool recorded_only = false) noexcept;
  /// Begins a device synchronisation; returns its epoch for end_sync.
  std::uint64_t begin_sync() noexcept;
  /// After a successful synchronisation begun at `epoch`: forgets every range freed before it.
  void end_sync(std::uint64_t epoch) noexcept;
  /// One lazy synchronisation (cuCtxSynchronize on this context, which must be current), or under
  /// reuse:lazy_barrier the GPU-side barrier that makes it unnecessary (Note [GPU-side barrier],
  /// stream_work.cpp).
  void sync_for_reuse() noexcept;
  /// Everything freed so far counts as unsynchronised: the next reuse of any block synchronises
  /// first (Note [single stream needs no sync]). Thread-safe.
  void mark_all_unsynced() noexcept;

  // IPC: a block whose handle was exported is never reused (the importer may still map it):
  // its free is quarantined (docs/interposition.md, "IPC handles").
  void mark_exported(DevicePtr addr) noexcept;
  bool take_exported(DevicePtr addr) noexcept;

  // Note [a block answers as an allocation]: the driver's pointer queries describe the driver
  // allocation holding a pointer, which for a block of ours is the whole cached segment, shared
  // with other live blocks. Libraries size buffers and register memory from these answers
  // (numba clears cuMemGetAddressRange's size from the block's start; registration caches key on
  // CU_POINTER_ATTRIBUTE_BUFFER_ID), so every answer about a live block is that block's: its
  // start, its requested size, and a buffer id of its own that changes when the block is freed
  // and handed out again, as a new driver allocation's would. An id is made when first asked for
  // and forgotten at the block's free, so allocation paths pay one relaxed load.

  /// The buffer id reported for the live block starting at `block`: the same on every call until
  /// the block is freed, then never again. Ids have bit 63 set, so they never equal the driver's
  /// own (a counter from 1). Thread-safe.
  std::uint64_t buffer_id(DevicePtr block) noexcept;
  /// Forgets the buffer id of `block` (at its free). Thread-safe, lock-free when no id was made.
  void forget_buffer_id(DevicePtr block) noexcept;

  /// Set when the pool's context was reset or destroyed (then it is out of the registry).
  std::atomic<bool> dropped{false};

 private:
  std::mutex mu_;
  std::uint64_t epoch_ = 0;
  std::map<DevicePtr, std::pair<DevicePtr, std::uint64_t>> unsynced_;  // start -> (end, epoch)
  bool all_unsynced_ = false;                                          // mark_all_unsynced since the last sync
  std::uint64_t all_unsynced_epoch_ = 0;                               // the epoch it was marked in
  bool lost_ = false;             // a free could not be recorded (no host memory) since the last sync
  std::uint64_t lost_epoch_ = 0;  // the epoch it was lost in
  std::set<DevicePtr> exported_;
  std::atomic<bool> any_exported_{false};          // lets take_exported skip the lock when nothing was
  std::map<DevicePtr, std::uint64_t> buffer_ids_;  // block start -> id, made by buffer_id
  std::atomic<bool> any_buffer_ids_{false};
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
  /// Which pool `addr` belongs to, `addr` being a block's start.
  Owner owner_of(DevicePtr addr) noexcept;
  /// Which pool holds `addr`, a block's start or any byte inside it (the pointer queries accept
  /// interior pointers; a scan of the pool's live blocks when it is not a start).
  Owner owner_containing(DevicePtr addr) noexcept;
  /// Idle cached bytes of the pools on `device` (what cuMemGetInfo adds to free).
  std::uint64_t cached_free_bytes(int device) noexcept;
  /// Drops (abandons, without any driver call) the pools of a context, or of the primary context
  /// of a device. Returns how many were dropped.
  int drop_context(CUcontext ctx) noexcept;
  int drop_primary(int device) noexcept;
  /// Every live pool, for stats.
  std::vector<ContextPool*> all() noexcept;
  /// How many pools are live (not dropped), and in `has` whether `ctx` owns one of them.
  /// Lock-free.
  int live(CUcontext ctx = nullptr, bool* has = nullptr) noexcept;
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

/// Under a cap on `device`, measures the driver's share of it again (Note [the cap counts the
/// driver's share] in memory_cap.h) from the real cuMemGetInfo_v2 of the current context, which
/// must be of `device`. For memory forwarded past the caches; pools measure through their
/// backend. Nothing without a cap. Thread-safe, lock-free.
void measure_driver_share(int device) noexcept;

// Note [reuse policy] (`reuse` in VRAMTRACE_CONF, ReusePolicy in vramtrace/settings.h): when a
// block the program freed with cudaFree/cuMemFree may serve the next request. cudaFree
// synchronises implicitly and programs rely on it, while a cache hit does not; each policy is
// one answer to that gap:
//  - lazy_sync (default): reuse at once while the process has used only the legacy default
//    stream (Note [single stream needs no sync]); from its first other stream on, one context
//    synchronisation before a block that overlaps a range freed since the last synchronisation
//    is handed out (Note [lazy sync before reuse]);
//  - device_sync: that synchronisation from the start, for programs whose streams the shim
//    cannot see;
//  - lazy_barrier: lazy_sync with a GPU-side barrier in place of the synchronisation where the
//    shim knows every stream with work (Note [GPU-side barrier], stream_work.cpp);
//  - stream_ordered: reuse at once on the same stream, as PyTorch's own cache does; safe only
//    when the program orders its work on one stream;
//  - none: no caching; every allocation and free is forwarded (and traced).
// Stream-ordered allocations (cuMemAllocAsync) follow Note [stream-ordered reuse] under every
// policy but none. reuse_needs_sync() below is where the first two differ at run time.

/// Whether frees must be remembered and reuses checked for a synchronisation: reuse:device_sync,
/// or reuse:lazy_sync once the process has used a stream other than the legacy default stream
/// (Note [single stream needs no sync]). Cheap: one relaxed load on the allocation path.
bool reuse_needs_sync() noexcept;

}  // namespace vramtrace::shim
