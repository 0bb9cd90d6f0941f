// The sizes a trace's allocations asked for, counted as they pass: what tells the requests of a
// program from the segments of a caching allocator (model/allocation_level.h).
#pragma once

#include <cstdint>

namespace vramtrace {

/// Counts of one device's allocation requests by size class: every `alloc` entry, and every
/// device allocation the shim forwarded to the driver (which the model counts as allocated).
/// PyTorch's caching allocator asks the device only for whole multiples of 2 MiB: 2 MiB segments
/// for its small pool, 20 MiB for requests under 10 MiB, and other requests rounded up to 2 MiB
/// (c10/cuda/CUDACachingAllocator.cpp, get_allocation_size; docs/pytorch-allocator.md). Not
/// thread-safe; O(1) a request.
struct RequestSizes {
  static constexpr std::uint64_t kSmallSegmentBytes = 2ull << 20;   ///< PyTorch's kSmallBuffer
  static constexpr std::uint64_t kLargeSegmentBytes = 20ull << 20;  ///< PyTorch's kLargeBuffer

  std::uint64_t requests = 0;
  std::uint64_t multiples_of_2mib = 0;  ///< requests that are whole (non-zero) multiples of 2 MiB
  std::uint64_t small_segments = 0;     ///< requests of exactly 2 MiB
  std::uint64_t large_segments = 0;     ///< requests of exactly 20 MiB

  void add(std::uint64_t bytes) noexcept {
    ++requests;
    if (bytes != 0 && bytes % kSmallSegmentBytes == 0) ++multiples_of_2mib;
    small_segments += bytes == kSmallSegmentBytes;
    large_segments += bytes == kLargeSegmentBytes;
  }
  void merge(const RequestSizes& o) noexcept {
    requests += o.requests;
    multiples_of_2mib += o.multiples_of_2mib;
    small_segments += o.small_segments;
    large_segments += o.large_segments;
  }
};

}  // namespace vramtrace
