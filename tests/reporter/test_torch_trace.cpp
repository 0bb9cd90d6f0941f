// The reader of PyTorch's allocator history as JSON lines, and open_trace's format detection.
#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include "readers/open_trace.h"
#include "test_util.h"
#include "vramtrace/trace/byte_source.h"

using namespace vramtrace;
using vramtrace::test::write_file;

namespace {

std::string trace_path(const std::string& name) {
  return test::data_path("torch-h200/" + name + ".torchtrace.jsonl.gz");
}

std::string error_of(const std::string& path) {
  try {
    auto r = open_trace(path);
    TraceRecord rec;
    while (r->next(rec)) {
    }
  } catch (const TraceError& e) {
    return e.what();
  }
  return "";
}

const std::string kHeader =
    R"({"kind": "header", "workload": "w", "conf": "expandable_segments:True", "stats": {"num_device_alloc": 3}, "total": 1000})";

}  // namespace

TEST_CASE("torchtrace: every entry of the real traces matches an independent JSON parse", "[torch_trace]") {
  for (std::string name : {"gpt2_train", "resnet50_train"}) {
    auto reader = open_trace(trace_path(name));
    const TraceHeader& h = reader->header();
    CHECK(h.format == "torchtrace");
    CHECK(h.workload == name);
    CHECK(h.device_total_bytes == 150109880320ull);

    // Independent parse with nlohmann::json of the same decompressed lines.
    auto lines = LineSource::open(trace_path(name));
    std::string_view line;
    REQUIRE(lines->next_line(line));
    auto header = nlohmann::json::parse(line);
    for (const auto& [k, v] : header["stats"].items()) {
      auto it =
          std::find_if(h.recorded_stats.begin(), h.recorded_stats.end(), [&](const auto& p) { return p.first == k; });
      REQUIRE(it != h.recorded_stats.end());
      CHECK(it->second == v.get<std::int64_t>());
    }
    std::size_t n = 0;
    TraceRecord r;
    while (lines->next_line(line)) {
      auto j = nlohmann::json::parse(line);
      REQUIRE(reader->next(r));
      ++n;
      REQUIRE(action_name(r.action) == j["action"].get<std::string>());
      REQUIRE(r.addr == j["addr"].get<std::uint64_t>());
      REQUIRE(r.size == j["size"].get<std::uint64_t>());
      REQUIRE(r.stream == j["stream"].get<std::uint64_t>());
      REQUIRE(r.time_ns == j["time_us"].get<std::int64_t>() * 1000);
    }
    CHECK_FALSE(reader->next(r));
    CHECK(n > 10000);
    CHECK_FALSE(reader->incomplete());
    CHECK(reader->position() == "line " + std::to_string(n + 1));
  }
}

TEST_CASE("torchtrace: header fields and a headerless file", "[torch_trace]") {
  auto path =
      write_file("h.jsonl", kHeader + "\n" +
                                R"({"action": "alloc", "addr": 4096, "size": 512, "stream": 7, "time_us": 3})" + "\n");
  auto r = open_trace(path);
  CHECK(r->header().settings == "expandable_segments:True");
  CHECK(r->header().device_total_bytes == 1000);
  REQUIRE(r->header().recorded_stats.size() == 1);
  TraceRecord rec;
  REQUIRE(r->next(rec));
  CHECK(rec.action == Action::alloc);
  CHECK(rec.stream == 7);
  CHECK(rec.time_ns == 3000);

  auto bare = write_file("bare.jsonl",
                         "\n"
                         R"({"size": 512, "action": "segment_alloc", "addr": 8192, "stream": 0})"
                         "\n"
                         R"({"action": "oom", "size": 1024, "device_free": 77, "stream": 0})"
                         "\n");
  r = open_trace(bare);
  CHECK(r->header().workload.empty());
  REQUIRE(r->next(rec));
  CHECK(rec.action == Action::segment_alloc);
  CHECK(rec.addr == 8192);
  REQUIRE(r->next(rec));
  CHECK(rec.action == Action::oom);
  CHECK(rec.device_free == 77);
  CHECK_FALSE(r->next(rec));
}

TEST_CASE("torchtrace: malformed lines give the file, the line and what is wrong", "[torch_trace]") {
  const std::string ok = R"({"action": "alloc", "addr": 4096, "size": 512, "stream": 0, "time_us": 1})";
  auto with_line3 = [&](const std::string& bad) {
    return write_file("bad.jsonl", kHeader + "\n" + ok + "\n" + bad + "\n" + ok + "\n");
  };

  std::string e = error_of(with_line3("this is not json"));
  CHECK_THAT(e, Catch::Contains("bad.jsonl: line 3: not a JSON object"));
  e = error_of(with_line3(R"({"action": "alloc", "addr": 4096, "size": 512, "stream": 0} trailing)"));
  CHECK_THAT(e, Catch::Contains("line 3: not JSON"));
  e = error_of(with_line3(R"({"action": "alloc", "addr": 4096, "size": oops})"));
  CHECK_THAT(e, Catch::Contains("line 3:"));
  e = error_of(with_line3(R"({"action": "alloc", "addr": 4096, "stream": 0})"));
  CHECK_THAT(e, Catch::Contains("line 3: \"alloc\" entry without \"size\""));
  e = error_of(with_line3(R"({"action": "alloc", "addr": -5, "size": 512})"));
  CHECK_THAT(e, Catch::Contains("line 3: field \"addr\": expected an unsigned integer"));
  e = error_of(with_line3(R"({"action": "explode", "addr": 1, "size": 512})"));
  CHECK_THAT(e, Catch::Contains("line 3: unknown action \"explode\""));
  e = error_of(with_line3(R"({"action": "alloc", "addr": 4096, "size": 4611686018427387904})"));
  CHECK_THAT(e, Catch::Contains("line 3: absurd size 4611686018427387904 bytes"));
  e = error_of(with_line3(R"([1, 2, 3])"));
  CHECK_THAT(e, Catch::Contains("line 3: not a JSON object"));

  // A last line cut mid-way (the writer died) is no error: the trace ends before it, incomplete, as
  // a vramtrace trace does, and says why.
  const std::string cut = write_file("cut.jsonl", kHeader + "\n" + ok + "\n" + R"({"action": "alloc", "addr": 40)");
  CHECK(error_of(cut).empty());
  auto r = open_trace(cut);
  TraceRecord rec;
  int records = 0;
  while (r->next(rec)) ++records;
  CHECK(records == 1);
  CHECK(r->incomplete());
  CHECK_THAT(r->incomplete_reason(), Catch::Contains("cut mid-way"));
}

TEST_CASE("torchtrace: a truncated gzip file is an error naming the place", "[torch_trace]") {
  std::string full = test::read_file(trace_path("gpt2_train"));
  auto path = write_file("cut.jsonl.gz", full.substr(0, full.size() * 2 / 3));
  std::string e = error_of(path);
  CHECK_THAT(e, Catch::Contains("cut.jsonl.gz") && (Catch::Contains("cut off") || Catch::Contains("truncated")));
  CHECK_THAT(e, Catch::Contains("line "));
}

namespace {
std::unique_ptr<TraceReader> open_test_format(const std::string& path) {
  throw TraceError("test format opener called for " + path);
}
}  // namespace

TEST_CASE("open_trace: format detection and the format registry", "[torch_trace]") {
  register_trace_format("testfmt", &open_test_format);
  auto p = write_file("fmt.jsonl", R"({"format": "testfmt", "version": 1})"
                                   "\n");
  CHECK_THAT(error_of(p), Catch::Contains("test format opener called for " + p));

  p = write_file("nosuch.jsonl", R"({"format": "nosuch"})"
                                 "\n");
  CHECK_THAT(error_of(p), Catch::Contains("line 1: trace format \"nosuch\" is not supported by this build"));

  p = write_file("garbage.bin", "\x01\x02garbage\n");
  CHECK_THAT(error_of(p), Catch::Contains("garbage.bin: line 1: not a known trace format"));
  p = write_file("other.json", R"({"hello": 1})"
                               "\n");
  CHECK_THAT(error_of(p), Catch::Contains("not a known trace format"));
  p = write_file("empty", "");
  CHECK_THAT(error_of(p), Catch::Contains("empty file"));

  // Compressed JSON lines are detected after decompression.
  p = write_file("z.jsonl.zst", test::zstd(kHeader + "\n"));
  auto r = open_trace(p);
  CHECK(r->header().format == "torchtrace");
}

TEST_CASE("torchtrace: the fast path and the full JSON parser read every shape alike", "[torch_trace]") {
  // Lines the fast path takes, and lines it hands to simdjson (arrays, escapes, odd spacing).
  auto path = write_file(
      "shapes.jsonl",
      kHeader + "\n" +
          R"({"action":"alloc","addr":4096,"size":512,"stream":3,"time_us":7})"
          "\n"
          R"(  { "size" : 512 , "addr" : 8192 , "action" : "alloc" }  )"
          "\n"
          R"({"action": "alloc", "addr": 12288, "size": 512, "frames": [{"name": "f", "line": 3}], "stream": 1})"
          "\n"
          R"({"action": "alloc", "addr": 16384, "size": 512, "user_metadata": "a\"b", "compile_context": "N/A"})"
          "\n"
          R"({"action": "alloc", "addr": 20480, "size": 512, "flag": true, "ratio": 0.5, "neg": -1})"
          "\n");
  auto r = open_trace(path);
  TraceRecord rec;
  std::vector<std::uint64_t> addrs, streams;
  while (r->next(rec)) {
    CHECK(rec.action == Action::alloc);
    CHECK(rec.size == 512);
    addrs.push_back(rec.addr);
    streams.push_back(rec.stream);
  }
  CHECK(addrs == std::vector<std::uint64_t>{4096, 8192, 12288, 16384, 20480});
  CHECK(streams == std::vector<std::uint64_t>{3, 0, 1, 0, 0});
}
