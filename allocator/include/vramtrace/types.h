// Small strong types shared by the allocator, the shim and the reporter.
#pragma once

#include <cstdint>
#include <functional>

namespace vramtrace {

inline constexpr std::uint64_t kKiB = 1024;
inline constexpr std::uint64_t kMiB = 1024 * kKiB;
inline constexpr std::uint64_t kGiB = 1024 * kMiB;

/// A device virtual address. 0 is never a valid allocation.
using DevicePtr = std::uint64_t;

/// CUDA device ordinal (as in `cudaSetDevice`). A strong type so that a device id is never
/// mixed up with a stream or a byte count.
struct DeviceId {
  std::int32_t value = 0;
  friend constexpr bool operator==(DeviceId, DeviceId) = default;
  friend constexpr auto operator<=>(DeviceId, DeviceId) = default;
};

/// A stream as the program names it: the `cudaStream_t`/`CUstream` handle value, or for the
/// per-thread default stream a per-thread key chosen by the shim (see Note [per-thread default
/// stream] in shim/). Stream 0 is the legacy default stream.
struct StreamId {
  std::uint64_t value = 0;
  friend constexpr bool operator==(StreamId, StreamId) = default;
  friend constexpr auto operator<=>(StreamId, StreamId) = default;
};

/// Result of a device or allocator operation; mirrors the CUDA error classes we must reproduce.
enum class Status : std::uint8_t {
  ok = 0,
  out_of_memory,  ///< cudaErrorMemoryAllocation / CUDA_ERROR_OUT_OF_MEMORY
  invalid_value,  ///< cudaErrorInvalidValue / CUDA_ERROR_INVALID_VALUE (size 0, unknown pointer...)
  not_supported,  ///< the backend cannot do this (e.g. virtual memory on a plain backend)
  device_error,   ///< any other failure reported by the device backend
};

/// Human-readable name of a Status ("ok", "out_of_memory", ...). Never null.
const char* status_name(Status s) noexcept;

}  // namespace vramtrace

template <>
struct std::hash<vramtrace::StreamId> {
  std::size_t operator()(vramtrace::StreamId s) const noexcept { return std::hash<std::uint64_t>{}(s.value); }
};
