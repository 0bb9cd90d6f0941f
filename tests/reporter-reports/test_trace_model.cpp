// The analysis model: statistics, block sizes from the layout, peak and OOM states, timeline.
#include <catch2/catch.hpp>

#include <random>

#include "model/trace_model.h"
#include "vector_reader.h"
#include "vramtrace/caching_allocator.h"
#include "vramtrace/sim_device.h"

using namespace vramtrace;
using vramtrace::testing::RecordList;
using vramtrace::testing::VectorReader;

namespace {
constexpr std::uint64_t MiB = 1ull << 20;
TraceModel build(const RecordList& l, ModelOptions o = {}, std::string settings = "") {
  TraceHeader h;
  h.settings = settings;
  VectorReader r(l.records, h);
  return build_trace_model(r, o);
}
}  // namespace

TEST_CASE("round_size follows PyTorch", "[model][rounding]") {
  LayoutRules r;
  CHECK(r.round_size(1) == 512);
  CHECK(r.round_size(512) == 512);
  CHECK(r.round_size(513) == 1024);
  CHECK(r.round_size(1048577) == 1049088);
  auto four = LayoutRules::from_settings("roundup_power2_divisions:4");
  CHECK(four.round_size(1200) == 1536);  // 1200 < 512*4: plain 512 rounding
  CHECK(four.round_size(300 * MiB) == 320 * MiB);
  CHECK(four.round_size(256 * MiB) == 256 * MiB);
  auto list = LayoutRules::from_settings("roundup_power2_divisions:[64:8,128:2,256:4,512:2,1024:4,>:1]");
  CHECK(list.roundup_power2_divisions[5] == 8);   // 32 MiB interval takes the first key's value
  CHECK(list.roundup_power2_divisions[6] == 8);   // 64 MiB
  CHECK(list.roundup_power2_divisions[7] == 2);   // 128 MiB
  CHECK(list.roundup_power2_divisions[11] == 1);  // >= 2048 MiB
  auto ms = LayoutRules::from_settings("expandable_segments:False, max_split_size_mb:128");
  CHECK(ms.max_split_size_bytes == 128 * MiB);
}

TEST_CASE("block sizes from the layout: PyTorch's split rule", "[model][layout]") {
  RecordList l;
  const DevicePtr s1 = 0x10000000, s2 = 0x20000000;
  l.add(Action::segment_alloc, s1, 20 * MiB).add(Action::alloc, s1, 1048577);   // split: rem ~19 MiB
  l.add(Action::segment_alloc, s2, 12 * MiB).add(Action::alloc, s2, 11 * MiB);  // rem exactly 1 MiB: no split
  auto m = build(l);
  REQUIRE(m.devices.size() == 1);
  const auto& st = m.devices[0].stats;
  CHECK(st.allocated_bytes[kStatAll].current == 1049088 + 12 * MiB);
  CHECK(st.requested_bytes[kStatAll].current == 1048577 + 11 * MiB);
  CHECK(st.reserved_bytes[kStatAll].current == 32 * MiB);
  CHECK(st.segment[kStatAll].current == 2);
  CHECK(st.inactive_split_bytes[kStatAll].current == static_cast<std::int64_t>(20 * MiB - 1049088));
  CHECK(st.inactive_split[kStatAll].current == 1);
  CHECK(st.allocation[kStatLarge].current == 2);
  CHECK(m.has_segment_events);
}

TEST_CASE("free_requested drops allocated, free_completed drops active and merges", "[model][layout]") {
  RecordList l;
  const DevicePtr s = 0x1000000;
  l.add(Action::segment_alloc, s, 2 * MiB);
  l.add(Action::alloc, s, 1000).add(Action::alloc, s + 1024, 512).add(Action::alloc, s + 1536, 100);
  l.add(Action::free_requested, s + 1024, 512);
  auto m1 = build(l);
  const auto& a = m1.devices[0].stats;
  CHECK(a.allocated_bytes[kStatSmall].current == 1024 + 512);
  CHECK(a.active_bytes[kStatSmall].current == 1024 + 512 + 512);
  CHECK(a.allocation[kStatAll].current == 2);
  CHECK(a.active[kStatAll].current == 3);
  l.add(Action::free_completed, s + 1024, 512);
  l.add(Action::free_requested, s, 1000).add(Action::free_completed, s, 1000);
  auto m2 = build(l);
  const auto& b = m2.devices[0].stats;
  CHECK(b.active_bytes[kStatAll].current == 512);
  // blocks: [0,1536) free (merged), [1536,2048) used, [2048, 2 MiB) free
  const auto& seg = m2.devices[0].at_end.layout.segments.at(0);
  REQUIRE(seg.blocks.size() == 3);
  CHECK(seg.blocks[0].size == 1536);
  CHECK(seg.blocks[0].state == BlockState::inactive);
  CHECK(seg.blocks[1].state == BlockState::active_allocated);
  CHECK(m2.devices[0].at_end.largest_free_block == 2 * MiB - 2048);
  l.add(Action::free_requested, s + 1536, 100).add(Action::free_completed, s + 1536, 100);
  l.add(Action::segment_free, s, 2 * MiB);
  auto m3 = build(l);
  const auto& c = m3.devices[0].stats;
  CHECK(c.reserved_bytes[kStatAll].current == 0);
  CHECK(c.reserved_bytes[kStatAll].peak == 2 * MiB);
  CHECK(c.segment[kStatAll].current == 0);
  CHECK(c.inactive_split_bytes[kStatAll].current == 0);
  CHECK(c.allocated_bytes[kStatAll].allocated == 2048);
  CHECK(c.allocated_bytes[kStatAll].freed() == 2048);
  CHECK(c.num_device_alloc == 1);
  CHECK(c.num_device_free == 1);
  CHECK(m3.devices[0].layout_conflicts == 0);
}

TEST_CASE("state at the peak: biggest allocations and largest free block", "[model][peak]") {
  RecordList l;
  const DevicePtr s = 0x40000000;
  l.add(Action::segment_alloc, s, 100 * MiB);
  l.add(Action::alloc, s, 30 * MiB).add(Action::alloc, s + 30 * MiB, 50 * MiB);  // peak 80 MiB
  l.add(Action::free_requested, s, 30 * MiB).add(Action::free_completed, s, 30 * MiB);
  l.add(Action::alloc, s, 10 * MiB);  // 60 MiB, below the peak
  auto m = build(l);
  const auto& d = m.devices[0];
  CHECK(d.stats.allocated_bytes[kStatAll].peak == 80 * MiB);
  REQUIRE(d.at_peak.captured);
  CHECK(d.at_peak.stats.allocated_bytes[kStatAll].current == 80 * MiB);
  CHECK(d.at_peak.stats.reserved_bytes[kStatAll].current == 100 * MiB);
  CHECK(d.at_peak.largest_free_block == 20 * MiB);
  REQUIRE(d.at_peak.biggest.size() == 2);
  CHECK(d.at_peak.biggest[0].size == 50 * MiB);
  CHECK(d.at_peak.biggest[1].size == 30 * MiB);
  CHECK(d.at_peak.event_index == 2);
  // at the end: 10 MiB at s, then a 20 MiB hole, 50 MiB, 20 MiB free
  CHECK(d.at_end.largest_free_block == 20 * MiB);
  REQUIRE(d.at_end.biggest.size() == 2);
  CHECK(d.at_end.biggest[1].size == 10 * MiB);
}

TEST_CASE("OOM events keep the state they saw", "[model][oom]") {
  RecordList l;
  const DevicePtr s = 0x40000000;
  l.add(Action::segment_alloc, s, 64 * MiB).add(Action::alloc, s, 40 * MiB);
  l.oom(100 * MiB, 3 * MiB);
  auto m = build(l);
  const auto& d = m.devices[0];
  REQUIRE(d.ooms.size() == 1);
  CHECK(d.ooms[0].request_bytes == 100 * MiB);
  CHECK(d.ooms[0].device_free_bytes == 3 * MiB);
  CHECK(d.ooms[0].state.stats.allocated_bytes[kStatAll].current == 40 * MiB);
  CHECK(d.ooms[0].state.largest_free_block == 24 * MiB);
  CHECK(d.stats.num_ooms == 1);
  REQUIRE(d.markers.size() == 1);
  CHECK(d.markers[0].kind == "oom");
}

TEST_CASE("timeline keeps each bucket's min and max, so no peak disappears", "[model][timeline]") {
  RecordList l;
  const DevicePtr s = 0x40000000;
  l.add(Action::segment_alloc, s, 1024 * MiB);
  // 5000 short spikes of growing height
  for (int i = 0; i < 5000; ++i) {
    std::uint64_t sz = (1 + static_cast<std::uint64_t>(i) % 997) * MiB / 4;
    l.add(Action::alloc, s, sz).add(Action::free_requested, s, sz).add(Action::free_completed, s, sz);
  }
  ModelOptions o;
  o.timeline_buckets = 64;
  auto m = build(l, o);
  const auto& d = m.devices[0];
  CHECK(d.timeline.size() >= 64);
  CHECK(d.timeline.size() < 128);
  std::int64_t maxv = 0, minv = INT64_MAX;
  for (const auto& b : d.timeline) {
    maxv = std::max(maxv, b.max[0]);
    minv = std::min(minv, b.min[0]);
    CHECK(b.min[0] <= b.last[0]);
    CHECK(b.last[0] <= b.max[0]);
  }
  CHECK(maxv == d.stats.allocated_bytes[kStatAll].peak);
  CHECK(minv == 0);
  for (std::size_t i = 1; i < d.timeline.size(); ++i) CHECK(d.timeline[i].t_begin_ns > d.timeline[i - 1].t_begin_ns);
}

TEST_CASE("allocations outside known segments and odd frees are counted, not fatal", "[model][robust]") {
  RecordList l;
  l.add(Action::alloc, 0x5000, 1000).add(Action::free_requested, 0x9999, 10).add(Action::free_completed, 0x9999, 10);
  auto m = build(l);
  const auto& d = m.devices[0];
  CHECK(d.orphan_allocs == 1);
  CHECK(d.unknown_frees == 2);
  CHECK(d.stats.allocated_bytes[kStatAll].current == 1024);
  CHECK(d.stats.reserved_bytes[kStatAll].current == 0);
  CHECK_FALSE(m.has_segment_events);
  CHECK_FALSE(m.notes.empty());
}

TEST_CASE("devices are kept apart", "[model][devices]") {
  RecordList l;
  l.add(Action::segment_alloc, 0x1000000, 2 * MiB, 0, 0).add(Action::alloc, 0x1000000, 4096, 0, 0);
  l.add(Action::segment_alloc, 0x1000000, 20 * MiB, 0, 1).add(Action::alloc, 0x1000000, 5 * MiB, 0, 1);
  auto m = build(l);
  REQUIRE(m.devices.size() == 2);
  CHECK(m.devices[0].device == 0);
  CHECK(m.devices[0].stats.reserved_bytes[kStatAll].current == 2 * MiB);
  CHECK(m.devices[1].stats.reserved_bytes[kStatAll].current == 20 * MiB);
  CHECK(m.devices[1].stats.allocated_bytes[kStatAll].current == 5 * MiB);
}

TEST_CASE("expandable segments: mapped ranges grow and shrink a segment", "[model][expandable]") {
  RecordList l;
  const DevicePtr s = 0x7000000000;
  l.add(Action::segment_map, s, 20 * MiB).add(Action::alloc, s, 15 * MiB);
  l.add(Action::segment_map, s + 20 * MiB, 20 * MiB).add(Action::alloc, s + 15 * MiB, 18 * MiB);
  auto m = build(l);
  const auto& d = m.devices[0];
  CHECK(d.stats.reserved_bytes[kStatAll].current == 40 * MiB);
  CHECK(d.stats.segment[kStatAll].current == 1);
  CHECK(d.stats.allocated_bytes[kStatAll].current == 33 * MiB);
  CHECK(d.layout_conflicts == 0);
  l.add(Action::free_requested, s + 15 * MiB, 18 * MiB).add(Action::free_completed, s + 15 * MiB, 18 * MiB);
  l.add(Action::segment_unmap, s + 20 * MiB, 20 * MiB);
  auto m2 = build(l);
  CHECK(m2.devices[0].stats.reserved_bytes[kStatAll].current == 20 * MiB);
  CHECK(m2.devices[0].at_end.largest_free_block == 5 * MiB);
  CHECK(m2.devices[0].layout_conflicts == 0);
}

TEST_CASE("expandable segments: a hole at the head, in the middle or at the end of a segment record",
          "[model][expandable]") {
  // Three pages mapped at once, then one page unmapped where its free block ends exactly at the
  // hole's end (the next block is allocated), then mapped again.
  const DevicePtr s = 0x7000000000;
  for (int hole = 0; hole < 3; ++hole) {
    INFO("hole in page " << hole);
    RecordList l;
    l.add(Action::segment_map, s, 6 * MiB);
    for (int page = 0; page < 3; ++page) l.add(Action::alloc, s + page * 2 * MiB, 2 * MiB);
    const DevicePtr at = s + hole * 2 * MiB;
    l.add(Action::free_requested, at, 2 * MiB).add(Action::free_completed, at, 2 * MiB);
    l.add(Action::segment_unmap, at, 2 * MiB);
    auto cut = build(l);
    CHECK(cut.devices[0].stats.reserved_bytes[kStatAll].current == static_cast<std::int64_t>(4 * MiB));
    CHECK(cut.devices[0].stats.segment[kStatAll].current == (hole == 1 ? 2 : 1));
    CHECK(cut.devices[0].layout_conflicts == 0);
    l.add(Action::segment_map, at, 2 * MiB).add(Action::alloc, at, 2 * MiB);
    auto back = build(l);
    const auto& d = back.devices[0];
    CHECK(d.layout_conflicts == 0);
    CHECK(back.notes.empty());
    CHECK(d.stats.reserved_bytes[kStatAll].current == static_cast<std::int64_t>(6 * MiB));
    CHECK(d.stats.allocated_bytes[kStatAll].current == static_cast<std::int64_t>(6 * MiB));
    CHECK(d.stats.segment[kStatAll].current == 1);
    CHECK(d.orphan_allocs == 0);
  }
}

namespace {
// Every event of a live allocator, as a trace's records.
struct RecordingSink final : EventSink {
  RecordList list;
  void record(const Event& e) noexcept override {
    list.add(e.action, e.addr, e.size_bytes, e.stream, e.device);
    list.records.back().block_size = e.action == Action::alloc ? e.block_bytes : 0;
  }
};
}  // namespace

TEST_CASE("the model follows the caching allocator's own events: random work with OOMs under expandable segments",
          "[model][expandable]") {
  // The allocator maps and unmaps pages in any order (OOMs release the cache, frees split and
  // merge blocks across page boundaries); the model must keep each hole, with no conflict and the
  // allocator's figures at every step.
  for (const char* conf : {"expandable_segments:True", "", "max_split_size_mb:32"}) {
    for (std::uint64_t seed = 1; seed <= 6; ++seed) {
      INFO(conf << ", seed " << seed);
      AllocatorSettings settings;
      std::string error;
      REQUIRE(AllocatorSettings::parse(conf, settings, error));
      SimulatedDevice::Options o;
      o.capacity_bytes = 96 * MiB;
      SimulatedDevice dev(o);
      RecordingSink sink;
      CachingAllocator a(dev, settings, {}, &sink);
      std::mt19937_64 rng(seed);
      std::vector<DevicePtr> live;
      for (int step = 0; step < 3000; ++step) {
        const auto r = rng();
        if (r % 100 == 0) {
          a.empty_cache();
        } else if (r % 2 == 0 || live.empty()) {
          // Powers of two tile whole pages, so that free blocks start and end at page boundaries
          // (every hole shape); odd sizes leave partial pages.
          const std::uint64_t bytes =
              (r >> 8) % 4 == 0 ? (r >> 16) % (12 * MiB) + 1 : std::uint64_t{1024} << ((r >> 16) % 13);
          const StreamId stream{(r >> 40) % 3 == 0 ? 7u : 0u};
          DevicePtr p = 0;
          if (a.allocate(bytes, stream, &p) == Status::ok) live.push_back(p);
        } else {
          const auto k = (r >> 8) % live.size();
          REQUIRE(a.deallocate(live[k]) == Status::ok);
          live.erase(live.begin() + static_cast<long>(k));
        }
      }
      auto m = build(sink.list, {}, conf);
      REQUIRE(m.devices.size() == 1);
      const auto& d = m.devices[0];
      for (const auto& n : m.notes) FAIL_CHECK(n);
      CHECK(d.layout_conflicts == 0);
      CHECK(d.orphan_allocs == 0);
      const DeviceStats want = a.stats();
      CHECK(d.stats.reserved_bytes[kStatAll].current == want.reserved_bytes[kStatAll].current);
      CHECK(d.stats.allocated_bytes[kStatAll].current == want.allocated_bytes[kStatAll].current);
      CHECK(d.stats.active_bytes[kStatAll].current == want.active_bytes[kStatAll].current);
      CHECK(d.stats.reserved_bytes[kStatAll].peak == want.reserved_bytes[kStatAll].peak);
    }
  }
}

TEST_CASE("a device's peak and end states name its own events when devices interleave", "[model][peak]") {
  RecordList l;
  l.add(Action::segment_alloc, 0x10000000, 20 * MiB, 0, 0);  // event 0
  l.add(Action::alloc, 0x10000000, 8 * MiB, 0, 0);           // event 1: device 0's peak
  l.add(Action::segment_alloc, 0x20000000, 20 * MiB, 0, 1);  // events 2..4: device 1
  l.add(Action::alloc, 0x20000000, 4 * MiB, 0, 1);
  l.add(Action::alloc, 0x20400000, 4 * MiB, 0, 1);           // event 4: device 1's peak
  l.add(Action::free_requested, 0x10000000, 8 * MiB, 0, 0);  // event 5: settles device 0's peak
  l.add(Action::free_completed, 0x10000000, 8 * MiB, 0, 0);  // event 6: device 0's last
  l.add(Action::free_requested, 0x20400000, 4 * MiB, 0, 1);  // event 7: device 1's last
  auto m = build(l);
  REQUIRE(m.devices.size() == 2);
  CHECK(m.devices[0].at_peak.event_index == 1);
  CHECK(m.devices[0].at_peak.stats.allocated_bytes[kStatAll].current == static_cast<std::int64_t>(8 * MiB));
  CHECK(m.devices[0].at_end.event_index == 6);
  CHECK(m.devices[1].at_peak.event_index == 4);
  CHECK(m.devices[1].at_end.event_index == 7);
}

TEST_CASE("the block size a trace records is used, not the rounding rule", "[model][layout]") {
  RecordList l;
  l.add(Action::segment_alloc, 0x10000000, 20 * MiB);
  l.add(Action::alloc, 0x10000000, 1000000);
  l.records.back().block_size = MiB;          // a vramtrace trace's "b"
  l.add(Action::alloc, 0x10100000, 1000000);  // no block size recorded: 512-byte rounding
  auto m = build(l);
  REQUIRE(m.devices.size() == 1);
  CHECK(m.devices[0].stats.allocated_bytes[kStatAll].current == static_cast<std::int64_t>(MiB + 1000448));
  CHECK(m.devices[0].stats.requested_bytes[kStatAll].current == 2000000);
}

TEST_CASE("allocations in no segment count against the peak-copy budget", "[model][peak]") {
  // Every alloc is a new peak and every copy of the state holds all earlier allocations: without
  // the budget this is quadratic (found by a fresh-user trial: minutes for a 2-million-event trace).
  RecordList l;
  for (std::uint64_t i = 0; i < 20000; ++i) {
    l.add(Action::alloc, 0x100000000ull + i * 4096, 4096);
    l.add(Action::snapshot, 0, 0);  // settles each peak
  }
  auto m = build(l);
  REQUIRE(m.devices.size() == 1);
  CHECK(m.devices[0].orphan_allocs == 20000);
  CHECK(m.devices[0].peak_layout_deferred);
  CHECK(m.devices[0].at_peak.stats.allocated_bytes[kStatAll].current == static_cast<std::int64_t>(20000 * 4096));
}

TEST_CASE("marks belong to the process: on every device's timeline, with their names, and no device of their own",
          "[model][marks]") {
  // A rank that uses device 1 only; its marks' records say device 0 (vramtrace_mark has no device).
  RecordList l;
  l.add(Action::mark, 0, 0);  // before the first allocation
  l.add(Action::segment_alloc, 0x20000000, 20 * MiB, 0, 1);
  l.add(Action::alloc, 0x20000000, 4 * MiB, 0, 1);
  l.add(Action::mark, 0, 0);
  l.add(Action::segment_alloc, 0x30000000, 2 * MiB, 0, 2);
  auto m = build(l);
  REQUIRE(m.devices.size() == 2);
  CHECK(m.devices[0].device == 1);
  CHECK(m.devices[1].device == 2);
  for (const auto& d : m.devices) {
    std::vector<std::int64_t> times;
    for (const auto& mk : d.markers)
      if (mk.kind == "mark") times.push_back(mk.time_ns);
    CHECK(times == std::vector<std::int64_t>{1000, 4000});
    CHECK(d.events == (d.device == 1 ? 2u : 1u));  // marks are no device's events
  }
  CHECK(m.events == 5);  // but they keep their place in the trace's numbering
}
