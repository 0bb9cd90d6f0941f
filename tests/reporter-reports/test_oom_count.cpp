// Note [one OOM per failed request] (reporter/model/oom_count.h): the failed attempts of one request
// grouped in the shim's traces, every entry an OOM in PyTorch's, and OOMs the trace records without
// an entry counted from the header, the recorded statistics and the observer's figures.
#include <catch2/catch.hpp>

#include "analyses/oom/oom_report.h"
#include "analyses/summary.h"
#include "model/trace_model.h"
#include "vector_reader.h"

using namespace vramtrace;
using vramtrace::testing::VectorReader;

namespace {

constexpr std::uint64_t MiB = 1ull << 20;

// Records of one thread (or several) as the shim writes them: allocs, frees, segment events and
// failures, with increasing times.
struct ShimRecords {
  std::vector<TraceRecord> records;
  std::uint64_t next_addr = 0x7f0000000000;
  TraceRecord& push(Action a, std::uint64_t size, std::uint32_t thread, std::uint32_t entry = 1) {
    TraceRecord r;
    r.action = a;
    r.size = size;
    r.thread_id = thread;
    r.entry_point = entry;
    r.time_ns = static_cast<std::int64_t>(records.size() + 1) * 1000;
    records.push_back(r);
    return records.back();
  }
  // A cudaMalloc that succeeds: a new segment and the block in it.
  std::uint64_t alloc(std::uint64_t size, std::uint32_t thread = 7) {
    const std::uint64_t a = next_addr;
    next_addr += size + 2 * MiB;
    push(Action::segment_alloc, size, thread).addr = a;
    push(Action::alloc, size, thread).addr = a;
    return a;
  }
  void free(std::uint64_t addr, std::uint64_t size, std::uint32_t thread = 7) {
    push(Action::free_requested, size, thread).addr = addr;
    push(Action::free_completed, size, thread).addr = addr;
  }
  void fail(std::uint64_t size, std::uint32_t thread = 7, std::uint32_t entry = 1) {
    push(Action::oom, size, thread, entry).device_free = 1 * MiB;
  }
};

TraceModel model_of(const std::vector<TraceRecord>& records, TraceHeader h) {
  VectorReader r(records, std::move(h));
  return build_trace_model(r);
}

TraceHeader shim_header() {
  TraceHeader h;
  h.format = "vramtrace";
  h.path = "t.jsonl";
  h.device_total_bytes = 64 * MiB;
  return h;
}

TraceHeader torch_header() {
  TraceHeader h;
  h.format = "torchtrace";
  h.path = "t.torchtrace.jsonl";
  h.device_total_bytes = 64 * MiB;
  return h;
}

}  // namespace

TEST_CASE("shim trace: failures PyTorch survived are retries, the final double failure one OOM", "[oom_count][shim]") {
  // PyTorch on the shim under a cap: a request fails, PyTorch frees its cached segments and calls
  // cudaMalloc again with the same size, which succeeds (twice); then a request fails, PyTorch
  // releases its cache, the same call fails again, and it raises OutOfMemoryError.
  ShimRecords s;
  const auto a = s.alloc(20 * MiB);
  const auto b = s.alloc(20 * MiB);
  s.fail(30 * MiB);  // survived: b is released, then 30 MiB fits
  s.free(b, 20 * MiB);
  s.alloc(30 * MiB);
  s.fail(10 * MiB);  // survived without anything freed between (another thread freed)
  s.free(a, 20 * MiB, 9);
  s.alloc(10 * MiB);
  s.fail(40 * MiB);  // the final request: two failures, then the error
  s.fail(40 * MiB);
  const TraceModel m = model_of(s.records, shim_header());
  REQUIRE(m.devices.size() == 1);
  const DeviceModel& d = m.devices[0];
  const OomCount& c = d.oom_count;
  CHECK(c.entries == 4);
  CHECK(c.ooms == 1);
  REQUIRE(c.retries);
  CHECK(*c.retries == 3);
  CHECK(c.survived == 2);
  CHECK(c.repeated == 1);
  CHECK(c.without_entry.empty());
  REQUIRE(d.ooms.size() == 4);
  CHECK(d.ooms[0].fate == OomFate::survived);
  CHECK(d.ooms[1].fate == OomFate::survived);
  CHECK(d.ooms[2].fate == OomFate::repeated);
  CHECK(d.ooms[3].fate == OomFate::oom);
  CHECK(d.ooms[3].attempts == 2);
  CHECK(d.ooms[3].attempt == 2);
  CHECK(d.stats.num_ooms == 4);  // the traced allocator's failures, as its trailer counts them

  // The post-mortems are the OOM only, with its attempts and the retries so far.
  const auto cases = oom_cases(m);
  REQUIRE(cases.size() == 1);
  CHECK(cases[0].attempts == 2);
  REQUIRE(cases[0].retries);
  CHECK(*cases[0].retries == 3);
  CHECK(cases[0].event_index == d.ooms[3].event_index);
  CHECK(retried_failures(m).size() == 3);
  // The timeline marks one OOM; the retried failures are ticks.
  int oom_markers = 0, retry_markers = 0;
  for (const auto& mk : d.markers) {
    oom_markers += mk.kind == "oom";
    retry_markers += mk.kind == "retry";
  }
  CHECK(oom_markers == 1);
  CHECK(retry_markers == 3);

  const std::string line = oom_count_text(c);
  CHECK(line.find("OOMs 1, cudaMalloc retries 3") == 0);
  CHECK(line.find("2 the program survived") != std::string::npos);
  CHECK(line.find("1 it tried again before the error") != std::string::npos);
  const std::string table = memory_summary_table(d);
  CHECK(table.find("CUDA OOMs: 1 ") != std::string::npos);
  CHECK(table.find("cudaMalloc retries: 3 ") != std::string::npos);
}

TEST_CASE("shim trace: a plain CUDA program's single failed cudaMalloc is one OOM", "[oom_count][shim]") {
  ShimRecords s;
  s.alloc(40 * MiB);
  s.fail(30 * MiB);
  s.alloc(1 * MiB);  // the program goes on with something else
  const TraceModel m = model_of(s.records, shim_header());
  const OomCount& c = m.devices.at(0).oom_count;
  CHECK(c.ooms == 1);
  REQUIRE(c.retries);
  CHECK(*c.retries == 0);
  // ... and at the end of the trace too (the program died of it).
  ShimRecords t;
  t.alloc(40 * MiB);
  t.fail(30 * MiB);
  const TraceModel died = model_of(t.records, shim_header());
  CHECK(died.devices.at(0).oom_count.ooms == 1);
  CHECK(*died.devices.at(0).oom_count.retries == 0);
}

TEST_CASE("shim trace: requests are grouped per thread, size and entry point", "[oom_count][shim]") {
  ShimRecords s;
  s.fail(30 * MiB, 1);
  s.fail(50 * MiB, 2);  // another thread's request between the first thread's attempts
  s.fail(30 * MiB, 1);
  s.alloc(30 * MiB, 1);  // thread 1 survived after two failures
  s.alloc(8 * MiB, 2);   // thread 2 moved on: its error reached it
  s.fail(20 * MiB, 1, 1);
  s.fail(20 * MiB, 1, 2);  // the same size through another entry point: another call, another OOM
  const TraceModel m = model_of(s.records, shim_header());
  const OomCount& c = m.devices.at(0).oom_count;
  CHECK(c.entries == 5);
  CHECK(c.ooms == 3);
  CHECK(c.survived == 2);
  CHECK(c.repeated == 0);
  CHECK(*c.retries == 2);
}

TEST_CASE("shim trace: the exact request forwarded past the cache settles a failure as survived", "[oom_count][shim]") {
  // Note [no spurious OOM]: the allocator's OOM, then the request forwarded as device memory.
  ShimRecords s;
  s.fail(6 * MiB);
  TraceRecord& fwd = s.push(Action::segment_alloc, 6 * MiB, 7);
  fwd.addr = 0x1000;
  fwd.memory_kind = static_cast<std::uint8_t>(MemoryKind::device);
  const TraceModel m = model_of(s.records, shim_header());
  const OomCount& c = m.devices.at(0).oom_count;
  CHECK(c.ooms == 0);
  CHECK(c.survived == 1);
  CHECK(oom_cases(m).empty());
}

TEST_CASE("PyTorch's history: every oom entry is an OOM, retries unknown unless recorded", "[oom_count][torch]") {
  ShimRecords s;  // the same records in PyTorch's format: no grouping
  s.alloc(20 * MiB, 0);
  s.fail(30 * MiB, 0);
  s.fail(30 * MiB, 0);  // a program that caught the first and tried again
  s.alloc(30 * MiB, 0);
  const TraceModel m = model_of(s.records, torch_header());
  const OomCount& c = m.devices.at(0).oom_count;
  CHECK(c.ooms == 2);
  CHECK_FALSE(c.retries);  // unknown, never 0
  CHECK(oom_count_text(c).find("cudaMalloc retries unknown") != std::string::npos);
  CHECK(memory_summary_table(m.devices.at(0)).find("cudaMalloc retries: unknown") != std::string::npos);
  CHECK(oom_cases(m).size() == 2);

  TraceHeader h = torch_header();
  h.recorded_stats = {{"num_ooms", 2}, {"num_alloc_retries", 1}};
  const TraceModel r = model_of(s.records, h);
  CHECK(r.devices.at(0).oom_count.ooms == 2);
  REQUIRE(r.devices.at(0).oom_count.retries);
  CHECK(*r.devices.at(0).oom_count.retries == 1);
  CHECK(r.devices.at(0).oom_count.without_entry.empty());
}

TEST_CASE("PyTorch's history without the oom entry: num_ooms and the message count it", "[oom_count][torch]") {
  ShimRecords s;
  s.alloc(20 * MiB, 0);
  s.alloc(30 * MiB, 0);  // the run died after this; the history holds no oom entry
  TraceHeader h = torch_header();
  h.recorded_stats = {{"num_ooms", 1}, {"num_alloc_retries", 1}};
  RecordedOom msg;
  msg.message =
      "CUDA out of memory. Tried to allocate 44.00 MiB. GPU 0 has a total capacity of 139.80 GiB of which 124.00 GiB "
      "is free. Including non-PyTorch memory, this process has 15.31 GiB memory in use. 14.58 GiB allowed; Of the "
      "allocated memory 14.56 GiB is allocated by PyTorch, and 12.76 MiB is reserved by PyTorch but unallocated.";
  h.recorded_ooms.push_back(msg);
  const TraceModel m = model_of(s.records, h);
  const OomCount& c = m.devices.at(0).oom_count;
  CHECK(c.entries == 0);
  CHECK(c.ooms == 1);
  REQUIRE(c.without_entry.size() == 1);
  CHECK(c.without_entry[0].source == "the message in the header");
  CHECK(*c.retries == 1);
  const auto cases = oom_cases(m);
  REQUIRE(cases.size() == 1);
  CHECK(cases[0].without_entry != nullptr);
  CHECK(cases[0].state == nullptr);
  REQUIRE(cases[0].figures.request);
  CHECK(*cases[0].figures.request == 44 * MiB);  // read from the message
  REQUIRE(cases[0].figures.allowed);
  CHECK(cases[0].diagnosis.code == DiagnosisCode::capacity);
  const std::string text = render_oom_text(m, cases, WhatIfRun{});
  CHECK(text.find("No OOM") == std::string::npos);
  CHECK(text.find("OOM 1 on device 0: not in the history (known from the message in the header)") != std::string::npos);
  CHECK(text.find("its moment and the allocator's state at it were not recorded") != std::string::npos);
  CHECK(text.find("message: CUDA out of memory. Tried to allocate 44.00 MiB") != std::string::npos);
  CHECK(text.find("Diagnosis: capacity") != std::string::npos);

  // num_ooms alone (no message): counted, nothing else known.
  TraceHeader only = torch_header();
  only.recorded_stats = {{"num_ooms", 1}};
  const TraceModel n = model_of(s.records, only);
  REQUIRE(n.devices.at(0).oom_count.without_entry.size() == 1);
  CHECK(n.devices.at(0).oom_count.without_entry[0].source == "num_ooms in the recorded statistics");
  CHECK_FALSE(n.devices.at(0).oom_count.without_entry[0].recorded);
  CHECK_FALSE(n.devices.at(0).oom_count.retries);
  const std::string summary = render_summary_text({n});
  CHECK(summary.find("OOMs 1 (1 without an oom entry in the history, known from num_ooms in the recorded "
                     "statistics: the state at the failure was not recorded), cudaMalloc retries unknown") !=
        std::string::npos);
  CHECK(summary.find("no oom entry for 1 of them (counted in the OOMs)") != std::string::npos);
  CHECK(summary.find("DIFFERENT") == std::string::npos);
}

TEST_CASE("PyTorch's history: an observer's OOM with an entry counts once, one without is added",
          "[oom_count][torch]") {
  ShimRecords s;
  s.alloc(20 * MiB, 0);
  s.fail(30 * MiB, 0);  // at 3 us
  TraceHeader h = torch_header();
  RecordedOom seen;  // the observer, right after that entry
  seen.time_ns = 3000 + 2'000'000;
  seen.alloc_bytes = 30 * MiB;
  seen.device_free_bytes = 1 * MiB;
  seen.allowed_bytes = 48 * MiB;
  seen.stats = {{"allocated_bytes.all.current", 20 * static_cast<std::int64_t>(MiB)},
                {"reserved_bytes.all.current", 20 * static_cast<std::int64_t>(MiB)},
                {"num_alloc_retries", 1},
                {"num_ooms", 1}};
  h.recorded_ooms.push_back(seen);
  const TraceModel one = model_of(s.records, h);
  CHECK(one.devices.at(0).oom_count.ooms == 1);
  CHECK(one.devices.at(0).oom_count.without_entry.empty());
  CHECK(*one.devices.at(0).oom_count.retries == 1);  // at its last OOM, as PyTorch recorded it

  RecordedOom later = seen;  // a second OOM an hour later, its entry lost
  later.time_ns = 3'600'000'000'000;
  h.recorded_ooms.push_back(later);
  const TraceModel two = model_of(s.records, h);
  const OomCount& c = two.devices.at(0).oom_count;
  CHECK(c.ooms == 2);
  REQUIRE(c.without_entry.size() == 1);
  CHECK(c.without_entry[0].source == "PyTorch's OOM observer (the sidecar)");
  const auto cases = oom_cases(two);
  REQUIRE(cases.size() == 2);
  const OomCase& w = cases[1];
  REQUIRE(w.without_entry);
  CHECK(*w.figures.request == 30 * MiB);
  CHECK(*w.figures.allowed == 48 * MiB);
  CHECK(*w.figures.reserved == 20 * MiB);
  CHECK(w.diagnosis.code == DiagnosisCode::capacity);  // 20 MiB reserved + 30 MiB > 48 MiB allowed
}

TEST_CASE("a device that ran out of memory exists without events", "[oom_count][torch]") {
  TraceHeader h = torch_header();
  h.recorded_stats = {{"num_ooms", 1}};
  const TraceModel m = model_of({}, h);
  REQUIRE(m.devices.size() == 1);
  CHECK(m.devices[0].oom_count.ooms == 1);
  CHECK(oom_cases(m).size() == 1);
}
