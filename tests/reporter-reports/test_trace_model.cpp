// The analysis model: statistics, block sizes from the layout, peak and OOM states, timeline.
#include <catch2/catch.hpp>

#include <algorithm>
#include <map>
#include <random>
#include <string>

#include "model/checkpoint_journal.h"
#include "model/trace_model.h"
#include "peak_check.h"
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

TEST_CASE("events earlier than an event before them are counted in order and said in a note", "[model][time]") {
  RecordList l;
  const DevicePtr s = 0x1000000;
  l.add(Action::segment_alloc, s, 2 * MiB).add(Action::alloc, s, 4096).add(Action::alloc, s + 4096, 4096);
  l.add(Action::free_requested, s, 4096).add(Action::free_completed, s, 4096);
  auto in_order = build(l);
  for (const auto& n : in_order.devices[0].notes) CHECK(n.find("earlier than an event before") == std::string::npos);
  // The clock steps back 2.5 ms at event 3 and again, less, at event 4.
  l.records[3].time_ns = l.records[2].time_ns - 2'500'000;
  l.records[4].time_ns = l.records[2].time_ns - 1'000;
  auto back = build(l);
  const auto& d = back.devices[0];
  CHECK(d.stats.allocated_bytes[kStatAll].current == 4096);  // in the order of the trace
  CHECK(d.stats.allocated_bytes[kStatAll].peak == 8192);
  CHECK(d.last_time_ns == l.records[2].time_ns);
  bool said = false;
  for (const auto& n : d.notes)
    said = said || n.find(
                       "2 events have a time earlier than an event before them (the first at event 3, at most "
                       "2.500 ms back)") != std::string::npos;
  CHECK(said);
  for (const auto& b : d.timeline) CHECK(b.t_end_ns >= b.t_begin_ns);
  // The shim's trace: its threads' events may come a few milliseconds out of order; a step back of
  // a second or more is still said.
  auto shim_notes = [&](const RecordList& list) {
    TraceHeader h;
    h.format = "vramtrace";
    VectorReader reader(list.records, h);
    const TraceModel m = build_trace_model(reader);
    std::string all;
    for (const auto& n : m.devices[0].notes) all += n + "\n";
    return all;
  };
  CHECK(shim_notes(l).find("earlier than an event before") == std::string::npos);
  l.records[3].time_ns = l.records[2].time_ns - 1'500'000'000;
  CHECK(shim_notes(l).find("1 event has a time earlier than an event before it (the first at event 3, at most "
                           "1500.000 ms back)") != std::string::npos);
}

TEST_CASE("frees that match no allocated block of the trace's segments are named by what the address is",
          "[model][layout]") {
  RecordList l;
  const DevicePtr s = 0x400000;
  l.add(Action::segment_alloc, s, 2 * MiB).add(Action::alloc, s, 4096);
  l.add(Action::free_requested, s + 1024, 4096);  // inside the live block
  l.add(Action::free_requested, s, 4096).add(Action::free_completed, s, 4096);
  l.add(Action::free_completed, s, 4096);         // the same block again
  l.add(Action::free_requested, s + 8192, 4096);  // inside the free rest of the segment
  const auto m = build(l);
  const auto& d = m.devices[0];
  CHECK(d.stats.allocated_bytes[kStatAll].current == 0);
  CHECK(d.stats.active_bytes[kStatAll].current == 0);
  CHECK(d.frees_before_history == 0);
  std::string note;
  for (const auto& n : d.notes)
    if (n.find("no allocated block") != std::string::npos) note = n;
  INFO(note);
  CHECK(note.find("3 free events match no allocated block of the segments the trace created") != std::string::npos);
  CHECK(note.find("1 at an address inside a live allocation (the first at 0x400400, 1024 bytes into the block at "
                  "0x400000)") != std::string::npos);
  CHECK(note.find("1 of a block not allocated then (already freed, or never allocated)") != std::string::npos);
  CHECK(note.find("1 at an address inside free memory of a segment") != std::string::npos);
  CHECK(note.find("before it began") == std::string::npos);

  // A free after its segment was released: the trace's oddity, not memory from before the trace
  // (which would count the block as alive from the start and raise every peak).
  RecordList r;
  r.add(Action::segment_alloc, s, 2 * MiB).add(Action::alloc, s, MiB).add(Action::alloc, s + MiB, MiB);
  r.add(Action::free_requested, s, MiB).add(Action::free_completed, s, MiB);
  r.add(Action::free_requested, s + MiB, MiB).add(Action::free_completed, s + MiB, MiB);
  r.add(Action::segment_free, s, 2 * MiB);
  r.add(Action::free_requested, s + MiB, MiB);
  const auto after = build(r);
  const auto& a = after.devices[0];
  CHECK(a.frees_before_history == 0);
  CHECK(a.history == DeviceModel::History::complete);
  CHECK(a.stats.allocated_bytes[kStatAll].peak == static_cast<std::int64_t>(2 * MiB));
  std::string one;
  for (const auto& n : a.notes)
    if (n.find("no allocated block") != std::string::npos) one = n;
  INFO(one);
  CHECK(one.find("1 free event matches no allocated block of the segments the trace created, and is left out of "
                 "the figures: 1 in memory the trace had released (its segment freed)") != std::string::npos);
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

TEST_CASE("a new peak at every allocation in no segment stays linear and keeps the last peak's layout",
          "[model][peak]") {
  // Every alloc is a new peak and each state holds all earlier allocations: copying the layout at
  // each was quadratic (found by a fresh-user trial: minutes for a 2-million-event trace).
  RecordList l;
  for (std::uint64_t i = 0; i < 20000; ++i) {
    l.add(Action::alloc, 0x100000000ull + i * 4096, 4096);
    l.add(Action::snapshot, 0, 0);  // settles each peak
  }
  l.add(Action::free_requested, 0x100000000ull, 4096);  // below the peak from here on
  l.add(Action::free_completed, 0x100000000ull, 4096);
  auto m = build(l);
  REQUIRE(m.devices.size() == 1);
  const auto& d = m.devices[0];
  CHECK(d.orphan_allocs == 20000);
  CHECK(d.at_peak.stats.allocated_bytes[kStatAll].current == static_cast<std::int64_t>(20000 * 4096));
  CHECK(d.at_peak.outside_segments_bytes == 20000u * 4096u);
  REQUIRE(d.at_peak.biggest.size() == 10);
  CHECK(d.at_peak.biggest[0].address == 0x100000000ull);  // freed after the peak, there at it
  CHECK(d.at_end.outside_segments_bytes == 19999u * 4096u);
}

TEST_CASE("a checkpoint journal gives back the entries as they were at the checkpoint", "[model][peak]") {
  std::map<int, std::string> now = {{1, "a"}, {2, "b"}, {3, "c"}};
  CheckpointJournal<int, std::string> j;
  j.before_change(1, &now[1]);  // no checkpoint yet: nothing kept
  CHECK(j.size() == 0);
  j.start();
  j.before_change(1, &now.at(1));
  now[1] = "a2";
  j.before_change(1, &now.at(1));  // a second change of the same key keeps the first value
  now[1] = "a3";
  j.before_change(2, &now.at(2));
  now.erase(2);
  j.before_change(4, nullptr);  // created after the checkpoint
  now[4] = "d";
  CHECK(j.size() == 3);
  auto at = j.at_checkpoint(now);
  std::sort(at.begin(), at.end());
  REQUIRE(at.size() == 3);
  CHECK(at[0].first == 1);
  CHECK(*at[0].second == "a");
  CHECK(at[1].first == 2);
  CHECK(*at[1].second == "b");
  CHECK(at[2].first == 3);
  CHECK(*at[2].second == "c");
  j.start();  // a new checkpoint forgets the old one's values
  CHECK(j.size() == 0);
  CHECK(j.at_checkpoint(now).size() == now.size());
  j.stop();
  CHECK_FALSE(j.active());
}

TEST_CASE("the layout at the peak survives each kind of change after it", "[model][peak]") {
  // Note [the layout at the peak]: each change below meets its segment (or orphan) for the first
  // time since the peak, so a change that does not hand the old value to the journal first shows
  // in the peak's layout.
  const DevicePtr base = 0x1000000000ull;
  auto seg = [&](int i) { return base + static_cast<DevicePtr>(i) * 64 * MiB; };
  RecordList l;
  for (int i = 0; i < 8; ++i) {
    l.add(Action::segment_alloc, seg(i), 20 * MiB);
    l.add(Action::alloc, seg(i), 2 * MiB);
    l.add(Action::alloc, seg(i) + 2 * MiB, 2 * MiB);
  }
  l.add(Action::free_requested, seg(0) + 2 * MiB, 2 * MiB);                               // pending at the peak
  l.add(Action::segment_alloc, seg(8), 20 * MiB);                                         // empty at the peak
  for (int k = 0; k < 4; ++k) l.add(Action::segment_map, seg(9) + k * 2 * MiB, 2 * MiB);  // expandable
  l.add(Action::alloc, seg(9), 2 * MiB);
  l.add(Action::segment_map, seg(10), 2 * MiB);  // two mapped ranges with a hole between them
  l.add(Action::segment_map, seg(10) + 4 * MiB, 2 * MiB);
  for (int k = 0; k < 3; ++k) l.add(Action::segment_map, seg(12) + k * 2 * MiB, 2 * MiB);  // expandable, free
  l.add(Action::alloc, 0x900000000ull, 4096);                                              // orphans
  l.add(Action::alloc, 0x900100000ull, 4096);
  l.add(Action::alloc, 0x900200000ull, 4096);
  l.add(Action::free_requested, 0x900200000ull, 4096);
  l.add(Action::alloc, seg(7) + 4 * MiB, 8 * MiB);           // the peak
  l.add(Action::free_completed, seg(0) + 2 * MiB, 2 * MiB);  // 0: a pending free completes, merging
  l.add(Action::free_requested, seg(1), 2 * MiB);            // 1: a free requested
  l.add(Action::free_requested, seg(2), 2 * MiB);            // 2: a free requested and completed
  l.add(Action::free_completed, seg(2), 2 * MiB);
  l.add(Action::segment_free, seg(8), 20 * MiB);             // 8: a segment released
  l.add(Action::segment_map, seg(9) + 8 * MiB, 2 * MiB);     // 9: a mapped range grows
  l.add(Action::segment_map, seg(10) + 2 * MiB, 2 * MiB);    // 10: the hole mapped: two ranges join
  l.add(Action::free_requested, 0x900000000ull, 4096);       // orphans: a free requested,
  l.add(Action::free_completed, 0x900200000ull, 4096);       // a pending free completed,
  l.add(Action::alloc, 0x900300000ull, 4096);                // a new one
  l.add(Action::alloc, seg(3) + 4 * MiB, 4096);              // 3: an allocation splits a free block
  l.add(Action::segment_unmap, seg(12) + 2 * MiB, 2 * MiB);  // 12: its middle unmapped, cut in two
  l.add(Action::segment_alloc, seg(11), 20 * MiB);           // 11: a segment created
  l.add(Action::segment_alloc, seg(4) + MiB, 2 * MiB);       // 4: overlapped, dropped with its blocks
  const TraceModel m = testing::check_peak_layouts(l.records);
  REQUIRE(m.devices.size() == 1);
  const auto& peak = m.devices[0].at_peak;
  CHECK(peak.layout.segments.size() == 13);  // 0-9, 10 in two ranges, 12
  // 8 released, 10 joined, 11 created, 4 replaced, 12 cut in two by the unmap
  CHECK(m.devices[0].at_end.layout.segments.size() == 13);
  CHECK(m.devices[0].at_end.layout.segments.back().address == seg(12) + 4 * MiB);
}

TEST_CASE("the layout at the peak equals the end of the trace cut there, on seeded random traces", "[model][peak]") {
  // Note [the layout at the peak]: segments, blocks and orphans changed after the peak in every
  // way the model knows (splits, merges, pending frees, mapped and unmapped ranges, dropped
  // segments, conflicts), then enough segments made and released after it that the journal is
  // bounded and the peak's layout taken before the end.
  for (unsigned seed : {1u, 2u, 3u, 4u}) {
    INFO("seed " << seed);
    std::mt19937_64 rng(seed);
    auto pick = [&](std::uint64_t n) { return std::uniform_int_distribution<std::uint64_t>(0, n - 1)(rng); };
    RecordList l;
    std::vector<DevicePtr> live, pending;  // allocated; freed and waiting for their free_completed
    const DevicePtr base = 0x100000000ull;
    auto random_ops = [&](int n, std::uint64_t alloc_weight) {
      for (int i = 0; i < n; ++i) {
        const std::uint64_t seg = pick(256);  // many: most changes after the peak meet a segment first
        const DevicePtr seg_addr = base + seg * 64 * MiB;
        const std::uint64_t op = pick(10 + alloc_weight);
        if (op == 0) {
          l.add(Action::segment_alloc, seg_addr, (1 + pick(4)) * 8 * MiB, pick(2));
        } else if (op == 1) {
          l.add(Action::segment_free, seg_addr, 8 * MiB);
        } else if (op == 2) {
          l.add(Action::segment_map, seg_addr + pick(8) * 2 * MiB, 2 * MiB, pick(2));
        } else if (op == 3) {
          l.add(Action::segment_unmap, seg_addr + pick(8) * 2 * MiB, 2 * MiB);
        } else if ((op == 4 || op == 5) && !live.empty()) {
          const std::size_t k = pick(live.size());
          l.add(Action::free_requested, live[k], 512);
          if (op == 5)
            l.add(Action::free_completed, live[k], 512);
          else
            pending.push_back(live[k]);
          live.erase(live.begin() + static_cast<std::ptrdiff_t>(k));
        } else if (op == 7 && !pending.empty()) {
          const std::size_t k = pick(pending.size());
          l.add(Action::free_completed, pending[k], 512);
          pending.erase(pending.begin() + static_cast<std::ptrdiff_t>(k));
        } else if (op == 6) {
          const DevicePtr orphan = 0x900000000ull + pick(64) * MiB;  // in no segment
          l.add(Action::alloc, orphan, (1 + pick(4)) * 4096);
          live.push_back(orphan);
        } else {
          const DevicePtr a = seg_addr + pick(32) * MiB / 2;
          l.add(Action::alloc, a, (1 + pick(8)) * 512 * 1024);
          l.records.back().stack_id = static_cast<std::uint32_t>(pick(4));
          live.push_back(a);
        }
      }
    };
    random_ops(3000, 12);  // mostly allocations: the peak
    const std::size_t peak_phase = l.records.size();
    for (DevicePtr a : pending) l.add(Action::free_completed, a, 512);
    pending.clear();
    for (DevicePtr a : live) {
      l.add(Action::free_requested, a, 512);
      l.add(Action::free_completed, a, 512);
    }
    live.clear();
    for (std::uint64_t i = 0; i < 6000; ++i) {  // far more segment changes than the peak had
      l.add(Action::segment_alloc, 0x2000000000ull + i * 4 * MiB, 2 * MiB);
      l.add(Action::segment_free, 0x2000000000ull + i * 4 * MiB, 2 * MiB);
    }
    random_ops(3000, 0);
    const TraceModel m = testing::check_peak_layouts(l.records);
    REQUIRE(m.devices.size() == 1);
    CHECK(m.devices[0].at_peak.event_index < peak_phase);
  }
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

TEST_CASE("the timeline's exact points: consecutive events around the first peak, each exact", "[model][timeline]") {
  // Allocations rise to a peak at event 60 (of 1 MiB blocks), fall, and rise again to the same
  // height later: the window is around the first moment of the maximum.
  constexpr std::uint64_t MiB = 1ull << 20;
  testing::RecordList l;
  l.add(Action::segment_alloc, 0x100000000, 512 * MiB);
  for (int i = 0; i < 60; ++i) l.add(Action::alloc, 0x100000000 + i * 2 * MiB, MiB);
  for (int i = 0; i < 60; ++i) {
    l.add(Action::free_requested, 0x100000000 + i * 2 * MiB, MiB);
    l.add(Action::free_completed, 0x100000000 + i * 2 * MiB, MiB);
  }
  for (int i = 0; i < 60; ++i) l.add(Action::alloc, 0x100000000 + i * 2 * MiB, MiB);
  ModelOptions opt;
  opt.exact_points = 8;
  testing::VectorReader reader(l.records);
  const TraceModel m = build_trace_model(reader, opt);
  const auto& x = m.devices.at(0).exact;
  REQUIRE(x.size() == 17);  // 8 before the peak, the peak, 8 after
  // Record k (0-based) is at (k + 1) us; the peak is record 60, the 60th alloc.
  for (std::size_t i = 0; i < x.size(); ++i) {
    const std::size_t k = 52 + i;
    INFO(i);
    CHECK(x[i].t_ns == static_cast<std::int64_t>(k + 1) * 1000);
    // Each point is the state after its record: a prefix of the trace as its own model.
    testing::VectorReader prefix({l.records.begin(), l.records.begin() + static_cast<std::ptrdiff_t>(k + 1)});
    const TraceModel p = build_trace_model(prefix);
    const DeviceStats& s = p.devices.at(0).stats;
    CHECK(x[i].value[0] == s.allocated_bytes[kStatAll].current);
    CHECK(x[i].value[1] == s.active_bytes[kStatAll].current);
    CHECK(x[i].value[2] == s.reserved_bytes[kStatAll].current);
    CHECK(x[i].value[3] == s.requested_bytes[kStatAll].current);
  }
  CHECK(x[8].value[0] == static_cast<std::int64_t>(60 * MiB));
  // Without the option, none.
  testing::VectorReader again(l.records);
  CHECK(build_trace_model(again).devices.at(0).exact.empty());
}

TEST_CASE("checkpoints stay within their byte budget, keeping their largest segments", "[model][checkpoints]") {
  // 200 segments of 2 MiB, each filled with 600 blocks of 1 KiB, then each segment's blocks freed:
  // a full checkpoint holds 120,000 blocks, far above a 4 MiB budget shared by 16 checkpoints.
  constexpr std::uint64_t KiB = 1024, MiB = 1024 * KiB;
  testing::RecordList l;
  for (int s = 0; s < 200; ++s) {
    const DevicePtr seg = 0x100000000 + static_cast<DevicePtr>(s) * 4 * MiB;
    l.add(Action::segment_alloc, seg, 2 * MiB + static_cast<std::uint64_t>(s) * KiB);
    for (int b = 0; b < 600; ++b) l.add(Action::alloc, seg + static_cast<DevicePtr>(b) * KiB, KiB);
  }
  for (int s = 0; s < 200; ++s)
    for (int b = 0; b < 600; b += 2) {
      const DevicePtr a = 0x100000000 + static_cast<DevicePtr>(s) * 4 * MiB + static_cast<DevicePtr>(b) * KiB;
      l.add(Action::free_requested, a, KiB).add(Action::free_completed, a, KiB);
    }
  ModelOptions opt;
  opt.checkpoints = 8;
  auto total = [](const DeviceModel& d) {
    std::size_t n = 0;
    for (const auto& c : d.checkpoints) n += state_bytes(c);
    return n;
  };
  // Unbounded, the checkpoints would take far more.
  opt.checkpoint_max_bytes = std::size_t{1} << 40;
  testing::VectorReader unbounded(l.records);
  const TraceModel big = build_trace_model(unbounded, opt);
  REQUIRE(total(big.devices.at(0)) > 16 * MiB);

  opt.checkpoint_max_bytes = 4 * MiB;
  testing::VectorReader reader(l.records);
  const TraceModel m = build_trace_model(reader, opt);
  const DeviceModel& d = m.devices.at(0);
  REQUIRE(d.checkpoints.size() >= opt.checkpoints);
  CHECK(total(d) <= opt.checkpoint_max_bytes);
  std::size_t trimmed = 0;
  for (std::size_t i = 0; i < d.checkpoints.size(); ++i) {
    const StateAt& c = d.checkpoints[i];
    const StateAt& full = big.devices.at(0).checkpoints.at(i);
    INFO("checkpoint " << i);
    CHECK(state_bytes(c) <= opt.checkpoint_max_bytes / (2 * opt.checkpoints));
    // The figures stay exact; the layout keeps its largest segments, in address order, and says
    // how many it left out.
    CHECK(c.event_index == full.event_index);
    CHECK(c.stats.allocated_bytes[kStatAll].current == full.stats.allocated_bytes[kStatAll].current);
    CHECK(c.layout.segments.size() + c.segments_left_out == full.layout.segments.size() + full.segments_left_out);
    trimmed += c.segments_left_out > 0;
    std::uint64_t smallest_kept = ~0ull;
    for (std::size_t k = 0; k < c.layout.segments.size(); ++k) {
      if (k) CHECK(c.layout.segments[k - 1].address < c.layout.segments[k].address);
      smallest_kept = std::min(smallest_kept, c.layout.segments[k].total_size);
    }
    if (c.segments_left_out)
      for (const auto& g : full.layout.segments) {
        const bool kept = std::any_of(c.layout.segments.begin(), c.layout.segments.end(),
                                      [&](const SegmentSnapshot& x) { return x.address == g.address; });
        if (!kept) CHECK(g.total_size <= smallest_kept);
      }
  }
  CHECK(trimmed > 0);
}
