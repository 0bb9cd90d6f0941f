// `vramtrace replay` run as a process: output formats, exit codes, messages (docs/replay.md).
#include <catch2/catch.hpp>

#include <sys/wait.h>

#include <cstdlib>
#include <nlohmann/json.hpp>

#include "analyses/oom/verdict.h"
#include "test_util.h"
#include "vramtrace/units.h"

using vramtrace::test::write_file;
namespace test = vramtrace::test;

namespace {

struct Run {
  int code = -1;
  std::string out, err;
};

std::string quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

Run run_cli(const std::string& args) {
  std::string out = test::temp_path("out"), err = test::temp_path("err");
  std::string cmd = std::string(VRAMTRACE_BIN) + " " + args + " >" + quote(out) + " 2>" + quote(err);
  int status = std::system(cmd.c_str());
  Run r;
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.out = test::read_file(out);
  r.err = test::read_file(err);
  return r;
}

std::string gpt2() { return quote(test::data_path("torch-h200/gpt2_train.torchtrace.jsonl.gz")); }

const std::string kHeader = R"({"kind": "header", "workload": "w", "total": 1073741824})";

// Lines of a PyTorch allocator history (torchtrace JSON lines), each with its newline.
std::string line(const std::string& action, std::uint64_t addr, std::uint64_t size) {
  return "{\"action\": \"" + action + "\", \"addr\": " + std::to_string(addr) + ", \"size\": " + std::to_string(size) +
         ", \"stream\": 0}\n";
}
// A segment of `size` bytes at `addr` and one allocation filling it.
std::string held(std::uint64_t addr, std::uint64_t size) {
  return line("segment_alloc", addr, size) + line("alloc", addr, size);
}
// A request of `size` bytes that failed with `device_free` bytes free on the device.
std::string oom_line(std::uint64_t size, std::uint64_t device_free) {
  return "{\"action\": \"oom\", \"size\": " + std::to_string(size) +
         ", \"stream\": 0, \"device_free\": " + std::to_string(device_free) + "}\n";
}

}  // namespace

TEST_CASE("vramtrace replay --json prints the documented object", "[cli]") {
  Run r = run_cli("replay " + gpt2() + " --json");
  REQUIRE(r.code == 0);
  auto j = nlohmann::json::parse(r.out);
  CHECK(j["trace"] == test::data_path("torch-h200/gpt2_train.torchtrace.jsonl.gz"));
  CHECK(j["events"] == 17797);
  REQUIRE(j["results"].size() == 1);
  const auto& res = j["results"][0];
  std::vector<std::string> keys;
  for (auto it = res.begin(); it != res.end(); ++it) keys.push_back(it.key());
  CHECK(keys == std::vector<std::string>{"allowed_bytes",
                                         "bound_bytes",
                                         "capacity_bytes",
                                         "error",
                                         "first_oom",
                                         "fits",
                                         "how_to_get_a_verdict",
                                         "margin_bytes",
                                         "notes",
                                         "ooms",
                                         "partial",
                                         "peak_allocated_bytes",
                                         "peak_reserved_bytes",
                                         "recorded_outcome",
                                         "settings",
                                         "short_beyond_measured_error",
                                         "shortfall_bytes",
                                         "stats",
                                         "verdict",
                                         "withheld"});  // nlohmann sorts
  CHECK(res["verdict"] == "fits");                      // 125 GiB spare on the H200's total
  CHECK(j["capacity_source"] == "the trace's device total");
  CHECK(j["covers"] == "whole_trace");
  CHECK(j["bound_bytes"].get<std::uint64_t>() == vramtrace::whatif_error_bound(150109880320ull));
  CHECK(res["settings"] == "");
  CHECK(res["capacity_bytes"] == 150109880320ull);  // the trace's device total
  CHECK(res["first_oom"].is_null());
  CHECK(res["stats"]["requested_bytes.all.peak"] == 13594206920ll);
  CHECK(res["stats"].contains("num_alloc_retries"));
  CHECK(res["stats"].contains("inactive_split_bytes.all.peak"));
}

TEST_CASE("vramtrace replay: an OOM with --capacity, several --conf side by side", "[cli]") {
  Run r = run_cli("replay " + gpt2() + " --capacity 4GiB --json");
  REQUIRE(r.code == 0);
  auto j = nlohmann::json::parse(r.out);
  const auto& oom = j["results"][0]["first_oom"];
  REQUIRE(oom.is_object());
  CHECK(oom["alloc_index"].get<std::uint64_t>() > 0);
  CHECK(oom["requested_bytes"].get<std::uint64_t>() > 0);
  CHECK(oom["reserved_bytes"].get<std::uint64_t>() <= 4ull << 30);
  CHECK(j["results"][0]["capacity_bytes"] == 4ull << 30);
  CHECK(j["results"][0]["stats"]["num_ooms"].get<int>() >= 1);

  r = run_cli("replay " + gpt2() + " --capacity 4GiB");
  REQUIRE(r.code == 0);
  CHECK_THAT(r.out, Catch::Contains("the program would have stopped at allocation #"));

  r = run_cli("replay " + gpt2() + " --conf '' --conf expandable_segments:True --conf max_split_size_mb:128");
  REQUIRE(r.code == 0);
  CHECK_THAT(r.out, Catch::Contains("(defaults)") && Catch::Contains("expandable_segments:True") &&
                        Catch::Contains("max_split_size_mb:128") && Catch::Contains("largest free block at peak") &&
                        Catch::Contains("reserved / requested"));
}

TEST_CASE("vramtrace replay: unusable input exits 2 with a message naming the file and place", "[cli]") {
  std::string full = test::read_file(test::data_path("torch-h200/gpt2_train.torchtrace.jsonl.gz"));
  auto cut = write_file("cut.jsonl.gz", full.substr(0, full.size() / 2));
  Run r = run_cli("replay " + quote(cut));
  CHECK(r.code == 2);
  CHECK_THAT(r.err, Catch::Contains("cut.jsonl.gz") && Catch::Contains("line ") && Catch::Contains("cut off"));

  auto notjson = write_file(
      "notjson.jsonl", kHeader + "\n" + R"({"action": "alloc", "addr": 4096, "size": 512, "stream": 0})" + "\nhello\n");
  r = run_cli("replay " + quote(notjson));
  CHECK(r.code == 2);
  CHECK_THAT(r.err, Catch::Contains("notjson.jsonl: line 3: not a JSON object"));

  auto unknown =
      write_file("unknown.jsonl",
                 kHeader + "\n" + R"({"action": "free_requested", "addr": 4096, "size": 512, "stream": 0})" + "\n");
  // A free of an address the history never allocated: the history began late (PyTorch's ring
  // wrapped), which is no damage but supports no replay: no verdict, and why.
  r = run_cli("replay " + quote(unknown) + " --json");
  CHECK(r.code == 0);
  CHECK_THAT(r.out, Catch::Contains("the history begins late"));

  auto absurd = write_file(
      "absurd.jsonl",
      kHeader + "\n" + R"({"action": "alloc", "addr": 4096, "size": 99999999999999999999, "stream": 0})" + "\n");
  r = run_cli("replay " + quote(absurd));
  CHECK(r.code == 2);
  CHECK_THAT(r.err, Catch::Contains("absurd.jsonl: line 2"));

  auto evil = write_file("evil.pickle",
                         std::string("\x80\x02\x63\x70\x6f\x73\x69\x78\x0a\x73\x79\x73\x74\x65\x6d\x0a\x71\x00\x58"
                                     "\x02\x00\x00\x00\x6c\x73\x71\x01\x85\x71\x02\x52\x71\x03\x2e",
                                     34));
  r = run_cli("replay " + quote(evil));
  CHECK(r.code == 2);
  CHECK_THAT(r.err, Catch::Contains("evil.pickle: offset 2: opcode GLOBAL") && Catch::Contains("refused"));

  r = run_cli("replay " + gpt2() + " --conf max_split_size_mb:nope");
  CHECK(r.code == 2);
  CHECK_THAT(r.err, Catch::Contains("max_split_size_mb"));
  r = run_cli("replay " + gpt2() + " --conf bogus_key:1");
  CHECK(r.code == 2);
  CHECK_THAT(r.err, Catch::Contains("bogus_key"));
  r = run_cli("replay " + gpt2() + " --capacity 12parsecs");
  CHECK(r.code == 2);
  CHECK_THAT(r.err, Catch::Contains("--capacity: '12parsecs' has an unknown unit"));  // size_check, as every command
  r = run_cli("replay /nonexistent.jsonl");
  CHECK(r.code == 2);
  CHECK_THAT(r.err, Catch::Contains("/nonexistent.jsonl: cannot open"));
  r = run_cli("replay");
  CHECK(r.code == 2);
}

TEST_CASE("vramtrace replay: a card name is a capacity, and every column gets a verdict", "[cli]") {
  std::uint64_t t4 = 0;
  std::string err;
  REQUIRE(vramtrace::parse_size("T4", t4, err));
  Run r = run_cli("replay " + gpt2() + " --capacity T4 --conf '' --conf max_split_size_mb:20 --json");
  REQUIRE(r.code == 0);
  auto j = nlohmann::json::parse(r.out);
  REQUIRE(j["results"].size() == 2);  // the lanes with the bound judge, they are not shown
  for (const auto& res : j["results"]) {
    CHECK(res["capacity_bytes"] == t4);
    CHECK(res["verdict"].is_string());
  }
  CHECK(j["capacity_source"] == "--capacity");
  r = run_cli("replay " + gpt2() + " --capacity t4");
  REQUIRE(r.code == 0);
  CHECK_THAT(r.out, Catch::Contains("capacity  14.58 GiB (--capacity)") && Catch::Contains("verdict "));
  // Without a capacity (a snapshot records none): no verdicts rather than verdicts against 1 TiB.
  auto snap = test::data_path("torch-h200/encoder_varlen.snapshot.pickle");
  r = run_cli("replay " + quote(snap) + " --json");
  REQUIRE(r.code == 0);
  auto s = nlohmann::json::parse(r.out);
  CHECK(s["results"][0]["verdict"].is_null());
  CHECK(s["bound_bytes"].is_null());
}

TEST_CASE("vramtrace replay: a trace that ends at its OOM, and --full", "[cli]") {
  // Two 60 MiB blocks under a 128 MiB device, then a 20 MiB request that failed: the process died.
  const std::string died = kHeader.substr(0, kHeader.size() - 1) + R"(, "cap_gib": 0.125})" + "\n" +
                           held(4294967296, 62914560) + held(8589934592, 62914560) + oom_line(20971520, 900000000);
  auto path = write_file("died.torchtrace.jsonl", died);
  Run r = run_cli("replay " + quote(path) + " --json");
  REQUIRE(r.code == 0);
  auto j = nlohmann::json::parse(r.out);
  CHECK(j["covers"] == "to_failure");
  CHECK(j["capacity_source"] == "PyTorch's memory fraction");
  CHECK(j["results"][0]["capacity_bytes"] == 134217728);
  CHECK(j["results"][0]["first_oom"].is_object());  // the failed request, put back, fails again
  r = run_cli("replay " + quote(path));
  CHECK_THAT(r.out, Catch::Contains("the rest of the run was never recorded") && Catch::Contains("--full"));

  // The same program run to its end elsewhere: the same first allocations, then more.
  const std::string full_text = kHeader + "\n" + line("alloc", 4294967296, 62914560) +
                                line("alloc", 8589934592, 62914560) + line("alloc", 12884901888, 20971520);
  auto full = write_file("full.torchtrace.jsonl", full_text);
  r = run_cli("replay " + quote(path) + " --full " + quote(full) + " --json");
  REQUIRE(r.code == 0);
  j = nlohmann::json::parse(r.out);
  CHECK(j["covers"] == "full_trace");
  CHECK(j["full_trace"] == full);
  CHECK(j["warnings"].empty());
  CHECK(j["results"][0]["capacity_bytes"] == 134217728);  // the failing trace's cap, not the full run's device
  // The trace's own settings ran out of memory on this cap: the recorded outcome, whatever the
  // bound would add (the full run needs 140 MiB, 12 MiB more than the 128 MiB cap).
  CHECK(j["results"][0]["verdict"] == "does_not_fit");
  CHECK(j["results"][0]["recorded_outcome"] == true);
  // A setting whose replay is the same run (expandable segments map the same 60 MiB and 20 MiB, and
  // run out at the same request) shares that outcome, though the bound's 40 MiB would take it.
  r = run_cli("replay " + quote(path) + " --full " + quote(full) + " --conf '' --conf expandable_segments:True --json");
  REQUIRE(r.code == 0);
  j = nlohmann::json::parse(r.out);
  CHECK(j["results"][1]["verdict"] == "does_not_fit");
  CHECK(j["results"][1]["recorded_outcome"] == true);
  CHECK(j["results"][1]["shortfall_bytes"].is_null());
  // Another program as --full is named.
  auto other = write_file("other.torchtrace.jsonl", kHeader + "\n" + line("alloc", 4096, 512));
  r = run_cli("replay " + quote(path) + " --full " + quote(other) + " --json");
  REQUIRE(r.code == 0);
  j = nlohmann::json::parse(r.out);
  REQUIRE(j["warnings"].size() == 1);
  CHECK_THAT(j["warnings"][0].get<std::string>(), Catch::Contains("may not be the same program"));
}

TEST_CASE("vramtrace replay: no verdict when the trace's own settings do not reproduce its OOM", "[cli]") {
  // 800 MiB allocated on a 2 GiB device, then a 100 MiB request failed with 900 MB said to be free:
  // the figures say the allocator could reach 1.6 GiB, so the program could use less than they
  // show (a cap the trace does not record, memory outside the allocator). The replay there runs
  // without the OOM, so "fits" would be a promise the real run broke.
  const std::string died = R"({"kind": "header", "workload": "w", "total": 2147483648})" + std::string("\n") +
                           held(4294967296, 419430400) + held(8589934592, 419430400) + oom_line(104857600, 900000000);
  auto path = write_file("unreproduced.torchtrace.jsonl", died);
  Run r = run_cli("replay " + quote(path) + " --json");
  REQUIRE(r.code == 0);
  auto j = nlohmann::json::parse(r.out);
  CHECK(j["results"][0]["verdict"].is_null());
  REQUIRE(j["withheld"].is_object());
  CHECK_THAT(j["withheld"]["why"].get<std::string>(), Catch::Contains("runs without an OOM"));
  CHECK_THAT(j["withheld"]["how"].get<std::string>(), Catch::Contains("--capacity"));
  r = run_cli("replay " + quote(path));
  CHECK_THAT(r.out, Catch::Contains("NO VERDICT on any setting: the replay of the trace's own settings runs without"));
  CHECK_THAT(r.out, !Catch::Contains("fits ("));
  // With the real limit given, the verdicts come back (and the OOM is reproduced).
  r = run_cli("replay " + quote(path) + " --capacity 850MiB --json");
  REQUIRE(r.code == 0);
  j = nlohmann::json::parse(r.out);
  CHECK(j["results"][0]["verdict"] == "does_not_fit");
  // The figures that do say the device was full give the capacity the allocator reached (800 MiB
  // reserved + 50 MB free): replay and oom both replay on it, and the OOM is reproduced.
  const std::string full_device =
      kHeader + "\n" + held(4294967296, 419430400) + held(8589934592, 419430400) + oom_line(104857600, 50000000);
  path = write_file("reproduced.torchtrace.jsonl", full_device);
  r = run_cli("replay " + quote(path) + " --json");
  REQUIRE(r.code == 0);
  j = nlohmann::json::parse(r.out);
  CHECK_THAT(j["capacity_source"].get<std::string>(), Catch::Contains("reserved + free on the device"));
  CHECK(j["results"][0]["verdict"] == "does_not_fit");
}

TEST_CASE("vramtrace replay: an OOM only the header records (no entry) also needs reproducing", "[cli]") {
  // The run died of an OOM its history holds no entry of (the failed request is not in it): the
  // replay runs without it, and a verdict would be about a run that did not die.
  const Run r = run_cli("replay " + quote(test::data_path("oom/dead_run.torchtrace.jsonl")) + " --json");
  REQUIRE(r.code == 0);
  const auto j = nlohmann::json::parse(r.out);
  CHECK(j["results"][0]["verdict"].is_null());
  REQUIRE(j["withheld"].is_object());
  CHECK_THAT(j["withheld"]["why"].get<std::string>(), Catch::Contains("without an entry in the history"));
}

TEST_CASE("vramtrace replay: a fraction in --conf on a trace replayed on its own cap gives no verdict", "[cli]") {
  // The trace ran under PyTorch's memory fraction (128 MiB of the 1 GiB device): its capacity is
  // that cap. A --conf fraction would cap the device, not the cap: 0.99 of 128 MiB is no program's.
  const std::string capped = kHeader.substr(0, kHeader.size() - 1) + R"(, "cap_gib": 0.125})" + "\n" +
                             held(4294967296, 62914560) + held(8589934592, 62914560) + oom_line(20971520, 900000000);
  const auto path = write_file("capped.torchtrace.jsonl", capped);
  Run r = run_cli("replay " + quote(path) + " --conf per_process_memory_fraction:0.99 --json");
  REQUIRE(r.code == 0);
  auto j = nlohmann::json::parse(r.out);
  CHECK(j["capacity_source"] == "PyTorch's memory fraction");
  CHECK(j["results"][0]["verdict"].is_null());
  CHECK_THAT(j["results"][0]["withheld"].get<std::string>(), Catch::Contains("a cap of a cap"));
  CHECK_THAT(j["results"][0]["how_to_get_a_verdict"].get<std::string>(), Catch::Contains("--capacity 1073741824"));
  // On the device, as the advice says: 0.99 of 1 GiB holds the 140 MiB the run needs, with spare
  // measured below the fraction's allowance. (The trace ends at its OOM, so getting past it is
  // all that is known: no verdict for that reason, not for the fraction.)
  r = run_cli("replay " + quote(path) + " --capacity 1073741824 --conf per_process_memory_fraction:0.99 --json");
  REQUIRE(r.code == 0);
  j = nlohmann::json::parse(r.out);
  CHECK(j["results"][0]["allowed_bytes"] == static_cast<std::uint64_t>(0.99 * 1073741824));
  CHECK(j["results"][0]["margin_bytes"].get<std::uint64_t>() > 800ull << 20);
  CHECK(j["results"][0]["partial"] == true);
  CHECK_THAT(j["results"][0]["withheld"].get<std::string>(), Catch::Contains("ends at its OOM"));
  // Without a fraction, the trace's cap stays the capacity and the setting is judged: expandable
  // segments map the same 60 MiB twice and run out at the same 20 MiB request, the run the trace
  // recorded, so they share its outcome.
  r = run_cli("replay " + quote(path) + " --conf expandable_segments:True --json");
  REQUIRE(r.code == 0);
  j = nlohmann::json::parse(r.out);
  CHECK(j["results"][0]["verdict"] == "does_not_fit");
  CHECK(j["results"][0]["withheld"].is_null());
  CHECK(j["results"][0]["recorded_outcome"] == true);
}

TEST_CASE("vramtrace oom: --capacity takes card names and applies to the diagnosis", "[cli]") {
  // The device had 900 MB free, the trace records no cap: unexplained, until --capacity says 128 MiB.
  const std::string t = kHeader + "\n" + held(4294967296, 125829120) + oom_line(20971520, 900000000);
  auto path = write_file("nocap.torchtrace.jsonl", t);
  Run r = run_cli("oom " + quote(path) + " --json");
  REQUIRE(r.code == 0);
  CHECK(nlohmann::json::parse(r.out)["ooms"][0]["diagnosis"] == "unexplained");
  r = run_cli("oom " + quote(path) + " --capacity 128MiB --json");
  REQUIRE(r.code == 0);
  auto j = nlohmann::json::parse(r.out);
  CHECK(j["ooms"][0]["diagnosis"] == "capacity");
  CHECK(j["ooms"][0]["figures"]["cap_source"] == "--capacity");
  CHECK(j["replays"][0]["verdict"] == "does_not_fit");
  r = run_cli("oom " + quote(path) + " --capacity T4");
  REQUIRE(r.code == 0);
  CHECK_THAT(r.out, Catch::Contains("14.58 GiB (--capacity)"));
  r = run_cli("oom " + quote(path) + " --capacity lots");
  CHECK(r.code == 2);
  r = run_cli("oom " + quote(path) + " --full /nonexistent.jsonl");
  CHECK(r.code == 2);
  CHECK_THAT(r.err, Catch::Contains("/nonexistent.jsonl"));
}
