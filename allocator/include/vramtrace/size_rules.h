// PyTorch's size rules, in one place: the block size a request rounds to (round_size), the pool
// it belongs to, whether a free block is split (should_split), and the segment a miss asks the
// device for (get_allocation_size). The caching allocator applies them; the reporter asks them to
// lay out a trace (trace_model), to count allocated bytes (step_series) and to explain an OOM
// (oom_report). Every rule and constant follows c10/cuda/CUDACachingAllocator.cpp.
//
// All sizes are in bytes. Every function is pure (constexpr, thread-safe).
#pragma once

#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>

#include "vramtrace/types.h"

namespace vramtrace {

/// Size constants of PyTorch's allocator, in bytes.
inline constexpr std::uint64_t kMinBlockSize = 512;         ///< all sizes round to multiples of this
inline constexpr std::uint64_t kSmallSize = 1 * kMiB;       ///< rounded size <= this: small pool
inline constexpr std::uint64_t kSmallBuffer = 2 * kMiB;     ///< small-pool segment / page size
inline constexpr std::uint64_t kLargeBuffer = 20 * kMiB;    ///< segment for (1 MiB, 10 MiB) requests
inline constexpr std::uint64_t kMinLargeAlloc = 10 * kMiB;  ///< at or above: segment = 2 MiB-rounded request
inline constexpr std::uint64_t kRoundLarge = 2 * kMiB;      ///< rounding of large segments

/// Number of roundup_power2_divisions intervals: [2^(20+i), 2^(21+i)) for i in [0, 15]
/// (1 MiB .. 64 GiB; smaller sizes use interval 0, larger ones interval 15).
inline constexpr std::size_t kRoundupPower2Intervals = 16;

/// The roundup_power2_divisions interval of a size: floor(log2(bytes)) - 20, clamped to [0, 15]
/// (0 for bytes == 0). PyTorch's roundup_power2_divisions(size) index.
constexpr std::size_t roundup_power2_interval(std::uint64_t bytes) noexcept {
  const int log_size = bytes == 0 ? 0 : static_cast<int>(std::bit_width(bytes)) - 1;
  const int index = log_size - 20;
  return index < 0 ? 0 : index > 15 ? 15 : static_cast<std::size_t>(index);
}

/// PyTorch's roundup_power2_next_division: `size` rounded up to the next of `divisions` equal
/// steps between the powers of two around it. A power of two stays as it is. `divisions` must be
/// a power of two >= 1 (AllocatorSettings::parse accepts only those).
constexpr std::uint64_t roundup_power2_next_division(std::uint64_t size, std::uint64_t divisions) noexcept {
  if (std::has_single_bit(size)) return size;
  const std::uint64_t power2_floor = std::bit_floor(size);
  const std::uint64_t step = power2_floor >> (std::bit_width(divisions) - 1);
  if (step == 0) return power2_floor << 1;
  const std::uint64_t floor = size & ~(step - 1);
  return floor == size ? size : floor + step;
}

/// PyTorch's round_size: the block size that serves a request of `size` bytes. Below 512 B:
/// 512 B. With `divisions` > 1 (the roundup_power2_divisions entry of the size's interval) and a
/// size above 512 * divisions: the next power-of-two division. Otherwise: up to a multiple of
/// 512 B. `divisions` 0 or 1 is the default (plain) rounding.
constexpr std::uint64_t round_size(std::uint64_t size, std::uint32_t divisions) noexcept {
  if (size < kMinBlockSize) return kMinBlockSize;
  if (divisions > 1 && size > kMinBlockSize * divisions) return roundup_power2_next_division(size, divisions);
  return kMinBlockSize * ((size + kMinBlockSize - 1) / kMinBlockSize);
}

/// round_size with a whole roundup_power2_divisions table (AllocatorSettings::roundup_power2_divisions):
/// the entry of the size's interval applies.
constexpr std::uint64_t round_size(std::uint64_t size,
                                   const std::array<std::uint32_t, kRoundupPower2Intervals>& divisions) noexcept {
  return round_size(size, divisions[roundup_power2_interval(size)]);
}

/// Whether a block of `rounded_bytes` (a round_size result) comes from the small pool.
constexpr bool in_small_pool(std::uint64_t rounded_bytes) noexcept { return rounded_bytes <= kSmallSize; }

/// PyTorch's should_split: whether a free block that serves `size` bytes (rounded) keeps its
/// `remaining_bytes` as a free block of its own. In the small pool, and with expandable
/// segments, any remainder of at least 512 B is split off; otherwise a block of at least
/// `max_split_size_bytes` is never split, and a remainder of 1 MiB or less stays with the block.
constexpr bool should_split(std::uint64_t size, std::uint64_t remaining_bytes, bool small_pool_or_expandable,
                            std::uint64_t max_split_size_bytes) noexcept {
  if (small_pool_or_expandable) return remaining_bytes >= kMinBlockSize;
  return size < max_split_size_bytes && remaining_bytes > kSmallSize;
}

/// PyTorch's get_allocation_size: the segment a miss asks the device for, for a rounded request
/// of `size` bytes. <= 1 MiB: 2 MiB (a small-pool segment); < 10 MiB: 20 MiB; otherwise the
/// request rounded up to a multiple of 2 MiB.
constexpr std::uint64_t allocation_size(std::uint64_t size) noexcept {
  if (size <= kSmallSize) return kSmallBuffer;
  if (size < kMinLargeAlloc) return kLargeBuffer;
  return kRoundLarge * ((size + kRoundLarge - 1) / kRoundLarge);
}

}  // namespace vramtrace
