// PyTorch's size rules in one place (vramtrace/size_rules.h), checked against what the caching
// allocator does: the block an allocation gets, its pool, the segment a miss asks for, the split.
#include "test_support.h"

#include "vramtrace/size_rules.h"

using namespace vramtrace;
using namespace vramtrace::test;

namespace {
struct Outcome {
  std::uint64_t allocated;  // allocated_bytes after one allocation on a fresh allocator
  std::uint64_t segment;    // the device allocation it caused
  bool small;
  bool split;  // a free remainder was left in the segment
};

Outcome allocate_once(std::uint64_t request, const AllocatorSettings& s) {
  SimulatedDevice dev;
  RecordingSink sink;
  CachingAllocator a(dev, s, {}, &sink);
  must_allocate(a, request);
  const auto st = a.stats();
  auto segs = sink.sizes_of(Action::segment_alloc);
  REQUIRE(segs.size() == 1);
  return Outcome{static_cast<std::uint64_t>(st.allocated_bytes[kStatAll].current), segs[0],
                 st.allocated_bytes[kStatSmall].current > 0, st.inactive_split[kStatAll].current == 1};
}
}  // namespace

TEST_CASE("size rules: round_size, in_small_pool, allocation_size and should_split are the allocator's",
          "[size_rules]") {
  const char* confs[] = {"", "roundup_power2_divisions:4", "roundup_power2_divisions:[1:2,64:8,256:1,>:4]",
                         "max_split_size_mb:40", "roundup_power2_divisions:16,max_split_size_mb:200"};
  std::vector<std::uint64_t> requests = {1,
                                         511,
                                         512,
                                         513,
                                         1200,
                                         4500,
                                         kMiB - 1,
                                         kMiB,
                                         kMiB + 1,
                                         3 * kMiB + 7,
                                         10 * kMiB - 1,
                                         10 * kMiB,
                                         10 * kMiB + 1,
                                         11 * kMiB,
                                         39 * kMiB + 5,
                                         40 * kMiB,
                                         256 * kMiB,
                                         300 * kMiB,
                                         300 * kMiB + 1,
                                         600 * kMiB,
                                         3 * kGiB + 3};
  for (std::uint64_t r = 1; r < 64 * kMiB; r = r * 3 + 101) requests.push_back(r);
  for (const char* conf : confs) {
    const AllocatorSettings s = settings_from(conf);
    for (std::uint64_t request : requests) {
      INFO(conf << ": request " << request);
      const Outcome o = allocate_once(request, s);
      const std::uint64_t block = round_size(request, s.roundup_power2_divisions);
      CHECK(block == round_size(request, s.divisions_for(request)));
      const bool small = in_small_pool(block);
      const std::uint64_t segment = allocation_size(block);
      const std::uint64_t remaining = segment - block;
      const bool split = remaining > 0 && should_split(block, remaining, small, s.max_split_size_bytes);
      CHECK(o.segment == segment);
      CHECK(o.small == small);
      CHECK(o.split == split);
      CHECK(o.allocated == (split ? block : segment));
    }
  }
}

TEST_CASE("size rules: the worked values of PyTorch's rules", "[size_rules]") {
  CHECK(round_size(0, 0) == kMinBlockSize);
  CHECK(round_size(513, 0) == 1024);
  CHECK(round_size(1200, 4) == 1536);  // 1200 <= 512 * 4: plain rounding
  CHECK(round_size(4500, 4) == 5120);  // plain would be 4608
  CHECK(round_size(300 * kMiB, 4) == 320 * kMiB);
  CHECK(round_size(256 * kMiB, 4) == 256 * kMiB);
  CHECK(roundup_power2_next_division(300 * kMiB + 1, 8) == 320 * kMiB);
  CHECK(roundup_power2_interval(0) == 0);
  CHECK(roundup_power2_interval(kMiB - 1) == 0);
  CHECK(roundup_power2_interval(kMiB) == 0);
  CHECK(roundup_power2_interval(2 * kMiB) == 1);
  CHECK(roundup_power2_interval(1024 * kGiB) == 15);
  CHECK(allocation_size(512) == kSmallBuffer);
  CHECK(allocation_size(kMiB) == kSmallBuffer);
  CHECK(allocation_size(kMiB + 512) == kLargeBuffer);
  CHECK(allocation_size(10 * kMiB) == 10 * kMiB);
  CHECK(allocation_size(10 * kMiB + 1) == 12 * kMiB);
  CHECK(should_split(512, 512, true, 0));
  CHECK_FALSE(should_split(512, 511, true, UINT64_MAX));
  CHECK_FALSE(should_split(11 * kMiB, kMiB, false, UINT64_MAX));  // "> 1 MiB"
  CHECK(should_split(11 * kMiB, kMiB + 512, false, UINT64_MAX));
  CHECK_FALSE(should_split(40 * kMiB, 10 * kMiB, false, 40 * kMiB));  // oversize blocks are never split
}
