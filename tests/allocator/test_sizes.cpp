// Rounding, pool choice and segment sizes: the worked vectors of PyTorch's allocator
// (docs/pytorch-allocator.md, "Sizes and rounding").
#include "test_support.h"

using namespace vramtrace;
using namespace vramtrace::test;

namespace {
struct Outcome {
  std::uint64_t block;    // allocated_bytes after the allocation
  std::uint64_t segment;  // the device allocation it caused
  bool small;
  bool split;  // a free remainder was left in the segment
};

Outcome allocate_once(std::uint64_t request, const std::string& conf = "") {
  SimulatedDevice dev;
  RecordingSink sink;
  CachingAllocator a(dev, settings_from(conf), {}, &sink);
  DevicePtr p = must_allocate(a, request);
  (void)p;
  const auto st = a.stats();
  auto segs = sink.sizes_of(Action::segment_alloc);
  REQUIRE(segs.size() == 1);
  require_invariants(a);
  return Outcome{static_cast<std::uint64_t>(st.allocated_bytes[kStatAll].current), segs[0],
                 st.allocated_bytes[kStatSmall].current > 0, st.inactive_split[kStatAll].current == 1};
}
}  // namespace

TEST_CASE("requests round to 512 bytes and pick PyTorch's pool and segment size") {
  struct Row {
    std::uint64_t request, block, segment;
    bool small, split;
  };
  const Row rows[] = {
      {1, 512, 2 * kMiB, true, true},
      {kMiB, kMiB, 2 * kMiB, true, true},
      {kMiB + 1, 1049088, 20 * kMiB, false, true},
      {10 * kMiB, 10 * kMiB, 10 * kMiB, false, false},
      {10 * kMiB + 1, 10486272, 12 * kMiB, false, true},
      // remainder of exactly 1 MiB is not split in the large pool (rule is "> 1 MiB"): whole 12 MiB handed out
      {11 * kMiB, 12 * kMiB, 12 * kMiB, false, false},
  };
  for (const auto& r : rows) {
    INFO("request " << r.request);
    const Outcome o = allocate_once(r.request);
    CHECK(o.block == r.block);
    CHECK(o.segment == r.segment);
    CHECK(o.small == r.small);
    CHECK(o.split == r.split);
  }
}

TEST_CASE("the requested size is kept apart from the block size") {
  SimulatedDevice dev;
  CachingAllocator a(dev, AllocatorSettings{});
  must_allocate(a, 11 * kMiB);
  const auto st = a.stats();
  CHECK(st.requested_bytes[kStatAll].current == static_cast<std::int64_t>(11 * kMiB));
  CHECK(st.allocated_bytes[kStatAll].current == static_cast<std::int64_t>(12 * kMiB));
}

TEST_CASE("roundup_power2_divisions rounds to the next power-of-two division") {
  // PyTorch's docs say 1200 B with 4 divisions -> 1280, but the code rounds by divisions only
  // when size > 512 x divisions, so 1200 B gets plain 512 B rounding; we follow the code.
  CHECK(allocate_once(1200, "roundup_power2_divisions:4").block == 1536);
  CHECK(allocate_once(4500, "roundup_power2_divisions:4").block == 5120);  // plain would be 4608
  // 300 MiB with 4 divisions -> 320 MiB.
  CHECK(allocate_once(300 * kMiB, "roundup_power2_divisions:4").block == 320 * kMiB);
  // A power of two stays as it is; a size at or below 512 x divisions uses plain rounding.
  CHECK(allocate_once(256 * kMiB, "roundup_power2_divisions:4").block == 256 * kMiB);
  CHECK(allocate_once(2000, "roundup_power2_divisions:4").block == 2048);
  CHECK(allocate_once(1500, "roundup_power2_divisions:8").block == 1536);
  // Per-interval lists: [256:1,>:8] leaves 300 MiB (interval 256) unrounded beyond 512 B...
  CHECK(allocate_once(300 * kMiB + 1, "roundup_power2_divisions:[256:1,>:8]").block == 300 * kMiB + 512);
  // ...and rounds 600 MiB (interval 512, after the last key) to 8 divisions of 512 MiB: 640 MiB.
  CHECK(allocate_once(600 * kMiB, "roundup_power2_divisions:[256:1,>:8]").block == 640 * kMiB);
}

TEST_CASE("zero-byte requests return a null pointer and change nothing") {
  SimulatedDevice dev;
  CachingAllocator a(dev, AllocatorSettings{});
  DevicePtr p = 123;
  REQUIRE(a.allocate(0, {}, &p) == Status::ok);
  CHECK(p == 0);
  CHECK(a.stats().num_device_alloc == 0);
}

TEST_CASE("an absurd request is refused without touching the device") {
  SimulatedDevice dev;
  CachingAllocator a(dev, AllocatorSettings{});
  DevicePtr p = 0;
  CHECK(a.allocate(std::uint64_t{1} << 62, {}, &p) == Status::out_of_memory);
  CHECK(dev.device_allocations() == 0);
  CHECK(a.allocate(kMiB, {}, nullptr) == Status::invalid_value);
}
