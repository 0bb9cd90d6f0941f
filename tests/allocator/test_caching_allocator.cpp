// Behaviour of the caching allocator: best fit, splitting, merging, streams, max_split_size,
// events, frees, OOM handling and statistics.
#include <algorithm>
#include <map>

#include "test_support.h"

using namespace vramtrace;
using namespace vramtrace::test;

TEST_CASE("a freed block is reused and split blocks merge back") {
  SimulatedDevice dev;
  RecordingSink sink;
  CachingAllocator a(dev, AllocatorSettings{}, {}, &sink);
  DevicePtr x = must_allocate(a, 4 * kMiB);  // 20 MiB segment, split
  DevicePtr y = must_allocate(a, 4 * kMiB);  // from the remainder
  CHECK(y == x + 4 * kMiB);
  CHECK(a.stats().inactive_split[kStatAll].current == 1);
  REQUIRE(a.deallocate(x) == Status::ok);
  REQUIRE(a.deallocate(y) == Status::ok);
  require_invariants(a);
  // Everything merged back into one free 20 MiB block: not split any more.
  auto st = a.stats();
  CHECK(st.inactive_split[kStatAll].current == 0);
  CHECK(st.inactive_split_bytes[kStatAll].current == 0);
  CHECK(st.reserved_bytes[kStatAll].current == static_cast<std::int64_t>(20 * kMiB));
  CHECK(a.cached_free_bytes() == 20 * kMiB);
  DevicePtr z = must_allocate(a, 20 * kMiB - 1);
  CHECK(z == x);
  CHECK(sink.count(Action::segment_alloc) == 1);
  CHECK(sink.count(Action::free_requested) == 2);
  CHECK(sink.count(Action::free_completed) == 2);
}

TEST_CASE("best fit takes the smallest block that fits, then the lowest address") {
  SimulatedDevice dev;
  CachingAllocator a(dev, AllocatorSettings{});
  DevicePtr big = must_allocate(a, 40 * kMiB);
  DevicePtr mid = must_allocate(a, 24 * kMiB);
  DevicePtr small = must_allocate(a, 12 * kMiB);
  a.deallocate(big);
  a.deallocate(mid);
  a.deallocate(small);
  CHECK(must_allocate(a, 11 * kMiB) == small);
  CHECK(must_allocate(a, 13 * kMiB) == mid);
  require_invariants(a);
}

TEST_CASE("blocks are reused only on the stream they were allocated on") {
  SimulatedDevice dev;
  RecordingSink sink;
  CachingAllocator a(dev, AllocatorSettings{}, {}, &sink);
  DevicePtr p = must_allocate(a, 12 * kMiB, StreamId{1});
  a.deallocate(p);
  DevicePtr q = must_allocate(a, 12 * kMiB, StreamId{2});
  CHECK(q != p);
  CHECK(sink.count(Action::segment_alloc) == 2);
  DevicePtr r = must_allocate(a, 12 * kMiB, StreamId{1});
  CHECK(r == p);
  require_invariants(a);
}

TEST_CASE("max_split_size_mb: oversize blocks are never split and serve only close sizes") {
  SimulatedDevice dev;
  RecordingSink sink;
  CachingAllocator a(dev, settings_from("max_split_size_mb:100"), {}, &sink);
  DevicePtr big = must_allocate(a, 200 * kMiB);
  CHECK(a.stats().oversize_allocations.current == 1);
  CHECK(a.stats().oversize_segments.current == 1);
  a.deallocate(big);
  // A small request may not take the oversize block.
  DevicePtr small = must_allocate(a, 50 * kMiB);
  CHECK(small != big);
  // A large request takes it only if it is within 20 MiB (max_non_split_rounding_mb).
  DevicePtr close = must_allocate(a, 190 * kMiB);
  CHECK(close == big);
  CHECK(a.stats().allocated_bytes[kStatLarge].current == static_cast<std::int64_t>(50 * kMiB + 200 * kMiB));
  a.deallocate(close);
  DevicePtr far = must_allocate(a, 150 * kMiB);
  CHECK(far != big);
  CHECK(a.stats().max_split_size == static_cast<std::int64_t>(100 * kMiB));
  CHECK(AllocatorSettings{}.max_split_size_bytes == std::numeric_limits<std::uint64_t>::max());
  SimulatedDevice dev2;
  CHECK(CachingAllocator(dev2, AllocatorSettings{}).stats().max_split_size == -1);
  require_invariants(a);
}

TEST_CASE("a block used on another stream returns to the pool only after its event completes") {
  SimulatedDevice::Options o;
  o.events_complete_immediately = false;
  SimulatedDevice dev(o);
  RecordingSink sink;
  CachingAllocator a(dev, AllocatorSettings{}, {}, &sink);
  DevicePtr p = must_allocate(a, 12 * kMiB, StreamId{1});
  REQUIRE(a.record_stream(p, StreamId{2}) == Status::ok);
  REQUIRE(a.deallocate(p) == Status::ok);
  auto st = a.stats();
  CHECK(st.allocated_bytes[kStatAll].current == 0);                                  // dropped at free time
  CHECK(st.active_bytes[kStatAll].current == static_cast<std::int64_t>(12 * kMiB));  // still pending
  CHECK(sink.count(Action::free_completed) == 0);
  auto snap = a.snapshot();
  REQUIRE(snap.segments.size() == 1);
  CHECK(snap.segments[0].blocks[0].state == BlockState::active_pending_free);
  require_invariants(a);
  // While pending, the same size needs a new segment.
  DevicePtr q = must_allocate(a, 12 * kMiB, StreamId{1});
  CHECK(q != p);
  dev.complete_events();
  DevicePtr r = must_allocate(a, 12 * kMiB, StreamId{1});  // process_events returned p first
  CHECK(r == p);
  CHECK(sink.count(Action::free_completed) == 1);
  require_invariants(a);
  CHECK(a.deallocate(p + 512) == Status::invalid_value);  // not a block start
}

TEST_CASE("double frees and unknown pointers are refused and change nothing") {
  SimulatedDevice dev;
  CachingAllocator a(dev, AllocatorSettings{});
  DevicePtr p = must_allocate(a, kMiB);
  REQUIRE(a.deallocate(p) == Status::ok);
  const auto before = a.stats();
  CHECK(a.deallocate(p) == Status::invalid_value);
  CHECK(a.deallocate(0xdeadbeef) == Status::invalid_value);
  CHECK(a.stats().allocation[kStatAll].freed() == before.allocation[kStatAll].freed());
  CHECK_FALSE(a.find(p).has_value());
  require_invariants(a);
}

TEST_CASE("deferred frees replay a trace's free_requested ... free_completed") {
  SimulatedDevice dev;
  CachingAllocator a(dev, AllocatorSettings{});
  DevicePtr p = must_allocate(a, 12 * kMiB);
  REQUIRE(a.deallocate_deferred(p) == Status::ok);
  CHECK(a.stats().allocated_bytes[kStatAll].current == 0);
  CHECK(a.stats().active_bytes[kStatAll].current == static_cast<std::int64_t>(12 * kMiB));
  CHECK(a.deallocate(p) == Status::invalid_value);
  require_invariants(a);
  REQUIRE(a.complete_deferred_free(p) == Status::ok);
  CHECK(a.complete_deferred_free(p) == Status::invalid_value);
  CHECK(a.stats().active_bytes[kStatAll].current == 0);
  require_invariants(a);
}

TEST_CASE("empty_cache releases whole free segments but not split ones") {
  SimulatedDevice dev;
  RecordingSink sink;
  CachingAllocator a(dev, AllocatorSettings{}, {}, &sink);
  DevicePtr whole = must_allocate(a, 30 * kMiB);
  DevicePtr part = must_allocate(a, 4 * kMiB);
  must_allocate(a, 4 * kMiB);  // keeps part's segment split
  a.deallocate(whole);
  a.deallocate(part);
  a.empty_cache();
  auto st = a.stats();
  CHECK(st.reserved_bytes[kStatAll].current == static_cast<std::int64_t>(20 * kMiB));
  CHECK(st.num_device_free == 1);
  CHECK(st.num_sync_all_streams == 1);
  CHECK(sink.sizes_of(Action::segment_free) == std::vector<std::uint64_t>{30 * kMiB});
  CHECK(dev.used_bytes() == 20 * kMiB);
  require_invariants(a);
}

TEST_CASE("an OOM releases the cache, retries once, then fails with an oom event and a snapshot") {
  SimulatedDevice::Options o;
  o.capacity_bytes = 100 * kMiB;
  SimulatedDevice dev(o);
  RecordingSink sink;
  CachingAllocator a(dev, AllocatorSettings{}, DeviceId{3}, &sink);
  DevicePtr keep = must_allocate(a, 60 * kMiB);
  DevicePtr p = 0;
  CHECK(a.allocate(50 * kMiB, StreamId{7}, &p) == Status::out_of_memory);
  CHECK(p == 0);
  auto st = a.stats();
  CHECK(st.num_ooms == 1);
  CHECK(st.num_alloc_retries == 1);
  REQUIRE(sink.count(Action::oom) == 1);
  const Event& oom = sink.events.back();
  CHECK(oom.action == Action::oom);
  CHECK(oom.size_bytes == 50 * kMiB);
  CHECK(oom.block_bytes == 50 * kMiB);
  CHECK(oom.aux == 40 * kMiB);  // device free
  CHECK(oom.device == 3);
  CHECK(oom.stream == 7);
  REQUIRE(sink.oom_states.size() == 1);
  CHECK(sink.oom_states[0].segments.size() == 1);
  const OomInfo info = a.last_oom();
  CHECK(info.allocated_bytes == 60 * kMiB);
  CHECK(info.reserved_bytes == 60 * kMiB);
  CHECK(info.device_free_bytes == 40 * kMiB);
  a.deallocate(keep);
  CHECK(must_allocate(a, 50 * kMiB) == keep);  // fits in the cached block now
  require_invariants(a);
}

TEST_CASE("a memory fraction or limit caps reserved memory without asking the device") {
  SimulatedDevice::Options o;
  o.capacity_bytes = 1000 * kMiB;
  SimulatedDevice dev(o);
  CachingAllocator a(dev, settings_from("limit:100MiB"));
  must_allocate(a, 80 * kMiB);
  DevicePtr p = 0;
  CHECK(a.allocate(30 * kMiB, {}, &p) == Status::out_of_memory);
  CHECK(a.last_oom().allowed_bytes == 100 * kMiB);
  CHECK(dev.device_allocations() == 1);

  SimulatedDevice dev2(o);
  CachingAllocator b(dev2, settings_from("per_process_memory_fraction:0.1"));
  must_allocate(b, 90 * kMiB);
  CHECK(b.allocate(20 * kMiB, {}, &p) == Status::out_of_memory);
}

TEST_CASE("garbage collection frees old cached segments above the threshold") {
  SimulatedDevice::Options o;
  o.capacity_bytes = 1000 * kMiB;
  SimulatedDevice dev(o);
  RecordingSink sink;
  CachingAllocator a(dev, settings_from("per_process_memory_fraction:0.5,garbage_collection_threshold:0.5"), {}, &sink);
  // allowed = 500 MiB; GC starts when reserved memory exceeds 250 MiB.
  DevicePtr a1 = must_allocate(a, 100 * kMiB);
  a.deallocate(a1);                             // cached first: the oldest block
  DevicePtr a2 = must_allocate(a, 110 * kMiB);  // misses (a1 too small); 100 MiB reserved, no GC
  DevicePtr a3 = must_allocate(a, 120 * kMiB);  // misses; 210 MiB reserved, no GC
  a.deallocate(a2);
  a.deallocate(a3);
  // 330 MiB reserved; this miss collects blocks at least as old as the average: only a1.
  must_allocate(a, 200 * kMiB);
  CHECK(sink.sizes_of(Action::segment_free) == std::vector<std::uint64_t>{100 * kMiB});
  CHECK(a.stats().reserved_bytes[kStatAll].current == static_cast<std::int64_t>(430 * kMiB));
  require_invariants(a);
}

TEST_CASE("statistics flatten to PyTorch's names") {
  SimulatedDevice dev;
  CachingAllocator a(dev, AllocatorSettings{});
  DevicePtr p = must_allocate(a, 1000);
  a.deallocate(p);
  must_allocate(a, 30 * kMiB);
  auto flat = flatten_stats(a.stats());
  std::map<std::string, std::int64_t> m(flat.begin(), flat.end());
  CHECK(m.size() == 9 * 3 * 4 + 2 * 4 + 5 + 1);
  CHECK(std::is_sorted(flat.begin(), flat.end()));
  CHECK(m.at("allocated_bytes.all.peak") == static_cast<std::int64_t>(30 * kMiB));
  CHECK(m.at("allocated_bytes.small_pool.allocated") == 1024);
  CHECK(m.at("allocated_bytes.small_pool.freed") == 1024);
  CHECK(m.at("requested_bytes.small_pool.allocated") == 1000);
  CHECK(m.at("reserved_bytes.all.current") == static_cast<std::int64_t>(32 * kMiB));
  CHECK(m.at("segment.large_pool.current") == 1);
  CHECK(m.at("num_device_alloc") == 2);
  CHECK(m.at("max_split_size") == -1);
  CHECK(m.count("oversize_segments.peak") == 1);
  CHECK(m.count("inactive_split_bytes.all.peak") == 1);
  a.reset_peak_stats();
  CHECK(a.stats().allocated_bytes[kStatAll].peak == static_cast<std::int64_t>(30 * kMiB));
}

TEST_CASE("find reports live blocks") {
  SimulatedDevice dev;
  CachingAllocator a(dev, AllocatorSettings{});
  DevicePtr p = must_allocate(a, 3000, StreamId{5});
  auto info = a.find(p);
  REQUIRE(info.has_value());
  CHECK(info->size == 3072);
  CHECK(info->requested_size == 3000);
  CHECK(info->stream == StreamId{5});
  CHECK(info->pool == PoolKind::small);
  CHECK_FALSE(a.find(p + 512).has_value());
}
