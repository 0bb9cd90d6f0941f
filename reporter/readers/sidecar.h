// The JSON sidecar that python/vramtrace/torch_level.py writes beside each tensor-level snapshot
// pickle of `vramtrace run` (docs/tensor-level.md, "The sidecar"): who the process was, when the
// snapshot was written, PyTorch's own statistics, the device's free memory at exit and each OOM
// the observer saw. Read here, at the edge, into typed fields; nothing downstream looks at its
// JSON.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace vramtrace {

/// PyTorch's flat statistics (memory_stats() keys such as "reserved_bytes.all.current").
using FlatStatList = std::vector<std::pair<std::string, std::int64_t>>;

/// The fields of a sidecar the reports use. Times are Unix-epoch nanoseconds (the sidecar writes
/// Unix seconds with a fraction), sizes bytes.
struct TorchSidecar {
  std::string path;  ///< the sidecar's file
  std::int64_t pid = 0;
  std::string host;           ///< "" when the sidecar says null
  std::string rank;           ///< the launcher's rank; "" when none
  std::string torch_version;  ///< torch.__version__; "" when unknown
  /// When this write happened: "exit", "os._exit", "signal SIGTERM", "oom", ... (the sidecar's
  /// `reason`); `final` is true for the exit write, false for an OOM's or a manual one.
  std::string reason;
  bool final = false;
  std::int64_t written_at_ns = 0;  ///< `written_at`: just after the free-memory reading
  /// The allocator settings in force, PYTORCH_CUDA_ALLOC_CONF syntax: the snapshot's own copy
  /// (`allocator.snapshot_settings`), else the environment's PYTORCH_CUDA_ALLOC_CONF, else
  /// PYTORCH_ALLOC_CONF; "" when none is set.
  std::string allocator_settings;

  /// One device the process initialised (`devices`).
  struct Device {
    std::int32_t device = 0;
    FlatStatList memory_stats;  ///< torch.cuda.memory_stats(device) at this write; empty when null
    /// torch.cuda.mem_get_info(device) at this write: only in the exit write, and only for a
    /// device with a context.
    std::optional<std::uint64_t> free_bytes;
    std::optional<std::uint64_t> total_bytes;
  };
  std::vector<Device> devices;

  /// One OOM the observer saw (`ooms`, oldest first).
  struct Oom {
    std::int64_t time_ns = 0;
    std::int32_t device = 0;
    std::uint64_t alloc_bytes = 0;  ///< the rounded request
    /// PyTorch's `device_allocated` argument: the device's total memory, or the cap of
    /// set_per_process_memory_fraction (c10/cuda/CUDACachingAllocator.cpp passes one or the other).
    std::uint64_t device_allocated_bytes = 0;
    std::uint64_t device_free_bytes = 0;  ///< cudaMemGetInfo's free at the OOM
    FlatStatList stats;                   ///< memory_stats(device) at the OOM; empty when null
  };
  std::vector<Oom> ooms;
  std::uint64_t ooms_dropped = 0;  ///< OOMs beyond the 1000 kept

  /// The entry of `device`, or null. O(devices).
  const Device* device(std::int32_t d) const noexcept {
    for (const auto& x : devices)
      if (x.device == d) return &x;
    return nullptr;
  }
};

/// What looking for a sidecar gave.
struct SidecarRead {
  std::optional<TorchSidecar> sidecar;  ///< set when one was found and is usable
  /// Set when a file was there but is not used, saying why, for a note in the reports ("x.json:
  /// not used: ..."); empty when there is none or it is usable.
  std::string problem;
};

/// Reads the sidecar of the snapshot pickle `snapshot`: `snapshot` + ".json", or, for a pickle the
/// user compressed (".gz", ".zst"), the name without that suffix + ".json". No such file: both
/// fields empty. A file that is not JSON, not of format "vramtrace-torch-sidecar" version 1, that
/// describes another pickle (its `snapshot` names another file), or whose fields used here have
/// another type or impossible values (free memory above the total) is not used at all: `problem`
/// says which, so that no figure of a damaged file reaches a report. Never throws. Reads one file.
SidecarRead read_sidecar(const std::string& snapshot);

/// A flat statistic by name, nullopt when absent. O(n).
std::optional<std::int64_t> flat_stat(const FlatStatList& stats, std::string_view key) noexcept;

}  // namespace vramtrace
