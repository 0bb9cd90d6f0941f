// expandable_segments:True: address space reserved once, pages mapped on demand and unmapped on release.
#include "test_support.h"

using namespace vramtrace;
using namespace vramtrace::test;

TEST_CASE("expandable segments map pages on demand and grow in place") {
  SimulatedDevice::Options o;
  o.capacity_bytes = 8 * kGiB;
  SimulatedDevice dev(o);
  RecordingSink sink;
  CachingAllocator a(dev, settings_from("expandable_segments:True"), {}, &sink);
  DevicePtr p = must_allocate(a, 30 * kMiB);  // maps two 20 MiB pages
  DevicePtr q = must_allocate(a, 30 * kMiB);  // 10 MiB left mapped + one more page... grows in place
  CHECK(q == p + 30 * kMiB);
  CHECK(sink.count(Action::segment_alloc) == 0);
  CHECK(sink.sizes_of(Action::segment_map) == std::vector<std::uint64_t>{40 * kMiB, 20 * kMiB});
  auto st = a.stats();
  CHECK(st.reserved_bytes[kStatAll].current == static_cast<std::int64_t>(60 * kMiB));
  CHECK(st.num_device_alloc == 2);
  CHECK(st.inactive_split_bytes[kStatAll].peak == 0);  // expandable blocks are not inactive splits
  auto snap = a.snapshot();
  REQUIRE(snap.segments.size() == 1);
  CHECK(snap.segments[0].is_expandable);
  CHECK(snap.segments[0].total_size == 60 * kMiB);
  require_invariants(a);

  // Small requests use their own expandable segment with 2 MiB pages.
  DevicePtr s = must_allocate(a, 1000);
  CHECK(sink.sizes_of(Action::segment_map).back() == 2 * kMiB);
  a.deallocate(s);

  a.deallocate(p);
  a.deallocate(q);
  a.empty_cache();
  st = a.stats();
  CHECK(st.reserved_bytes[kStatAll].current == 0);
  CHECK(sink.count(Action::segment_unmap) == 2);
  CHECK(dev.used_bytes() == 0);
  CHECK(a.snapshot().segments.empty());
  require_invariants(a);
}

TEST_CASE("expandable segments unmap only whole free pages") {
  SimulatedDevice dev;
  RecordingSink sink;
  CachingAllocator a(dev, settings_from("expandable_segments:True"), {}, &sink);
  DevicePtr p = must_allocate(a, 30 * kMiB);
  DevicePtr q = must_allocate(a, 50 * kMiB);  // [p 30][q 50] on 80 MiB mapped
  a.deallocate(q);
  a.empty_cache();
  // Page 1 (20..40 MiB) holds the end of p: only pages 2 and 3 (40..80 MiB) are unmapped.
  CHECK(sink.sizes_of(Action::segment_unmap) == std::vector<std::uint64_t>{40 * kMiB});
  CHECK(a.stats().reserved_bytes[kStatAll].current == static_cast<std::int64_t>(40 * kMiB));
  require_invariants(a);
  DevicePtr r = must_allocate(a, 50 * kMiB);  // maps again right after p
  CHECK(r == p + 30 * kMiB);
  require_invariants(a);
}

TEST_CASE("expandable segments: an OOM while mapping leaves the state consistent") {
  SimulatedDevice::Options o;
  o.capacity_bytes = 100 * kMiB;
  SimulatedDevice dev(o);
  CachingAllocator a(dev, settings_from("expandable_segments:True"));
  must_allocate(a, 60 * kMiB);
  DevicePtr p = 0;
  CHECK(a.allocate(60 * kMiB, {}, &p) == Status::out_of_memory);
  CHECK(a.stats().num_ooms == 1);
  require_invariants(a);
  must_allocate(a, 40 * kMiB);
  require_invariants(a);
}
