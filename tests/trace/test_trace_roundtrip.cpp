// Writer -> reader round trips over random event sequences, and what the reader accepts/refuses.
#include <zlib.h>

#include <catch2/catch.hpp>
#include <fstream>

#include "trace_test_util.h"

using namespace vramtrace;
using namespace vramtrace::trace;
using vramtrace::test::ReadBack;
using vramtrace::test::ScratchDir;

namespace {

TraceWriterOptions options_for(const std::string& pattern) {
  TraceWriterOptions o;
  o.output_pattern = pattern;
  o.header.tool_version = "test";
  o.header.cuda_driver_version = 13000;
  o.header.devices.push_back({0, "Simulated GPU", 80ull << 30, ""});
  o.header.allocator_settings = "max_split_size_mb:128";
  o.header.entry_points = {"", "cudaMalloc", "cudaFree", "cudaMallocAsync", "cudaFreeAsync"};
  return o;
}

Snapshot small_snapshot(std::mt19937_64& rng) {
  Snapshot s;
  int n = 1 + static_cast<int>(rng() % 3);
  for (int i = 0; i < n; ++i) {
    SegmentSnapshot seg;
    seg.address = (i + 1) * (1ull << 30);
    seg.total_size = 20ull << 20;
    seg.stream = rng() % 2;
    seg.is_expandable = rng() % 2;
    seg.blocks.push_back({seg.address, 4ull << 20, 4000000, BlockState::active_allocated, true});
    seg.blocks.push_back({seg.address + (4ull << 20), 16ull << 20, 0, BlockState::inactive, rng() % 2 == 0});
    seg.allocated_size = seg.active_size = 4ull << 20;
    seg.requested_size = 4000000;
    s.segments.push_back(seg);
  }
  return s;
}

bool same_snapshot(const Snapshot& a, const Snapshot& b) {
  if (a.segments.size() != b.segments.size()) return false;
  for (std::size_t i = 0; i < a.segments.size(); ++i) {
    const auto& x = a.segments[i];
    const auto& y = b.segments[i];
    if (x.address != y.address || x.total_size != y.total_size || x.allocated_size != y.allocated_size ||
        x.requested_size != y.requested_size || x.stream != y.stream || x.is_expandable != y.is_expandable ||
        x.is_large != y.is_large || x.blocks.size() != y.blocks.size())
      return false;
    for (std::size_t k = 0; k < x.blocks.size(); ++k) {
      const auto& p = x.blocks[k];
      const auto& q = y.blocks[k];
      if (p.address != q.address || p.size != q.size || p.requested_size != q.requested_size || p.state != q.state ||
          p.mapped != q.mapped)
        return false;
    }
  }
  return true;
}

void gzip_file(const std::string& from, const std::string& to) {
  std::string data = vramtrace::test::read_file(from);
  gzFile gz = gzopen(to.c_str(), "wb");
  REQUIRE(gz != nullptr);
  REQUIRE(gzwrite(gz, data.data(), static_cast<unsigned>(data.size())) == static_cast<int>(data.size()));
  gzclose(gz);
}

}  // namespace

TEST_CASE("random event sequences survive writer -> reader unchanged", "[trace][roundtrip]") {
  auto compression = GENERATE(Compression::none, Compression::zstd);
  ScratchDir dir;
  for (std::uint64_t seed = 1; seed <= 4; ++seed) {
    std::mt19937_64 rng(seed);
    std::string name = "t" + std::to_string(seed) + (compression == Compression::zstd ? ".jsonl.zst" : ".jsonl");
    auto opts = options_for(dir.file(name));
    opts.buffer_events = 64 << (seed % 4);  // small rings: producers must wait for the writer
    TraceWriter w(opts);
    REQUIRE(w.start());
    const std::uint64_t base = TraceWriter::now_ns();

    // Expected stream: what was recorded, in order (one thread).
    struct Expect {
      Event e;
      std::string mark;
      bool has_snapshot = false;
      Snapshot snap;
    };
    std::vector<Expect> expect;
    std::vector<std::uint32_t> ids;
    for (int i = 0; i < 5; ++i)
      ids.push_back(w.intern_mark("mark " + std::to_string(i) + (i == 3 ? " \"quoted\" é" : "")));
    const int n = 2000 + static_cast<int>(rng() % 3000);
    for (int i = 0; i < n; ++i) {
      std::uint64_t pick = rng() % 100;
      if (pick == 0) {
        Event e = test::random_event(rng, base);
        e.action = Action::oom;
        e.aux = rng() % (1ull << 36);
        Snapshot s = small_snapshot(rng);
        w.record_oom(e, s);
        expect.push_back({e, "", true, s});
      } else if (pick < 4) {
        std::uint32_t k = static_cast<std::uint32_t>(rng() % ids.size());
        const std::uint64_t before = TraceWriter::now_ns();
        w.mark(ids[k]);
        Event e{};
        e.action = Action::mark;
        e.time_ns = before;  // checked loosely below
        expect.push_back({e, "mark " + std::to_string(k) + (k == 3 ? " \"quoted\" é" : ""), false, {}});
      } else {
        Event e = test::random_event(rng, base);
        w.record(e);
        expect.push_back({e, "", false, {}});
      }
    }
    FlatStats stats = {{"allocated_bytes.all.peak", 123456}, {"reserved_bytes.all.peak", 2097152}};
    w.close({stats});

    std::string path = w.path();
    if (seed == 3 && compression == Compression::none) {
      gzip_file(path, path + ".gz");
      path += ".gz";
    }
    ReadBack rb = test::read_all(path);
    CHECK_FALSE(rb.incomplete);
    REQUIRE(rb.trailer.present);
    CHECK(rb.trailer.events == expect.size());
    CHECK(rb.trailer.dropped == 0);
    REQUIRE(rb.records.size() == expect.size());
    REQUIRE(rb.header.recorded_stats == stats);
    CHECK(rb.details.version == "1.2");
    CHECK(rb.details.pid == getpid());
    CHECK(rb.details.devices.at(0).name == "Simulated GPU");
    CHECK(rb.details.entry_points.at(3) == "cudaMallocAsync");
    CHECK(rb.header.settings == "max_split_size_mb:128");
    std::size_t snap_index = 0;
    std::uint64_t alloc_count = 0;
    for (std::size_t i = 0; i < expect.size(); ++i) {
      const Event& e = expect[i].e;
      const TraceRecord& r = rb.records[i];
      INFO("record " << i << " action " << action_name(e.action));
      REQUIRE(r.action == e.action);
      const std::int64_t t_rel = r.time_ns - rb.details.start_unix_ns;
      if (e.action == Action::mark) {
        CHECK(rb.mark_names[i] == expect[i].mark);
        CHECK(t_rel >= static_cast<std::int64_t>(e.time_ns) - rb.details.origin_monotonic_ns);
        continue;
      }
      if (e.action == Action::alloc) ++alloc_count;
      CHECK(t_rel == static_cast<std::int64_t>(e.time_ns) - rb.details.origin_monotonic_ns);
      if (e.action == Action::oom) {
        CHECK(r.oom_retries == static_cast<std::int64_t>(e.addr));  // an oom's addr is its retry count
      } else {
        CHECK(r.addr == e.addr);
        CHECK(r.oom_retries == -1);
      }
      CHECK(r.size == e.size_bytes);
      CHECK(rb.block_bytes[i] == e.block_bytes);
      CHECK(r.stream == e.stream);
      CHECK(r.device == e.device);
      CHECK(rb.threads[i] == e.thread_id);
      CHECK(rb.entry_points[i] == e.entry_point);
      if (e.action != Action::oom) CHECK(rb.memory_kinds[i] == e.aux);
      if (e.action == Action::oom) {
        CHECK(r.device_free == e.aux);
        REQUIRE(snap_index < rb.snapshots.size());
        CHECK(same_snapshot(rb.snapshots[snap_index++], expect[i].snap));
      }
    }
    CHECK(snap_index == rb.snapshots.size());
    std::uint64_t trailer_allocs = 0;
    for (auto& [name, count] : rb.trailer.counts)
      if (name == "alloc") trailer_allocs = count;
    CHECK(trailer_allocs == alloc_count);
  }
}

TEST_CASE("record_oom has written the oom line when it returns", "[trace][roundtrip]") {
  ScratchDir dir;
  TraceWriter w(options_for(dir.file("oom.jsonl")));
  REQUIRE(w.start());
  std::mt19937_64 rng(7);
  for (int i = 0; i < 100; ++i) w.record(test::random_event(rng, TraceWriter::now_ns()));
  Event e{};
  e.action = Action::oom;
  e.size_bytes = 1ull << 40;
  e.time_ns = TraceWriter::now_ns();
  w.record_oom(e, small_snapshot(rng));
  // No close: the file must already hold 100 events and the oom line with its snapshot.
  std::string text = test::read_file(w.path());
  CHECK(std::count(text.begin(), text.end(), '\n') == 102);
  CHECK(text.find("\"a\":\"oom\"") != std::string::npos);
  CHECK(text.find("\"snapshot\":{\"segments\":[") != std::string::npos);
  w.close();
}

TEST_CASE("a device noted after the header is written as a device record before its events", "[trace][roundtrip]") {
  ScratchDir dir;
  for (Compression compression : {Compression::none, Compression::zstd}) {
    TraceWriterOptions o = options_for(dir.file(compression == Compression::zstd ? "dev.jsonl.zst" : "dev.jsonl"));
    o.compression = compression;
    TraceWriter w(o);
    REQUIRE(w.start());
    Event e{};
    e.action = Action::segment_alloc;
    e.addr = 1ull << 32;
    e.size_bytes = e.block_bytes = 2 << 20;
    e.time_ns = TraceWriter::now_ns();
    w.record(e);
    HeaderInfo again = o.header;
    // With the driver's figures when the shim met the device's first context (format 1.2).
    again.devices.push_back({1, "Second GPU", 32ull << 20, "GPU-2", 20ull << 20, 32ull << 20, 2ull << 20});
    w.set_header_info(again);
    w.set_header_info(again);  // the same device twice: one record
    e.device = 1;
    e.addr = 1ull << 33;
    w.record(e);
    w.close({});
    if (compression == Compression::none) {
      const std::string text = test::read_file(w.path());
      const auto record =
          text.find(R"({"a":"device","id":1,"name":"Second GPU","total_bytes":33554432,"uuid":"GPU-2",)"
                    R"("context_free_bytes":20971520,"context_total_bytes":33554432,"context_held_bytes":2097152})");
      REQUIRE(record != std::string::npos);
      CHECK(text.find(R"("a":"device")", record + 2) == std::string::npos);
      CHECK(record < text.find(R"("d":1)"));
    }
    ReadBack rb = test::read_all(w.path());
    CHECK_FALSE(rb.incomplete);
    CHECK(rb.records.size() == 2);  // the device record is not an event
    REQUIRE(rb.details.devices.size() == 2);
    CHECK(rb.details.devices[1].name == "Second GPU");
    CHECK(rb.details.devices[1].context_free_bytes == 20ull << 20);
    CHECK(rb.details.devices[1].context_total_bytes == 32ull << 20);
    CHECK(rb.details.devices[1].context_held_bytes == 2ull << 20);
    CHECK(rb.details.devices[0].context_free_bytes == 0);  // not measured
    CHECK(rb.header.total_bytes_of(1) == 32ull << 20);
    CHECK(rb.header.total_bytes_of(0) == 80ull << 30);
    CHECK(rb.header.device_total_bytes == 80ull << 30);
  }
}

TEST_CASE("a cut last line and a missing trailer read as an incomplete trace", "[trace][reader]") {
  ScratchDir dir;
  std::string path;
  {
    TraceWriter w(options_for(dir.file("full.jsonl")));
    REQUIRE(w.start());
    std::mt19937_64 rng(3);
    for (int i = 0; i < 50; ++i) w.record(test::random_event(rng, TraceWriter::now_ns()));
    w.close();
    path = w.path();
  }
  std::string text = test::read_file(path);
  // Drop the trailer: complete events, no trailer.
  std::size_t trailer_at = text.rfind("{\"a\":\"trailer\"");
  REQUIRE(trailer_at != std::string::npos);
  std::string no_trailer = text.substr(0, trailer_at);
  std::ofstream(dir.file("no_trailer.jsonl"), std::ios::binary) << no_trailer;
  ReadBack a = test::read_all(dir.file("no_trailer.jsonl"));
  CHECK(a.incomplete);
  CHECK(a.records.size() == 50);
  CHECK_FALSE(a.trailer.present);

  // Cut in the middle of the last event line.
  std::string cut = no_trailer.substr(0, no_trailer.size() - 20);
  std::ofstream(dir.file("cut.jsonl"), std::ios::binary) << cut;
  ReadBack b = test::read_all(dir.file("cut.jsonl"));
  CHECK(b.incomplete);
  CHECK(b.records.size() == 49);

  // The same damage anywhere but the last line is an error naming the line.
  std::string broken = no_trailer;
  std::size_t line3 = 0;
  for (int i = 0; i < 3; ++i) line3 = broken.find('\n', line3) + 1;
  broken.insert(line3 + 5, "#");
  std::ofstream(dir.file("broken.jsonl"), std::ios::binary) << broken;
  try {
    test::read_all(dir.file("broken.jsonl"));
    FAIL("a malformed middle line must be refused");
  } catch (const TraceError& e) {
    CHECK(std::string(e.what()).find("broken.jsonl:4:") != std::string::npos);
  }
}

TEST_CASE("lost events: the dropped ones plus what the trailer counts and the file lacks, in all or by action",
          "[trace][reader][lost]") {
  ScratchDir dir;
  const std::string header =
      R"({"a":"header","format":"vramtrace","version":"1.2","pid":1,"devices":[{"id":0,"name":"GPU",)"
      R"("total_bytes":85899345920}],"allocator_settings":"","settings":{},"entry_points":[""]})"
      "\n";
  const std::string seg = R"({"a":"segment_alloc","t":1,"p":4294967296,"r":2097152})"
                          "\n";
  const std::string alloc = R"({"a":"alloc","t":2,"p":4294967296,"r":512})"
                            "\n";
  auto lost = [&](const std::string& name, const std::string& events, const std::string& trailer_fields) {
    std::ofstream(dir.file(name), std::ios::binary)
        << header << events << R"({"a":"trailer","t":3,)" << trailer_fields << R"(,"devices":[]})"
        << "\n";
    auto reader = open_vramtrace_trace_details(dir.file(name));
    TraceRecord r;
    while (reader->next(r)) {
    }
    CHECK_FALSE(reader->incomplete());
    return reader->lost_events();
  };
  // Everything the trailer counts is there.
  CHECK(lost("whole.jsonl", seg + alloc, R"("events":2,"dropped":0,"counts":{"segment_alloc":1,"alloc":1})") == 0);
  // The header and the trailer alone: 999 written and none held, plus 5 never written.
  CHECK(lost("empty.jsonl", "", R"("events":999,"dropped":5,"counts":{"alloc":999})") == 1004);
  // Dropped events are not among those written: both count.
  CHECK(lost("both.jsonl", seg, R"("events":2,"dropped":5,"counts":{"segment_alloc":1,"alloc":1})") == 6);
  // As many lines as written in all, but of another action than counted.
  CHECK(lost("by_action.jsonl", seg + seg, R"("events":2,"dropped":0,"counts":{"segment_alloc":1,"alloc":1})") == 1);
  // A kind this reader does not know (a newer minor version) is counted by its name.
  const std::string future = R"({"a":"future_kind","t":2})"
                             "\n";
  CHECK(lost("future.jsonl", seg + future, R"("events":3,"dropped":0,"counts":{"segment_alloc":1,"future_kind":2})") ==
        1);
  // Lines beyond the counts are not lost events.
  CHECK(lost("extra.jsonl", seg + alloc + alloc, R"("events":2,"dropped":0,"counts":{"segment_alloc":1,"alloc":1})") ==
        0);
  // A hostile trailer saturates instead of wrapping.
  CHECK(lost("huge.jsonl", "", R"("events":18446744073709551615,"dropped":18446744073709551615,"counts":{})") ==
        UINT64_MAX);
}

TEST_CASE("a newer major format version is refused by name", "[trace][reader]") {
  ScratchDir dir;
  std::ofstream(dir.file("v2.jsonl")) << "{\"a\":\"header\",\"format\":\"vramtrace\",\"version\":\"2.0\"}\n"
                                      << "{\"a\":\"alloc\",\"t\":1,\"p\":1,\"r\":1}\n";
  try {
    open_vramtrace_trace(dir.file("v2.jsonl"));
    FAIL("version 2.0 must be refused");
  } catch (const TraceError& e) {
    std::string msg = e.what();
    CHECK(msg.find("version 2.0") != std::string::npos);
    CHECK(msg.find("newer") != std::string::npos);
  }
  // A newer minor version reads; unknown fields and kinds are skipped.
  std::ofstream(dir.file("v1_9.jsonl")) << "{\"a\":\"header\",\"format\":\"vramtrace\",\"version\":\"1.9\",\"x\":[1]}\n"
                                        << "{\"a\":\"alloc\",\"t\":1,\"p\":4096,\"r\":10,\"zz\":{\"q\":1}}\n"
                                        << "{\"a\":\"gpu_sample\",\"t\":2}\n"
                                        << "{\"a\":\"trailer\",\"events\":2}\n";
  ReadBack rb = test::read_all(dir.file("v1_9.jsonl"));
  REQUIRE(rb.records.size() == 1);
  CHECK(rb.records[0].addr == 4096);
  CHECK_FALSE(rb.incomplete);
  // Not our format at all.
  std::ofstream(dir.file("other.jsonl")) << "{\"action\":\"alloc\"}\n";
  CHECK_THROWS_AS(open_vramtrace_trace(dir.file("other.jsonl")), TraceError);
}

TEST_CASE("start_on_first_event creates the file only when something is recorded", "[trace][roundtrip]") {
  ScratchDir dir;
  {
    auto o = options_for(dir.file("never.jsonl"));
    o.start_on_first_event = true;
    TraceWriter w(o);
    w.close();
  }
  CHECK_FALSE(std::filesystem::exists(dir.file("never.jsonl")));
  auto o = options_for(dir.file("lazy.jsonl"));
  o.start_on_first_event = true;
  TraceWriter w(o);
  CHECK_FALSE(w.enabled());
  HeaderInfo info = o.header;
  info.devices = {{0, "Late GPU", 1ull << 30, "GPU-1234"}};
  info.cuda_runtime_version = 12080;
  w.set_header_info(info);
  w.mark("first");
  CHECK(w.enabled());
  Event e{};
  e.addr = 42;
  e.time_ns = TraceWriter::now_ns();
  w.record(e);
  w.close();
  ReadBack rb = test::read_all(dir.file("lazy.jsonl"));
  REQUIRE(rb.records.size() == 2);
  CHECK(rb.mark_names[0] == "first");
  CHECK(rb.records[1].addr == 42);
  CHECK(rb.details.devices.at(0).name == "Late GPU");
  CHECK(rb.details.devices.at(0).uuid == "GPU-1234");
  CHECK(rb.details.cuda_runtime_version == 12080);
}

namespace {
std::vector<std::string> g_reported;  // what report_failure received
void record_failure(std::string_view message) noexcept { g_reported.emplace_back(message); }
}  // namespace

TEST_CASE("report_failure receives the one failure line, without prefix or newline", "[trace][errors]") {
  ScratchDir dir;
  g_reported.clear();
  auto o = options_for(dir.file("no/such/dir/t.jsonl"));
  o.report_failure = record_failure;
  TraceWriter w(o);
  CHECK_FALSE(w.start());
  Event e{};
  w.record(e);  // tracing is off: no second message
  w.close();
  REQUIRE(g_reported.size() == 1);
  CHECK(g_reported[0].rfind("cannot create the trace file '" + dir.file("no/such/dir/t.jsonl") + "'", 0) == 0);
  CHECK(g_reported[0].find("; tracing is off, the program continues") == g_reported[0].size() - 39);
}
