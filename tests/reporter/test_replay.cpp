// The replay engine on real PyTorch traces (the claim that replay reproduces PyTorch's own run: its
// segment_alloc sequence and its peaks, docs/replay.md) and on small synthetic traces (deferred
// frees, OOMs, errors, the largest free block at the peak).
#include <catch2/catch.hpp>

#include <algorithm>
#include <map>
#include <sstream>

#include "analyses/replay.h"
#include "test_util.h"

using namespace vramtrace;
using vramtrace::test::write_file;

namespace {

std::string trace_path(const std::string& name) {
  return test::data_path("torch-h200/" + name + ".torchtrace.jsonl.gz");
}

ReplayConfig config(const std::string& conf, std::uint64_t capacity) {
  ReplayConfig c;
  std::string err;
  REQUIRE(AllocatorSettings::parse(conf, c.settings, err));
  c.settings.text = conf;
  c.capacity_bytes = capacity;
  return c;
}

ReplayReport run(const std::string& path, const std::vector<ReplayConfig>& configs, bool record = true) {
  auto reader = open_trace(path);
  ReplayOptions opts;
  opts.record_segments = record;
  return replay(*reader, configs, opts);
}

std::int64_t recorded(const ReplayReport& rep, const std::string& name) {
  for (const auto& [k, v] : rep.header.recorded_stats)
    if (k == name) return v;
  FAIL("the trace header has no " << name);
  return -1;
}

/// First place where our segment_alloc sequence departs from PyTorch's, described for the
/// allocator's authors: index, sizes, and the trace's alloc request each was made for.
std::string first_divergence(const std::vector<SegmentAlloc>& theirs, const std::vector<SegmentAlloc>& ours) {
  std::size_t n = std::min(theirs.size(), ours.size());
  for (std::size_t i = 0; i < n; ++i) {
    if (theirs[i].size != ours[i].size || theirs[i].alloc_index != ours[i].alloc_index) {
      std::ostringstream s;
      s << "segment_alloc #" << i << ": PyTorch " << theirs[i].size << " B for alloc #" << theirs[i].alloc_index
        << ", ours " << ours[i].size << " B for alloc #" << ours[i].alloc_index;
      return s.str();
    }
  }
  if (theirs.size() != ours.size()) {
    std::ostringstream s;
    s << "PyTorch made " << theirs.size() << " segment_allocs, we made " << ours.size();
    if (ours.size() > n) s << "; our extra #" << n << ": " << ours[n].size << " B for alloc #" << ours[n].alloc_index;
    if (theirs.size() > n)
      s << "; PyTorch's extra #" << n << ": " << theirs[n].size << " B for alloc #" << theirs[n].alloc_index;
    return s.str();
  }
  return "";
}

}  // namespace

TEST_CASE("Done-when 1: real traces replay to PyTorch's segment_alloc sequence and peaks", "[replay][real]") {
  for (std::string name : {"gpt2_train", "resnet50_train"}) {
    INFO(name);
    ReplayReport rep = run(trace_path(name), {config("", 150109880320ull)});
    REQUIRE(rep.results.size() == 1);
    const ReplayResult& r = rep.results[0];
    CHECK(first_divergence(rep.trace_segment_allocs, r.segment_allocs) == "");
    CHECK(r.stats.allocated_bytes[kStatAll].peak == recorded(rep, "allocated_bytes.all.peak"));
    CHECK(r.stats.reserved_bytes[kStatAll].peak == recorded(rep, "reserved_bytes.all.peak"));
    CHECK(r.stats.requested_bytes[kStatAll].peak == recorded(rep, "requested_bytes.all.peak"));
    CHECK(r.stats.num_device_alloc == recorded(rep, "num_device_alloc"));
    CHECK(r.stats.num_ooms == 0);
    CHECK_FALSE(r.first_oom);
  }
}

TEST_CASE("Done-when 2: expandable segments reserve no more than PyTorch did with them", "[replay][real]") {
  // docs/h200.md: with expandable_segments:True PyTorch's reserved/requested
  // was 1.070 for GPT-2 (three decimals, so the bound allows the rounding). For ResNet-50 no
  // expandable figure was measured; its bound is PyTorch's native peak reserved.
  {
    ReplayReport rep = run(trace_path("gpt2_train"), {config("expandable_segments:True", 150109880320ull)});
    const auto& st = rep.results[0].stats;
    double bound = 1.0705 * double(recorded(rep, "requested_bytes.all.peak"));
    INFO("GPT-2 reserved " << st.reserved_bytes[kStatAll].peak << " bound " << bound);
    CHECK(double(st.reserved_bytes[kStatAll].peak) <= bound);
    CHECK(st.requested_bytes[kStatAll].peak == recorded(rep, "requested_bytes.all.peak"));
  }
  {
    ReplayReport rep = run(trace_path("resnet50_train"), {config("expandable_segments:True", 150109880320ull)});
    const auto& st = rep.results[0].stats;
    CHECK(st.reserved_bytes[kStatAll].peak <= recorded(rep, "reserved_bytes.all.peak"));
  }
}

TEST_CASE("Done-when 3: the snapshot pickle replays to its recorded peaks, in protocols 2 to 5", "[replay][real]") {
  // Peaks from the traces' headers (tests/data/torch-h200/README.md).
  const std::int64_t kPeakAllocated = 1598815744, kPeakReserved = 2000683008;
  std::vector<std::string> paths = {test::data_path("torch-h200/encoder_varlen.snapshot.pickle")};
  for (int p = 2; p <= 5; ++p)
    paths.push_back(test::data_path("pickle/encoder_varlen.proto" + std::to_string(p) + ".pickle.gz"));
  for (const auto& path : paths) {
    INFO(path);
    auto reader = open_trace(path);
    ReplayOptions opts;
    opts.record_segments = true;
    ReplayReport rep = replay(*reader, {config("", 150109880320ull)}, opts);
    const ReplayResult& r = rep.results[0];
    CHECK(r.stats.allocated_bytes[kStatAll].peak == kPeakAllocated);
    CHECK(r.stats.reserved_bytes[kStatAll].peak == kPeakReserved);
    CHECK(first_divergence(rep.trace_segment_allocs, r.segment_allocs) == "");
    // Our final segments have the sizes of the snapshot's segments.
    REQUIRE(reader->final_state());
    std::vector<std::uint64_t> theirs;
    for (const auto& s : reader->final_state()->segments) theirs.push_back(s.total_size);
    std::sort(theirs.begin(), theirs.end());
    CHECK(std::int64_t(theirs.size()) == r.stats.segment[kStatAll].current);
    std::int64_t total = 0;
    for (auto t : theirs) total += std::int64_t(t);
    CHECK(total == r.stats.reserved_bytes[kStatAll].current);
  }
}

namespace {
const char* kHdr = R"({"kind": "header", "workload": "synthetic", "total": 1073741824})";
std::string entry(const char* action, std::uint64_t addr, std::uint64_t size, std::uint64_t stream = 0) {
  return std::string("{\"action\": \"") + action + "\", \"addr\": " + std::to_string(addr) +
         ", \"size\": " + std::to_string(size) + ", \"stream\": " + std::to_string(stream) + "}\n";
}
std::string trace(std::initializer_list<std::string> lines) {
  std::string s = std::string(kHdr) + "\n";
  for (const auto& l : lines) s += l;
  return s;
}
constexpr std::uint64_t MiB = 1u << 20;
}  // namespace

TEST_CASE("replay: deferred frees, several settings in one pass, the largest free block at the peak", "[replay]") {
  auto path =
      write_file("deferred.jsonl",
                 trace({
                     entry("alloc", 0x1000000, 6 * MiB),
                     entry("alloc", 0x2000000, 4 * MiB),
                     entry("free_requested", 0x1000000, 6 * MiB),  // block used by another stream: completes later
                     entry("alloc", 0x3000000, 2 * MiB),
                     entry("free_completed", 0x1000000, 6 * MiB),
                     entry("free_requested", 0x2000000, 4 * MiB),
                     entry("free_completed", 0x2000000, 4 * MiB),
                 }));
  ReplayReport rep = run(path, {config("", 1ull << 30), config("expandable_segments:True", 1ull << 30)});
  CHECK(rep.events == 7);
  CHECK(rep.alloc_requests == 3);
  REQUIRE(rep.results.size() == 2);
  const ReplayResult& r = rep.results[0];
  CHECK(r.config.settings.text == "");
  CHECK(rep.results[1].config.settings.expandable_segments);
  // 6 MiB + 4 MiB in one 20 MiB segment (PyTorch's kLargeBuffer); the 2 MiB alloc cannot use the
  // pending 6 MiB block, so it splits the 10 MiB tail.
  CHECK(r.stats.allocated_bytes[kStatAll].peak == std::int64_t(10 * MiB));
  CHECK(r.stats.reserved_bytes[kStatAll].peak == std::int64_t(20 * MiB));
  CHECK(r.stats.allocated_bytes[kStatAll].current == std::int64_t(2 * MiB));
  CHECK(r.largest_free_at_peak == 10 * MiB);  // the tail of the segment when 10 MiB were allocated
  REQUIRE(rep.trace_segment_allocs.empty());
  REQUIRE(r.segment_allocs.size() == 1);
  CHECK(r.segment_allocs[0] == SegmentAlloc{20 * MiB, 0, 0});
}

TEST_CASE("replay: an OOM is recorded with its place, and the replay goes on", "[replay]") {
  // Capacity 64 MiB: 30 MiB + 30 MiB fit (two 30 MiB segments), the third does not.
  auto path = write_file("oom.jsonl", trace({
                                          entry("alloc", 0x1000000, 30 * MiB),
                                          entry("alloc", 0x3000000, 30 * MiB),
                                          entry("alloc", 0x5000000, 30 * MiB),
                                          entry("alloc", 0x7000000, 1024),
                                          entry("free_requested", 0x5000000, 30 * MiB),
                                          entry("free_completed", 0x5000000, 30 * MiB),
                                          entry("free_requested", 0x1000000, 30 * MiB),
                                          entry("free_completed", 0x1000000, 30 * MiB),
                                          entry("alloc", 0x5000000, 30 * MiB),
                                      }));
  ReplayReport rep = run(path, {config("", 64 * MiB)});
  const ReplayResult& r = rep.results[0];
  REQUIRE(r.first_oom);
  CHECK(r.first_oom->alloc_index == 2);
  CHECK(r.first_oom->requested_bytes == 30 * MiB);
  CHECK(r.first_oom->allocated_bytes == 60 * MiB);
  CHECK(r.first_oom->reserved_bytes == 60 * MiB);
  CHECK(r.stats.num_ooms == 1);
  CHECK(r.failed_allocs == 1);
  CHECK(rep.events == 9);
  // Live at the end: 30 MiB, 1 KiB (its own 2 MiB small segment) and the last 30 MiB, which reuses a freed segment.
  CHECK(r.stats.allocated_bytes[kStatAll].current == std::int64_t(60 * MiB + 1024));
}

TEST_CASE("replay: inconsistent traces are errors naming the line", "[replay]") {
  auto unknown = write_file("unknown.jsonl", trace({entry("alloc", 0x1000, 512), entry("free_requested", 0x2000, 512),
                                                    entry("free_completed", 0x2000, 512)}));
  CHECK_THROWS_WITH(run(unknown, {config("", 1ull << 30)}),
                    Catch::Contains("unknown.jsonl: line 4") && Catch::Contains("0x2000, which no earlier alloc"));
  auto twice = write_file("twice.jsonl", trace({entry("alloc", 0x1000, 512), entry("alloc", 0x1000, 512)}));
  CHECK_THROWS_WITH(run(twice, {config("", 1ull << 30)}),
                    Catch::Contains("line 3: alloc at address 0x1000, which is still allocated"));
  auto lone = write_file("lone.jsonl", trace({entry("free_completed", 0x1000, 512)}));
  CHECK_THROWS_WITH(run(lone, {config("", 1ull << 30)}), Catch::Contains("line 2: free_completed of address 0x1000"));
}

TEST_CASE("replay S4: expandable segments requested but whole segments in the trace is noted", "[replay]") {
  std::string hdr = R"({"kind": "header", "workload": "s4", "conf": "expandable_segments:True", "total": 1073741824})";
  auto path = write_file("s4.jsonl",
                         hdr + "\n" + entry("segment_alloc", 0x1000000, 20 * MiB) + entry("alloc", 0x1000000, 4 * MiB));
  ReplayReport rep = run(path, {config("", 1ull << 30)});
  REQUIRE(rep.notes.size() == 1);
  CHECK_THAT(rep.notes[0], Catch::Contains("expandable segments did not take effect"));
  // With mapped pages in the trace there is nothing to note.
  path = write_file("s4ok.jsonl",
                    hdr + "\n" + entry("segment_map", 0x1000000, 20 * MiB) + entry("alloc", 0x1000000, 4 * MiB));
  CHECK(run(path, {config("", 1ull << 30)}).notes.empty());
}
