// Snapshots as users make them: no allocator history at all, the segment list alone, and a
// history that begins late (Note [a history that begins late] in reporter/model/trace_model.h).
#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include "analyses/summary.h"
#include "model/trace_model.h"
#include "readers/open_trace.h"
#include "vector_reader.h"

using namespace vramtrace;
using vramtrace::testing::RecordList;
using vramtrace::testing::VectorReader;

namespace {

constexpr std::int64_t MiB = 1ll << 20;

std::string pickle_path(const std::string& name) { return std::string(VRAMTRACE_TEST_DATA_DIR) + "/pickle/" + name; }

TraceModel model_of(const std::string& path) {
  auto reader = open_trace(path);
  return build_trace_model(*reader);
}

/// Every number of a JSON document that is negative, by its path. max_split_size is PyTorch's -1
/// for "no limit", not a quantity of memory.
void negatives(const nlohmann::json& j, const std::string& at, std::vector<std::string>& out) {
  if (j.is_object()) {
    for (const auto& [k, v] : j.items())
      if (k != "max_split_size") negatives(v, at + "." + k, out);
  } else if (j.is_array()) {
    for (std::size_t i = 0; i < j.size(); ++i) negatives(j[i], at + "[" + std::to_string(i) + "]", out);
  } else if (j.is_number_integer() && j.get<std::int64_t>() < 0) {
    out.push_back(at + " = " + std::to_string(j.get<std::int64_t>()));
  } else if (j.is_number_float() && j.get<double>() < 0) {
    out.push_back(at);
  }
}

bool has_note(const DeviceModel& d, const std::string& start) {
  for (const auto& n : d.notes)
    if (n.rfind(start, 0) == 0) return true;
  return false;
}

/// The end state's figures of one device, summed from its segments the way PyTorch's
/// memory_stats() counts them.
struct EndFigures {
  std::int64_t allocated = 0, active = 0, requested = 0, reserved = 0, segments = 0;
};
EndFigures end_figures(const Snapshot& s, std::int32_t device) {
  EndFigures e;
  for (const auto& seg : s.segments) {
    if (seg.device != device) continue;
    e.reserved += static_cast<std::int64_t>(seg.total_size);
    e.allocated += static_cast<std::int64_t>(seg.allocated_size);
    e.active += static_cast<std::int64_t>(seg.active_size);
    e.requested += static_cast<std::int64_t>(seg.requested_size);
    ++e.segments;
  }
  return e;
}

void check_end_equals_segments(const TraceModel& m, const Snapshot& end) {
  for (const auto& d : m.devices) {
    INFO("device " << d.device);
    const EndFigures e = end_figures(end, d.device);
    for (const DeviceStats* st : {&d.stats, &d.at_end.stats}) {
      CHECK(st->allocated_bytes[kStatAll].current == e.allocated);
      CHECK(st->active_bytes[kStatAll].current == e.active);
      CHECK(st->requested_bytes[kStatAll].current == e.requested);
      CHECK(st->reserved_bytes[kStatAll].current == e.reserved);
      CHECK(st->segment[kStatAll].current == e.segments);
    }
    CHECK(d.stats.allocated_bytes[kStatAll].peak >= e.allocated);
    CHECK(d.stats.reserved_bytes[kStatAll].peak >= e.reserved);
  }
}

Snapshot end_state_of(const std::string& path) {
  auto reader = open_trace(path);
  TraceRecord r;
  while (reader->next(r)) {
  }
  REQUIRE(reader->final_state() != nullptr);
  return *reader->final_state();
}

}  // namespace

TEST_CASE("a snapshot without history gives its end state from the segments", "[model][snapshot][history]") {
  for (const char* name : {"no_history.snapshot.pickle", "segments_only.pickle"}) {
    INFO(name);
    const std::string path = pickle_path(name);
    const TraceModel m = model_of(path);
    REQUIRE(m.devices.size() == 2);  // both devices, although neither has an event
    check_end_equals_segments(m, end_state_of(path));
    const auto& d0 = m.devices[0];
    CHECK(d0.history == DeviceModel::History::none);
    CHECK(d0.events == 0);
    // 8 MiB + 512 B allocated, 4 MiB pending free, two segments of 20 MiB and 2 MiB.
    CHECK(d0.stats.allocated_bytes[kStatAll].current == 8 * MiB + 512);
    CHECK(d0.stats.allocated_bytes[kStatSmall].current == 512);
    CHECK(d0.stats.reserved_bytes[kStatAll].current == 22 * MiB);
    CHECK(d0.stats.reserved_bytes[kStatSmall].current == 2 * MiB);
    CHECK(d0.stats.active_bytes[kStatAll].current == 12 * MiB + 512);
    // The peak known is the end state: at least that much was allocated and reserved.
    CHECK(d0.stats.allocated_bytes[kStatAll].peak == 8 * MiB + 512);
    CHECK(d0.stats.reserved_bytes[kStatAll].peak == 22 * MiB);
    REQUIRE(d0.at_peak.captured);
    CHECK(d0.at_peak.stats.reserved_bytes[kStatAll].current == 22 * MiB);
    CHECK(d0.at_end.layout.segments.size() == 2);
    CHECK(d0.at_end.largest_free_block == 8 * MiB);
    REQUIRE(d0.at_end.biggest.size() == 3);
    CHECK(d0.at_end.biggest[0].size == 8 * MiB);
    CHECK(d0.at_end.biggest[0].before_trace);
    CHECK(d0.at_end.biggest[1].pending_free);
    CHECK(has_note(d0, "the trace has no allocator history"));
    CHECK(m.devices[1].stats.allocated_bytes[kStatAll].current == 20 * MiB);

    const nlohmann::json j = summary_json({m});
    CHECK(j["traces"][0]["devices"][0]["history"] == "none");
    CHECK(j["traces"][0]["devices"][0]["end"]["reserved_bytes"] == 22 * MiB);
    CHECK(j["traces"][0]["devices"][0]["stats"]["reserved_bytes.all.peak"] == 22 * MiB);
    const std::string text = render_summary_text({m});
    CHECK(text.find("No allocator history") != std::string::npos);
    CHECK(text.find("Still allocated at the end: 3 blocks, 12.00 MiB (reserved 22.00 MiB)") != std::string::npos);
    CHECK(text.find(": no events") == std::string::npos);
  }
}

TEST_CASE("a history cut from a real snapshot is placed against its segments", "[model][snapshot][history][real]") {
  const std::string path = pickle_path("late_start.snapshot.pickle.gz");
  const TraceModel m = model_of(path);
  REQUIRE(m.devices.size() == 1);
  const auto& d = m.devices[0];
  CHECK(d.history == DeviceModel::History::late);
  CHECK(d.frees_before_history > 0);
  check_end_equals_segments(m, end_state_of(path));
  // The second half of the history still holds the run's peaks (tests/data/torch-h200/README.md):
  // with what existed before its first event counted, the model finds them exactly.
  CHECK(d.stats.allocated_bytes[kStatAll].peak == 1598815744);
  CHECK(d.stats.reserved_bytes[kStatAll].peak == 2000683008);
  REQUIRE(d.at_peak.captured);
  CHECK(d.at_peak.stats.allocated_bytes[kStatAll].current == 1598815744);
  // Reserved memory never below allocated memory: the segments of the early allocations count.
  CHECK(d.at_peak.stats.reserved_bytes[kStatAll].current >= d.at_peak.stats.allocated_bytes[kStatAll].current);
  for (const auto& b : d.timeline)
    for (int i = 0; i < 4; ++i) {
      INFO("series " << kSeriesNames[i] << " at " << b.t_begin_ns);
      CHECK(b.min[i] >= 0);
    }
  CHECK(has_note(d, "history starts late: "));

  const nlohmann::json j = summary_json({m});
  std::vector<std::string> neg;
  negatives(j, "", neg);
  INFO("negative figures: " << neg.size() << (neg.empty() ? "" : ", first " + neg.front()));
  CHECK(neg.empty());
  CHECK(j["traces"][0]["devices"][0]["history"] == "late");
  const std::string text = render_summary_text({m});
  CHECK(text.find("The history starts late") != std::string::npos);
  CHECK(text.find("reserved but unallocated -") == std::string::npos);
}

TEST_CASE("a late history: memory of before the first event counts from the start", "[model][history]") {
  // Before the history: segment A (20 MiB) with blocks of 8 MiB and 4 MiB allocated, small
  // segment B (2 MiB) with one 512 B block. The history frees B's block and B, the 4 MiB block,
  // then allocates and releases a segment C of its own.
  const std::uint64_t A = 0x10000000, B = 0x20000000, C = 0x30000000;
  RecordList l;
  l.add(Action::free_requested, B, 100)
      .add(Action::free_completed, B, 100)
      .add(Action::segment_free, B, 2 * MiB)
      .add(Action::free_requested, A + 8 * MiB, 4 * MiB)
      .add(Action::free_completed, A + 8 * MiB, 4 * MiB)
      .add(Action::segment_alloc, C, 20 * MiB)
      .add(Action::alloc, C, 20 * MiB)
      .add(Action::free_requested, C, 20 * MiB)
      .add(Action::free_completed, C, 20 * MiB)
      .add(Action::segment_free, C, 20 * MiB);
  Snapshot end;
  SegmentSnapshot a;
  a.address = A;
  a.total_size = 20 * MiB;
  a.allocated_size = a.active_size = a.requested_size = 8 * MiB;
  a.blocks = {{A, 8 * MiB, 8 * MiB, BlockState::active_allocated}, {A + 8 * MiB, 12 * MiB, 0, BlockState::inactive}};
  end.segments.push_back(a);

  SECTION("with the end state") {
    VectorReader r(l.records);
    r.end_state = end;
    const TraceModel m = build_trace_model(r);
    REQUIRE(m.devices.size() == 1);
    const auto& d = m.devices[0];
    CHECK(d.history == DeviceModel::History::late);
    CHECK(d.frees_before_history == 2);
    CHECK(d.segment_frees_before_history == 1);
    check_end_equals_segments(m, end);
    // At the start 12 MiB + 512 B allocated and 22 MiB reserved; C adds 20 MiB of each.
    CHECK(d.stats.allocated_bytes[kStatAll].peak == 28 * MiB);
    CHECK(d.stats.reserved_bytes[kStatAll].peak == 40 * MiB);
    CHECK(d.stats.allocated_bytes[kStatSmall].peak == 512);
    CHECK(d.stats.reserved_bytes[kStatSmall].peak == 2 * MiB);
    REQUIRE(d.at_peak.captured);
    CHECK(d.at_peak.event_index == 6);
    CHECK(d.at_peak.stats.reserved_bytes[kStatAll].current == 40 * MiB);
    REQUIRE_FALSE(d.timeline.empty());
    CHECK(d.timeline.front().max[0] == 12 * MiB + 512);  // the first event: B's block freed
    CHECK(d.timeline.front().min[0] == 12 * MiB);
    CHECK(d.timeline.back().last[2] == 20 * MiB);
    CHECK(d.lower_bound_until_ns == 5000);  // the last free without its alloc
    REQUIRE(d.at_end.biggest.size() == 1);
    CHECK(d.at_end.biggest[0].before_trace);
    CHECK(has_note(d, "history starts late: 2 frees and 1 segment releases without their allocation"));
    std::vector<std::string> neg;
    negatives(summary_json({m}), "", neg);
    CHECK(neg.empty());
  }
  SECTION("without an end state: what the history freed counts from the start") {
    VectorReader r(l.records);
    const TraceModel m = build_trace_model(r);
    const auto& d = m.devices[0];
    CHECK(d.history == DeviceModel::History::late);
    // The 8 MiB block alive at the end is invisible without an end state.
    CHECK(d.stats.allocated_bytes[kStatAll].peak == 20 * MiB);
    CHECK(d.stats.reserved_bytes[kStatAll].peak == 20 * MiB);
    CHECK(d.stats.allocated_bytes[kStatAll].current == 0);
    CHECK(d.stats.reserved_bytes[kStatAll].current == 0);
    CHECK(d.timeline.front().max[0] == 4 * MiB + 512);
    CHECK(has_note(d, "history starts late: "));
  }
}

TEST_CASE("a complete history keeps its figures and gets no note", "[model][snapshot][history][real]") {
  const TraceModel m = model_of(std::string(VRAMTRACE_TEST_DATA_DIR) + "/torch-h200/encoder_varlen.snapshot.pickle");
  REQUIRE(m.devices.size() == 1);
  CHECK(m.devices[0].history == DeviceModel::History::complete);
  CHECK(m.devices[0].notes.empty());
  check_end_equals_segments(
      m, end_state_of(std::string(VRAMTRACE_TEST_DATA_DIR) + "/torch-h200/encoder_varlen.snapshot.pickle"));
  CHECK(summary_json({m})["traces"][0]["devices"][0].count("history") == 0);
}
