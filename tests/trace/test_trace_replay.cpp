// Our trace as input to the reports: a real PyTorch run (tests/data/torch-h200) written through
// the trace writer, opened with the generic open_trace and replayed, reproduces the statistics
// its trailer recorded. The CPU-side counterpart of the GPU check that a traced PyTorch run
// replays to its own trailer (`scripts/gpu-check.sh trace`).
#include <catch2/catch.hpp>
#include <optional>

#include "analyses/replay.h"
#include "trace_test_util.h"

using namespace vramtrace;
using namespace vramtrace::trace;
using vramtrace::test::ScratchDir;

namespace {

std::int64_t stat_of(const std::vector<std::pair<std::string, std::int64_t>>& stats, const std::string& key) {
  for (const auto& [k, v] : stats)
    if (k == key) return v;
  FAIL("statistic " << key << " missing");
  return -1;
}

// Writes the PyTorch trace `name` as the shim would have recorded it, with PyTorch's final
// statistics as the trailer's; returns the path.
// With `pass_through`, memory the shim passes through untouched is interleaved as the shim traces
// it: segment events whose Event::aux is the memory kind (5 = pinned host, 2 = managed).
std::string rewrite_as_vramtrace(const std::string& name, const ScratchDir& dir,
                                 std::vector<std::pair<std::string, std::int64_t>>& torch_stats,
                                 bool pass_through = false) {
  auto torch = open_trace(std::string(VRAMTRACE_TEST_DATA_DIR) + "/torch-h200/" + name + ".torchtrace.jsonl.gz");
  torch_stats = torch->header().recorded_stats;
  TraceWriterOptions o;
  o.output_pattern = dir.file(name + (pass_through ? ".pass" : "") + ".%p.jsonl.zst");
  o.header.tool_version = "test";
  o.header.devices.push_back({0, "NVIDIA H200", 150109880320ull, ""});
  TraceWriter w(o);
  REQUIRE(w.start());
  TraceRecord r;
  std::uint64_t n = 0;
  // PyTorch's Unix-epoch times moved onto the writer's clock (CLOCK_MONOTONIC), as the shim
  // stamps its events: the reader refuses a time years from the header's origin.
  const std::uint64_t now = TraceWriter::now_ns();
  std::optional<std::int64_t> first;
  const auto on_writer_clock = [&](std::int64_t t) {
    if (!first) first = t;
    return now + static_cast<std::uint64_t>(t - *first);
  };
  while (torch->next(r)) {
    if (pass_through && n++ % 500 == 0) {
      Event p{};
      p.action = n % 1000 == 1 ? Action::segment_alloc : Action::segment_free;
      p.addr = 0x10000000ull + (n / 1000) * 0x400000ull;
      p.size_bytes = p.block_bytes = 4 * 1024 * 1024;
      p.aux = n % 2000 == 1 ? 5 : 2;  // pinned host, managed
      p.time_ns = on_writer_clock(r.time_ns);
      w.record(p);
    }
    Event e{};
    e.action = r.action;
    e.addr = r.addr;
    e.size_bytes = r.size;
    e.block_bytes = r.size;
    e.stream = r.stream;
    e.device = r.device;
    e.time_ns = on_writer_clock(r.time_ns);
    e.thread_id = 1234;
    e.entry_point = 1;
    w.record(e);
  }
  w.close({torch_stats});
  return w.path();
}

}  // namespace

TEST_CASE("a vramtrace trace of a real run replays to its recorded statistics", "[trace][replay]") {
  ScratchDir dir;
  // Passed-through memory (pinned host, managed) in the trace must not drive the allocator: on
  // the GPU, a pinned host buffer among the segments made the replay lose PyTorch's addresses.
  for (bool pass_through : {false, true})
    for (std::string name : {"gpt2_train", "resnet50_train"}) {
      INFO(name << (pass_through ? " with passed-through memory" : ""));
      std::vector<std::pair<std::string, std::int64_t>> torch_stats;
      std::string path = rewrite_as_vramtrace(name, dir, torch_stats, pass_through);
      auto reader = open_trace(path);  // format detection: must dispatch to our reader
      REQUIRE(reader->header().format == "vramtrace");
      ReplayConfig config;
      config.capacity_bytes = reader->header().device_total_bytes;
      REQUIRE(config.capacity_bytes == 150109880320ull);
      ReplayReport rep = replay(*reader, {config});
      CHECK_FALSE(rep.incomplete);
      REQUIRE(rep.results.size() == 1);
      // zstd: the trailer's statistics are known once the reader has reached the end.
      const auto& recorded = reader->header().recorded_stats;
      REQUIRE(recorded == torch_stats);
      const DeviceStats& st = rep.results[0].stats;
      CHECK(st.allocated_bytes[kStatAll].peak == stat_of(recorded, "allocated_bytes.all.peak"));
      CHECK(st.reserved_bytes[kStatAll].peak == stat_of(recorded, "reserved_bytes.all.peak"));
      CHECK(st.requested_bytes[kStatAll].peak == stat_of(recorded, "requested_bytes.all.peak"));
      CHECK(st.num_device_alloc == stat_of(recorded, "num_device_alloc"));
      CHECK(st.num_ooms == 0);
    }
}
