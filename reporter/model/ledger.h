// The memory ledger of a PyTorch process: per device, at the end of the run, at each OOM and at
// the peak, where the device's used memory went, from both levels of a `vramtrace run` together:
// PyTorch's own history (the tensor level: the snapshot pickle and its sidecar) and the shim's
// trace of the same process (the device level: every device allocation, PyTorch's segments among
// them). docs/reports.md, "The memory ledger", states the rows and the rules.
//
// Note [the ledger adds up]
// used = total - free, as the device reported it at that moment (mem_get_info at exit, the OOM's
// cudaMemGetInfo), is split into rows that add up to it exactly:
//   PyTorch's tensors (allocated) + PyTorch's cache (reserved - allocated)    = PyTorch reserved
//   + outside PyTorch's allocator (device memory of the shim's trace in no PyTorch segment)
//   + vramtrace's rounding (bytes the shim's blocks hold beyond PyTorch's segment sizes)
//   + the rest (the CUDA context, the driver, other processes) = used - the rows above.
// A row that cannot be known at a moment is unknown, never guessed, and the rows after it then
// are too: without a device level that covers the moment, outside and rest are unknown and only
// "not PyTorch's" (used - reserved) is given. Under the shim, cuMemGetInfo counts the shim's idle
// cached memory as free (Note [capped figures] in shim/src/policies/memory_cap.h), so the device
// level counts the blocks the program holds, not the shim's segments: both sides of the sum see
// the device the way the program saw it.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "model/trace_model.h"
#include "readers/sidecar.h"

namespace vramtrace {

/// Device memory outside PyTorch's allocator at one moment, by kind (bytes; docs/trace-format.md
/// "k"). Managed memory and CUDA arrays are not here: whether managed pages sit on the device is
/// not recorded, and arrays have no size in the trace (LedgerAt counts both aside).
struct OutsideBytes {
  /// cudaMalloc/cuMemAlloc/cudaMallocAsync memory (the shim's blocks, and kind 1, device memory
  /// it forwarded) at no PyTorch segment's address.
  std::uint64_t device = 0;
  std::uint64_t pitched = 0;  ///< kind 3, cuMemAllocPitch
  std::uint64_t pool = 0;     ///< kind 4, cuMemAllocFromPoolAsync and custom pools
  /// Kind 7: physical memory of cuMemCreate handles, less what is mapped into PyTorch's
  /// expandable segments.
  std::uint64_t virtual_memory = 0;
  std::uint64_t total() const noexcept { return device + pitched + pool + virtual_memory; }
};

/// The ledger at one moment of one device. Sizes in bytes, times Unix-epoch nanoseconds.
struct LedgerAt {
  enum class Moment : std::uint8_t { end, peak, oom };
  Moment moment = Moment::end;
  /// Moment oom: the OOM's index among the device's OOMs, oldest first (DeviceModel::ooms for an
  /// OOM of the history; OOMs only the sidecar saw come after them).
  std::size_t oom = 0;
  /// The OOM is in PyTorch's history (DeviceModel::ooms[oom]); false for one only the sidecar's
  /// observer recorded (the history's ring had lost it).
  bool oom_in_history = true;
  std::uint64_t request_bytes = 0;  ///< moment oom: the request that failed (0 = not recorded)
  std::int64_t time_ns = 0;

  // --- the tensor level: PyTorch's allocator ---
  std::int64_t allocated_bytes = 0;  ///< allocated_bytes.all.current
  std::int64_t active_bytes = 0;     ///< active_bytes.all.current
  std::int64_t requested_bytes = 0;  ///< requested_bytes.all.current
  std::int64_t reserved_bytes = 0;   ///< reserved_bytes.all.current
  /// Where they come from: "memory_stats" (PyTorch's memory_stats() read with the free memory,
  /// from the sidecar), "history" (the model of the snapshot at that moment).
  std::string tensor_source;

  // --- the device level: the shim's trace ---
  /// Unknown (unset) without a device level that covers the moment and agrees with PyTorch's
  /// segments there (the notes say why).
  std::optional<OutsideBytes> outside;
  std::optional<std::uint64_t> rounding_bytes;  ///< set with `outside`
  /// The allocations of `outside`, by call stack (ids of MemoryLedger::stacks); empty when the
  /// shim's trace records no stacks.
  std::vector<StackBytes> outside_stacks;
  std::uint64_t managed_bytes = 0;  ///< live managed memory (not in any row: its residency is unknown)
  std::uint64_t arrays = 0;         ///< live CUDA arrays (not in any row: their size is unknown)

  // --- the device ---
  std::optional<std::uint64_t> total_bytes;
  std::optional<std::uint64_t> free_bytes;  ///< the device's free memory at the moment, as reported
  /// Where free_bytes comes from: "mem_get_info" (the sidecar's exit write), "oom" (the
  /// cudaMemGetInfo PyTorch made at the OOM); "" when unknown.
  std::string free_source;
  /// The memory of the CUDA context and of the device's other users when the shim first met the
  /// process's context there (Note [the context's share]); part of the rest. Unset when the shim's
  /// trace does not record it.
  std::optional<std::uint64_t> context_bytes;
  std::vector<std::string> notes;

  /// total - free; unset when either is unknown.
  std::optional<std::int64_t> used_bytes() const noexcept;
  /// reserved - allocated: PyTorch's cache.
  std::int64_t cache_bytes() const noexcept { return reserved_bytes - allocated_bytes; }
  /// used - reserved: memory that is not PyTorch's (outside, rounding and the rest together).
  std::optional<std::int64_t> not_pytorch_bytes() const noexcept;
  /// used - reserved - outside - rounding: the CUDA context, the driver and other processes.
  std::optional<std::int64_t> rest_bytes() const noexcept;
};

/// One device: the end first, then the peak, then each OOM.
struct DeviceLedger {
  std::int32_t device = 0;
  std::vector<LedgerAt> moments;
  /// The moment of `kind` (and OOM index); null when the ledger has none.
  const LedgerAt* at(LedgerAt::Moment kind, std::size_t oom = 0) const noexcept;
};

/// The ledger of one process.
struct MemoryLedger {
  std::string sidecar;                ///< the sidecar read ("" = none)
  std::string device_trace;           ///< the shim's trace read ("" = none: no device level)
  std::vector<DeviceLedger> devices;  ///< by device id
  /// The call stacks behind LedgerAt::outside_stacks (the shim trace's table); null when it
  /// records none.
  std::shared_ptr<const StackTable> stacks;
  std::vector<std::string> notes;

  const DeviceLedger* device(std::int32_t d) const noexcept;
};

/// Builds the ledger of `m`, the tensor-level model of a snapshot, from its sidecar (`sidecar`,
/// may be null) and the shim's trace of the same process (`device_trace`, "" for none; read once,
/// streaming). `m`'s header gains what the shim's trace says of the process and it lacks: the
/// devices' totals (a snapshot without a sidecar), pid, host, rank, the rank within the host and
/// CUDA_VISIBLE_DEVICES (which a snapshot never records), for the merged reports' device rules. A device trace that
/// cannot be read, or that is another process's (its pid is not the sidecar's), leaves the device level out with a
/// note: never an error. Not thread-safe.
MemoryLedger build_memory_ledger(TraceModel& m, const TorchSidecar* sidecar, const std::string& device_trace);

}  // namespace vramtrace
