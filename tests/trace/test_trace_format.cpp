// Encoding details: output names, JSON strings, event lines.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "vramtrace/trace/format.h"
#include "vramtrace/trace/output.h"

using namespace vramtrace;
using namespace vramtrace::trace;

TEST_CASE("output name placeholders expand", "[trace][format]") {
  PathFields f{4242, "node7", "3", 1796015127};  // 2026-11-30 ...
  CHECK(expand_output_path("t.%p.jsonl", f) == "t.4242.jsonl");
  CHECK(expand_output_path("%h-%r-%p", f) == "node7-3-4242");
  CHECK(expand_output_path("100%%-%x-%", f) == "100%-%x-%");
  CHECK(expand_output_path("v.%R%p.jsonl", f) == "v.rank3.4242.jsonl");
  std::string t = expand_output_path("%t", f);
  REQUIRE(t.size() == 15);
  CHECK(t[8] == '-');
  f.rank.clear();
  f.host.clear();
  CHECK(expand_output_path("%h.%r", f) == "localhost.0");
  CHECK(expand_output_path("v.%R%p.jsonl", f) == "v.4242.jsonl");  // no launcher: no rank part
}

TEST_CASE("fork child names get the pid before the extension", "[trace][format]") {
  CHECK(path_with_pid("/a/b/trace.jsonl.zst", 77) == "/a/b/trace-77.jsonl.zst");
  CHECK(path_with_pid("/a.b/trace", 77) == "/a.b/trace-77");
  CHECK(path_with_pid(".hidden.jsonl", 5) == ".hidden-5.jsonl");
}

TEST_CASE("rank comes from the first launcher variable set", "[trace][format]") {
  for (const char* v : {"RANK", "LOCAL_RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID"}) unsetenv(v);
  CHECK(rank_from_environment().empty());
  setenv("SLURM_PROCID", "9", 1);
  CHECK(rank_from_environment() == "9");
  setenv("OMPI_COMM_WORLD_RANK", "5", 1);
  CHECK(rank_from_environment() == "5");
  setenv("RANK", "2", 1);
  CHECK(rank_from_environment() == "2");
  for (const char* v : {"RANK", "OMPI_COMM_WORLD_RANK", "SLURM_PROCID"}) unsetenv(v);
}

TEST_CASE("local rank comes from the first per-host launcher variable set", "[trace][format]") {
  for (const char* v : {"LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID"}) unsetenv(v);
  CHECK(local_rank_from_environment().empty());
  setenv("SLURM_LOCALID", "3", 1);
  CHECK(local_rank_from_environment() == "3");
  setenv("OMPI_COMM_WORLD_LOCAL_RANK", "2", 1);
  CHECK(local_rank_from_environment() == "2");
  setenv("LOCAL_RANK", "1", 1);
  CHECK(local_rank_from_environment() == "1");
  for (const char* v : {"LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID"}) unsetenv(v);
}

TEST_CASE("JSON strings stay valid JSON for any bytes", "[trace][format]") {
  const std::string nasty =
      std::string("a\"b\\c\n\t\x01") + "\xc3\xa9" + "\xff\xfe" + "\xe2\x82" + std::string(1, '\0') + "z";
  TextBuffer out;
  append_json_string(out, nasty);
  auto j = nlohmann::json::parse(out.view());
  std::string back = j.get<std::string>();
  // Valid UTF-8 and ASCII survive; invalid bytes come back as the Latin-1 character of the byte.
  CHECK(back.substr(0, 8) == std::string("a\"b\\c\n\t\x01"));
  CHECK(back.substr(8, 2) == "\xc3\xa9");
  CHECK(back.substr(10, 4) == "\xc3\xbf\xc3\xbe");
  CHECK(back.back() == 'z');
}

TEST_CASE("event lines omit default fields and parse as documented", "[trace][format]") {
  Event e{};
  e.action = Action::alloc;
  e.time_ns = 1'000'123;
  e.addr = 139637976727552;
  e.size_bytes = 1000;
  e.block_bytes = 1024;
  e.thread_id = 4711;
  e.entry_point = 1;
  TextBuffer out;
  encode_event(out, e, 1'000'000);
  CHECK(out.view() == "{\"a\":\"alloc\",\"t\":123,\"p\":139637976727552,\"r\":1000,\"b\":1024,\"th\":4711,\"e\":1}\n");

  out.clear();
  e.block_bytes = 1000;
  e.device = 2;
  e.stream = 94000000000000;
  e.thread_id = 0;
  e.entry_point = 0;
  e.action = Action::free_completed;
  e.time_ns = 10;
  encode_event(out, e, 1'000'000);
  CHECK(out.view() ==
        "{\"a\":\"free_completed\",\"t\":-999990,\"d\":2,\"s\":94000000000000,\"p\":139637976727552,\"r\":1000}\n");

  out.clear();
  Event m{};
  m.action = Action::mark;
  m.time_ns = 5;
  m.thread_id = 3;
  encode_event(out, m, 0, "step \"1\"");
  CHECK(out.view() == "{\"a\":\"mark\",\"t\":5,\"th\":3,\"name\":\"step \\\"1\\\"\"}\n");
}

TEST_CASE("snapshot uses PyTorch's key names", "[trace][format]") {
  Snapshot s;
  SegmentSnapshot seg;
  seg.device = 0;
  seg.address = 4096;
  seg.total_size = 2097152;
  seg.allocated_size = 512;
  seg.active_size = 512;
  seg.requested_size = 500;
  seg.is_large = false;
  seg.blocks.push_back({4096, 512, 500, BlockState::active_allocated, true});
  seg.blocks.push_back({4608, 2096640, 0, BlockState::inactive, true});
  s.segments.push_back(seg);
  TextBuffer out;
  encode_snapshot(out, s);
  auto j = nlohmann::json::parse(out.view());
  REQUIRE(j["segments"].size() == 1);
  CHECK(j["segments"][0]["segment_type"] == "small");
  CHECK(j["segments"][0]["total_size"] == 2097152);
  CHECK(j["segments"][0]["blocks"][0]["state"] == "active_allocated");
  CHECK(j["segments"][0]["blocks"][1]["size"] == 2096640);
}

TEST_CASE("header and trailer are single JSON lines", "[trace][format]") {
  HeaderFields h;
  h.info.tool_version = "0.1.0";
  h.info.devices.push_back({0, "NVIDIA H200", 150754820096, ""});
  h.info.settings.push_back({"reuse", "lazy_sync"});
  h.command_line = {"python3", "train.py", "--lr=1e-3"};
  h.pid = 10;
  h.compression = "none";
  TextBuffer out;
  encode_header(out, h);
  REQUIRE(out.view().back() == '\n');
  REQUIRE(out.view().find('\n') == out.size() - 1);
  auto j = nlohmann::json::parse(out.view());
  CHECK(j["a"] == "header");
  CHECK(j["format"] == "vramtrace");
  CHECK(j["version"] == "1.2");
  CHECK(j["devices"][0]["total_bytes"] == 150754820096ull);
  CHECK_FALSE(j["devices"][0].contains("context_free_bytes"));  // not measured: left out
  CHECK(j["command_line"][2] == "--lr=1e-3");
  CHECK(j["settings"]["reuse"] == "lazy_sync");
  CHECK(j["local_rank"] == "");
  CHECK_FALSE(j.contains("cuda_visible_devices"));  // written only when set
  h.local_rank = "1";
  h.cuda_visible_devices = "2,3";
  out.clear();
  encode_header(out, h);
  auto jr = nlohmann::json::parse(out.view());
  CHECK(jr["local_rank"] == "1");
  CHECK(jr["cuda_visible_devices"] == "2,3");

  TrailerFields t;
  t.events = 3;
  t.counts[static_cast<int>(Action::alloc)] = 2;
  t.counts[static_cast<int>(Action::mark)] = 1;
  t.device_stats.resize(2);
  t.device_stats[1] = {{"allocated_bytes.all.peak", 42}};
  out.clear();
  encode_trailer(out, t);
  auto k = nlohmann::json::parse(out.view());
  CHECK(k["counts"]["alloc"] == 2);
  CHECK(k["counts"]["mark"] == 1);
  REQUIRE(k["devices"].size() == 1);
  CHECK(k["devices"][0]["device"] == 1);
  CHECK(k["devices"][0]["stats"]["allocated_bytes.all.peak"] == 42);
}

TEST_CASE("integers are written exactly at every digit-count boundary", "[trace][format]") {
  std::vector<std::uint64_t> values = {0, 18446744073709551615ull, 9223372036854775808ull};
  for (std::uint64_t p = 1; p <= 10000000000000000000ull; p *= 10) {
    values.push_back(p - 1);
    values.push_back(p);
    values.push_back(p + 1);
    if (p > 1844674407370955161ull) break;
  }
  for (std::uint64_t v : values) {
    Event e{};
    e.action = Action::alloc;
    e.addr = v;
    e.size_bytes = v;
    e.block_bytes = v / 3;
    TextBuffer out;
    encode_event(out, e, 0);
    auto j = nlohmann::json::parse(out.view());
    INFO(out.view());
    CHECK(j["p"].get<std::uint64_t>() == v);
    CHECK(j.value("b", j["r"].get<std::uint64_t>()) == v / 3);  // "b" absent when equal to "r"
    CHECK(out.view().find("\"p\":" + std::to_string(v) + ",") != std::string_view::npos);
  }
  for (std::int64_t origin : {std::int64_t{1}, std::int64_t{100000000}, std::int64_t{9223372036854775807}}) {
    Event e{};
    e.time_ns = 0;
    TextBuffer out;
    encode_event(out, e, origin);
    CHECK(nlohmann::json::parse(out.view())["t"].get<std::int64_t>() == -origin);
  }
}
