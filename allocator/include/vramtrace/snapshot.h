// A snapshot of the allocator's segments and blocks, shaped like torch.cuda.memory._snapshot().
#pragma once

#include <cstdint>
#include <vector>

#include "vramtrace/types.h"

namespace vramtrace {

/// State of a block, PyTorch's names.
enum class BlockState : std::uint8_t {
  active_allocated,     ///< handed to the program
  active_pending_free,  ///< freed by the program, still in use by another stream (event pending)
  inactive,             ///< free, cached
};
const char* block_state_name(BlockState s) noexcept;

struct BlockSnapshot {
  DevicePtr address = 0;
  std::uint64_t size = 0;            ///< block bytes (rounded)
  std::uint64_t requested_size = 0;  ///< bytes the program asked for (0 when inactive)
  BlockState state = BlockState::inactive;
  bool mapped = true;  ///< false for unmapped address space of an expandable segment
  /// The call stack that allocated the block, an id of the trace reader's stack table
  /// (TraceReader::stacks); 0 = not recorded.
  std::uint32_t stack_id = 0;
};

/// One device allocation (or, for an expandable segment, one contiguous mapped range), its
/// blocks in address order tiling it completely.
struct SegmentSnapshot {
  std::int32_t device = 0;
  DevicePtr address = 0;
  std::uint64_t total_size = 0;
  std::uint64_t allocated_size = 0;
  std::uint64_t active_size = 0;
  std::uint64_t requested_size = 0;
  std::uint64_t stream = 0;
  bool is_large = true;  ///< segment_type "large" or "small"
  bool is_expandable = false;
  std::vector<BlockSnapshot> blocks;
};

struct Snapshot {
  std::vector<SegmentSnapshot> segments;  ///< sorted by address

  /// Largest inactive mapped block in bytes (0 if none).
  std::uint64_t largest_free_block() const noexcept;
};

}  // namespace vramtrace
