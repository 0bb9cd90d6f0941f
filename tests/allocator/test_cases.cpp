// Fault shapes from public bug reports (docs/cases.md), as allocator tests with their right values.
#include "test_support.h"

using namespace vramtrace;
using namespace vramtrace::test;

namespace {
constexpr std::uint64_t gib(double g) { return static_cast<std::uint64_t>(g * static_cast<double>(kGiB)); }
}  // namespace

// C1 (vllm PR 41268): a weight placed in a larger cached block.
TEST_CASE("C1: weights placed in larger cached blocks leave inactive split memory") {
  constexpr int L = 36;
  auto run = [](const std::string& conf, std::uint64_t capacity, CachingAllocator** out_alloc = nullptr) {
    SimulatedDevice::Options o;
    o.capacity_bytes = capacity;
    auto dev = std::make_unique<SimulatedDevice>(o);
    auto a = std::make_unique<CachingAllocator>(*dev, settings_from(conf));
    int ooms = 0;
    for (int i = 0; i < L; ++i) {
      DevicePtr t = 0, w = 0;
      if (a->allocate(530 * kMiB, {}, &t) != Status::ok) {
        ++ooms;
        continue;
      }
      a->deallocate(t);
      if (a->allocate(270 * kMiB, {}, &w) != Status::ok) ++ooms;
    }
    require_invariants(*a);
    return std::make_tuple(a->stats(), ooms, std::move(dev), std::move(a));
  };
  SECTION("PyTorch policy") {
    auto [st, ooms, dev, a] = run("", 80 * kGiB);
    CHECK(ooms == 0);
    CHECK(st.reserved_bytes[kStatAll].current == static_cast<std::int64_t>(L * 530 * kMiB));
    CHECK(st.allocated_bytes[kStatAll].current == static_cast<std::int64_t>(L * 270 * kMiB));
    CHECK(st.inactive_split_bytes[kStatAll].current == static_cast<std::int64_t>(L * 260 * kMiB));
  }
  SECTION("max_split_size_mb:20 never splits the 530 MiB blocks") {
    auto [st, ooms, dev, a] = run("max_split_size_mb:20", 80 * kGiB);
    CHECK(ooms == 0);
    CHECK(st.inactive_split_bytes[kStatAll].peak == 0);
    CHECK(st.allocated_bytes[kStatAll].current == static_cast<std::int64_t>(L * 270 * kMiB));
    CHECK(st.reserved_bytes[kStatAll].current == static_cast<std::int64_t>(530 * kMiB + L * 270 * kMiB));
  }
  SECTION("under 15 GiB the default runs out where max_split_size_mb:20 fits") {
    auto [st_default, ooms_default, d1, a1] = run("", 15 * kGiB);
    auto [st_split, ooms_split, d2, a2] = run("max_split_size_mb:20", 15 * kGiB);
    CHECK(ooms_default > 0);
    CHECK(st_default.num_ooms == ooms_default);
    CHECK(ooms_split == 0);
    CHECK(st_split.num_ooms == 0);
  }
}

// C2 (pytorch 31353): enough free memory in total, no hole large enough.
TEST_CASE("C2: fragmentation - free memory in holes smaller than the request") {
  // 6 segments of 5062 MiB: [2048 MiB live][867 MiB hole][2147 MiB live] -> 24.58 GiB live,
  // 5.08 GiB free in holes of 0.85 GiB, 29.66 GiB reserved. Capacity 31.72 GiB, 1.28 GiB free.
  const std::uint64_t capacity = gib(31.72);
  const std::uint64_t reserved = 6 * 5062 * kMiB;
  SimulatedDevice::Options o;
  o.capacity_bytes = capacity;
  o.outside_bytes = capacity - reserved - gib(1.28);
  SimulatedDevice dev(o);
  CachingAllocator a(dev, AllocatorSettings{});
  std::vector<DevicePtr> holes;
  for (int i = 0; i < 6; ++i) {
    DevicePtr whole = must_allocate(a, 5062 * kMiB);
    a.deallocate(whole);
    must_allocate(a, 2048 * kMiB);
    holes.push_back(must_allocate(a, 867 * kMiB));
    must_allocate(a, 2147 * kMiB);
  }
  for (DevicePtr hole : holes) a.deallocate(hole);
  auto before = a.stats();
  CHECK(before.allocated_bytes[kStatAll].current == static_cast<std::int64_t>(6 * 4195 * kMiB));
  CHECK(before.inactive_split_bytes[kStatAll].current == static_cast<std::int64_t>(6 * 867 * kMiB));
  DevicePtr p = 0;
  const std::uint64_t request = gib(1.86);
  CHECK(a.allocate(request, {}, &p) == Status::out_of_memory);
  const OomInfo oom = a.last_oom();
  const std::uint64_t free_in_cache = oom.reserved_bytes - oom.allocated_bytes;
  CHECK(free_in_cache + oom.device_free_bytes >= request);  // enough memory in total...
  CHECK(a.snapshot().largest_free_block() == 867 * kMiB);   // ...but no hole of 1.86 GiB
  CHECK(a.snapshot().largest_free_block() < request);
  CHECK(oom.device_free_bytes == gib(1.28));
  CHECK(a.stats().num_ooms == 1);
  require_invariants(a);
}

// C5 (pytorch 193195): a retry is not an OOM.
TEST_CASE("C5: a failed device allocation releases the cache and the retry succeeds") {
  SimulatedDevice::Options o;
  o.capacity_bytes = 100 * kMiB;
  SimulatedDevice dev(o);
  RecordingSink sink;
  CachingAllocator a(dev, AllocatorSettings{}, {}, &sink);
  // 20 MiB of whole, free small-pool segments: unusable for a large-pool request.
  std::vector<DevicePtr> small;
  for (int i = 0; i < 20; ++i) small.push_back(must_allocate(a, kMiB));
  for (DevicePtr p : small) a.deallocate(p);
  CHECK(a.stats().reserved_bytes[kStatSmall].current == static_cast<std::int64_t>(20 * kMiB));
  dev.set_outside_bytes(100 * kMiB - 20 * kMiB - 15 * kMiB);  // device free: 15 MiB
  CHECK(dev.mem_info().free_bytes == 15 * kMiB);
  DevicePtr p = must_allocate(a, 4 * kMiB);  // needs a 20 MiB segment
  (void)p;
  auto st = a.stats();
  CHECK(st.num_alloc_retries == 1);
  CHECK(st.num_ooms == 0);
  CHECK(st.reserved_bytes[kStatAll].current == static_cast<std::int64_t>(20 * kMiB));
  CHECK(sink.sizes_of(Action::segment_alloc).back() == 20 * kMiB);  // a 4 MiB request, a 20 MiB segment
  CHECK(sink.count(Action::oom) == 0);
  require_invariants(a);
}

// C6 (pytorch 189504): a free pending on another stream.
TEST_CASE("C6: after waiting for a pending free the pool is searched again") {
  SimulatedDevice::Options o;
  o.capacity_bytes = 1000 * kMiB;
  o.events_complete_immediately = false;
  SimulatedDevice dev(o);
  CachingAllocator a(dev, AllocatorSettings{});
  const StreamId A{1}, B{2};
  DevicePtr p = must_allocate(a, 600 * kMiB, A);
  a.deallocate(p);
  DevicePtr x = must_allocate(a, 300 * kMiB, A);  // split from p's segment
  must_allocate(a, 290 * kMiB, A);
  must_allocate(a, 390 * kMiB, A);  // the device is now nearly full
  REQUIRE(a.record_stream(x, B) == Status::ok);
  REQUIRE(a.deallocate(x) == Status::ok);  // pending on B
  DevicePtr again = must_allocate(a, 300 * kMiB, A);
  CHECK(again == x);
  CHECK(a.stats().num_ooms == 0);
  require_invariants(a);
}

// C7 (pytorch 159674): the cached segment is released for a larger request.
TEST_CASE("C7: a cached 60 GiB segment is released so that 70 GiB fit") {
  SimulatedDevice::Options o;
  o.capacity_bytes = 80 * kGiB;
  SimulatedDevice dev(o);
  CachingAllocator a(dev, AllocatorSettings{});
  DevicePtr big = must_allocate(a, 60 * kGiB);
  a.deallocate(big);
  must_allocate(a, 70 * kGiB);
  auto st = a.stats();
  CHECK(st.reserved_bytes[kStatAll].current == static_cast<std::int64_t>(70 * kGiB));
  CHECK(st.num_ooms == 0);
  CHECK(st.num_alloc_retries == 1);
}

// C8 (pytorch 60150): the CUDA context is not a leak.
TEST_CASE("C8: reserved memory goes to zero; what stays is the context, outside the allocator") {
  const std::uint64_t context = 1043 * kMiB;
  SimulatedDevice::Options o;
  o.capacity_bytes = 16 * kGiB;
  o.outside_bytes = context;
  SimulatedDevice dev(o);
  RecordingSink sink;
  CachingAllocator a(dev, AllocatorSettings{}, {}, &sink);
  DevicePtr t = must_allocate(a, 64000000);
  CHECK(sink.sizes_of(Action::segment_alloc) == std::vector<std::uint64_t>{65011712});
  CHECK(a.stats().reserved_bytes[kStatAll].current == 65011712);
  CHECK(dev.used_bytes() == context + 65011712);  // the process-level figure: 1105 MiB
  a.deallocate(t);
  CHECK(a.stats().allocated_bytes[kStatAll].current == 0);
  CHECK(a.stats().reserved_bytes[kStatAll].current == 65011712);  // cached
  a.empty_cache();
  CHECK(a.stats().reserved_bytes[kStatAll].current == 0);
  CHECK(dev.used_bytes() == context);  // what stays is not the allocator's
}

// C9 (pytorch 37250): cached, not leaked.
TEST_CASE("C9: after freeing everything allocated is zero and reserved is unchanged") {
  SimulatedDevice dev;
  CachingAllocator a(dev, AllocatorSettings{});
  std::vector<DevicePtr> live;
  std::uint64_t total = 0;
  for (std::uint64_t i = 0; total < 12 * kGiB; ++i) {
    const std::uint64_t size = (1 + i % 97) * 1536 * kKiB;
    live.push_back(must_allocate(a, size));
    total += size;
  }
  const auto reserved = a.stats().reserved_bytes[kStatAll].current;
  for (DevicePtr p : live) a.deallocate(p);
  auto st = a.stats();
  CHECK(st.allocated_bytes[kStatAll].current == 0);
  CHECK(st.reserved_bytes[kStatAll].current == reserved);
  CHECK(st.allocated_bytes[kStatAll].peak >= static_cast<std::int64_t>(12 * kGiB));
  require_invariants(a);
}
