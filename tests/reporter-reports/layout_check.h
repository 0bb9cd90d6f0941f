// One comparison of two segment and block layouts (SegmentSnapshot lists), for the tests that
// check a layout against another: the state at a peak against a cut trace's end (peak_check.h),
// an exported snapshot read back against its input (test_export.cpp).
#pragma once

#include <catch2/catch.hpp>

#include <vector>

#include "vramtrace/snapshot.h"

namespace vramtrace::testing {

/// How two layouts' stack ids compare: equal ids (the same stack table), or only whether each
/// block has one (a format that renumbers stacks on the way).
enum class StackIds { equal, presence };

/// CHECKs that `a` and `b` hold the same segments (every field) with the same blocks.
inline void check_same_segments(const std::vector<SegmentSnapshot>& a, const std::vector<SegmentSnapshot>& b,
                                StackIds stacks = StackIds::equal) {
  REQUIRE(a.size() == b.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    const SegmentSnapshot& x = a[i];
    const SegmentSnapshot& y = b[i];
    INFO("segment " << i << " at " << x.address);
    CHECK(x.device == y.device);
    CHECK(x.address == y.address);
    CHECK(x.total_size == y.total_size);
    CHECK(x.allocated_size == y.allocated_size);
    CHECK(x.active_size == y.active_size);
    CHECK(x.requested_size == y.requested_size);
    CHECK(x.stream == y.stream);
    CHECK(x.is_large == y.is_large);
    CHECK(x.is_expandable == y.is_expandable);
    REQUIRE(x.blocks.size() == y.blocks.size());
    for (std::size_t k = 0; k < x.blocks.size(); ++k) {
      CHECK(x.blocks[k].address == y.blocks[k].address);
      CHECK(x.blocks[k].size == y.blocks[k].size);
      CHECK(x.blocks[k].requested_size == y.blocks[k].requested_size);
      CHECK(x.blocks[k].state == y.blocks[k].state);
      if (stacks == StackIds::equal)
        CHECK(x.blocks[k].stack_id == y.blocks[k].stack_id);
      else
        CHECK((x.blocks[k].stack_id == 0) == (y.blocks[k].stack_id == 0));
    }
  }
}

}  // namespace vramtrace::testing
