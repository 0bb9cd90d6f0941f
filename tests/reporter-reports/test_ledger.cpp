// The memory ledger (reporter/model/ledger.h) of the pair of files a default `vramtrace run` of a
// PyTorch program leaves: the synthetic pair of tests/data/ledger (make_ledger_pair.py tells its
// story), every row at the end, the peak and the OOM; the sidecar read into the snapshot's
// header; a malformed sidecar, a missing companion, another process's trace, misaligned clocks
// (a whole file's, and a segment's release a few milliseconds apart in the two files).
#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <sstream>

#include "analyses/ledger_report.h"
#include "analyses/oom/oom_report.h"
#include "analyses/processes.h"
#include "analyses/summary.h"
#include "model/ledger.h"
#include "model/load_models.h"
#include "readers/sidecar.h"
#include "readers/trace_paths.h"
#include "render/report_html.h"

using namespace vramtrace;
namespace fs = std::filesystem;

namespace {

constexpr std::int64_t MiB = 1ll << 20;
constexpr std::int64_t GiB = 1ll << 30;
constexpr std::int64_t kTotal = 80 * GiB;
constexpr std::int64_t kAllocatedEnd = 8 * MiB + 512 + 10 * MiB;  // t1, t2, t4
constexpr std::int64_t kRequestedEnd = 8 * MiB - 100 + 300 + 10 * MiB;
constexpr std::int64_t kReserved = (20 + 2 + 40 + 40) * MiB;  // A, B, C, D

const fs::path kPair = fs::path(VRAMTRACE_TEST_DATA_DIR) / "ledger";

std::string slurp(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

/// A scratch copy of the pair (the files named in `files`), removed at the end of the test.
struct PairCopy {
  fs::path dir;
  explicit PairCopy(const std::string& tag,
                    const std::vector<std::string>& files = {"run.4242.jsonl", "run.4242.torch.pickle",
                                                             "run.4242.torch.pickle.json"}) {
    dir = fs::temp_directory_path() / ("vt-ledger-" + tag + "-" + std::to_string(::getpid()));
    fs::remove_all(dir);
    fs::create_directories(dir);
    for (const auto& f : files) fs::copy_file(kPair / f, dir / f);
  }
  ~PairCopy() { fs::remove_all(dir); }
  std::string snapshot() const { return (dir / "run.4242.torch.pickle").string(); }
  std::string trace() const { return (dir / "run.4242.jsonl").string(); }
  std::string sidecar() const { return (dir / "run.4242.torch.pickle.json").string(); }
  void write(const std::string& name, const std::string& text) const { std::ofstream(dir / name) << text; }
};

/// The shim trace's lines with the header's `key` set to `value`.
std::string with_header(const std::string& trace, const std::string& key, const nlohmann::json& value) {
  std::istringstream in(trace);
  std::string line, out;
  bool first = true;
  while (std::getline(in, line)) {
    if (first) {
      auto h = nlohmann::json::parse(line);
      h[key] = value;
      line = h.dump();
      first = false;
    }
    out += line + "\n";
  }
  return out;
}

const LedgerAt& moment(const TraceModel& m, std::int32_t device, LedgerAt::Moment kind) {
  REQUIRE(m.ledger);
  const DeviceLedger* dl = m.ledger->device(device);
  REQUIRE(dl);
  const LedgerAt* at = dl->at(kind);
  REQUIRE(at);
  return *at;
}

bool has_note(const std::vector<std::string>& notes, const std::string& part) {
  for (const auto& n : notes)
    if (n.find(part) != std::string::npos) return true;
  return false;
}

/// The rows must add up to the used memory (Note [the ledger adds up]).
void check_adds_up(const LedgerAt& at) {
  REQUIRE(at.used_bytes());
  REQUIRE(at.outside);
  REQUIRE(at.rounding_bytes);
  REQUIRE(at.rest_bytes());
  CHECK(at.allocated_bytes + at.cache_bytes() + static_cast<std::int64_t>(at.outside->total()) +
            static_cast<std::int64_t>(*at.rounding_bytes) + *at.rest_bytes() ==
        *at.used_bytes());
}

}  // namespace

TEST_CASE("ledger: the sidecar names the snapshot's process, devices and PyTorch's statistics", "[ledger]") {
  const SidecarRead read = read_sidecar((kPair / "run.4242.torch.pickle").string());
  REQUIRE(read.problem.empty());
  REQUIRE(read.sidecar);
  CHECK(read.sidecar->pid == 4242);
  CHECK(read.sidecar->written_at_ns == 1796134321'500'000'000);
  CHECK(read.sidecar->final);
  REQUIRE(read.sidecar->devices.size() == 2);
  CHECK(read.sidecar->devices[0].total_bytes == static_cast<std::uint64_t>(kTotal));

  PairCopy pair("header", {"run.4242.torch.pickle", "run.4242.torch.pickle.json"});
  auto models = load_models({pair.snapshot()});
  const TraceModel& m = models.at(0);
  CHECK(m.header.pid == 4242);
  CHECK(m.header.host == "gpu-node-7");
  CHECK(m.header.total_bytes_of(0) == static_cast<std::uint64_t>(kTotal));
  // `vramtrace oom T.torch.pickle` knows the device's capacity now.
  const auto cases = oom_cases(m);
  REQUIRE(cases.size() == 1);
  REQUIRE(cases[0].figures.device_total);
  CHECK(*cases[0].figures.device_total == static_cast<std::uint64_t>(kTotal));
  CHECK_THAT(render_oom_text(m, cases, WhatIfRun{}), !Catch::Contains("not in the trace"));
  // PyTorch's recorded statistics against those computed from the history: all the same.
  const nlohmann::json check = summary_json(models)["traces"][0]["devices"][0]["recorded_check"];
  REQUIRE(check.size() >= 8);
  for (const auto& c : check) {
    INFO(c.dump());
    CHECK(c["same"] == true);
  }
  CHECK(summary_json(models)["traces"][0]["devices"][0]["stats"]["num_alloc_retries"] == 1);
}

TEST_CASE("ledger: every row of the pair at the end, the peak and the OOM", "[ledger]") {
  PairCopy pair("rows");
  std::vector<std::string> notes;
  const auto paths = choose_trace_level({pair.trace()}, TraceLevel::automatic, notes);
  REQUIRE(paths == std::vector<std::string>{pair.snapshot()});
  REQUIRE(notes.size() == 1);
  CHECK_THAT(notes[0], Catch::Contains("tensor level from") && Catch::Contains("memory ledger"));
  CHECK(device_level_companion(pair.snapshot()) == pair.trace());

  auto models = load_models(paths);
  const TraceModel& m = models.at(0);
  REQUIRE(m.ledger);
  CHECK(m.ledger->device_trace == pair.trace());
  CHECK(m.ledger->sidecar == pair.sidecar());
  REQUIRE(m.ledger->devices.size() == 2);

  SECTION("the end: the 64 MiB cudaMalloc was freed after the OOM; pinned host memory is no row") {
    const LedgerAt& e = moment(m, 0, LedgerAt::Moment::end);
    CHECK(e.time_ns == 1796134321'500'000'000);
    CHECK(e.tensor_source == "memory_stats");
    CHECK(e.allocated_bytes == kAllocatedEnd);
    CHECK(e.active_bytes == kAllocatedEnd);
    CHECK(e.requested_bytes == kRequestedEnd);
    CHECK(e.reserved_bytes == kReserved);
    CHECK(e.cache_bytes() == kReserved - kAllocatedEnd);
    REQUIRE(e.outside);
    CHECK(e.outside->device == 0);
    CHECK(e.outside->pitched == static_cast<std::uint64_t>(6 * MiB));
    CHECK(e.outside->pool == 0);
    CHECK(e.outside->virtual_memory == static_cast<std::uint64_t>(20 * MiB));  // the handle not in D
    CHECK(*e.rounding_bytes == static_cast<std::uint64_t>(MiB));               // C's block of 41 MiB
    CHECK(*e.used_bytes() == (500 + 100 + 102 + 26 + 1) * MiB);
    CHECK(e.free_source == "mem_get_info");
    CHECK(*e.rest_bytes() == 600 * MiB);
    REQUIRE(e.context_bytes);
    CHECK(*e.context_bytes == static_cast<std::uint64_t>(500 * MiB));
    check_adds_up(e);
  }
  SECTION("the OOM: the library's 64 MiB is still there") {
    const LedgerAt& o = moment(m, 0, LedgerAt::Moment::oom);
    CHECK(o.oom == 0);
    CHECK(o.oom_in_history);
    CHECK(o.request_bytes == static_cast<std::uint64_t>(90 * GiB));
    CHECK(o.tensor_source == "history");
    CHECK(o.allocated_bytes == kAllocatedEnd);
    CHECK(o.reserved_bytes == kReserved);
    REQUIRE(o.outside);
    CHECK(o.outside->device == static_cast<std::uint64_t>(64 * MiB));
    CHECK(o.outside->total() == static_cast<std::uint64_t>(90 * MiB));
    CHECK(*o.used_bytes() == (500 + 100 + 102 + 90 + 1) * MiB);
    CHECK(o.free_source == "oom");
    CHECK(*o.rest_bytes() == 600 * MiB);
    check_adds_up(o);
    // Segment E: released by PyTorch 5 ms before the OOM, 5 ms after it in the shim's trace. It is
    // known as PyTorch's by its allocation, so it is not counted outside PyTorch's allocator.
    CHECK(has_note(o.notes, "counted in no row"));
  }
  SECTION("the peak: t3 alive, the used memory not read then") {
    const LedgerAt& p = moment(m, 0, LedgerAt::Moment::peak);
    CHECK(p.time_ns == 1796134320'700'000'000);
    CHECK(p.allocated_bytes == kAllocatedEnd + 30 * MiB);
    CHECK(p.reserved_bytes == kReserved + 20 * MiB);  // segment E too
    REQUIRE(p.outside);
    CHECK(p.outside->total() == static_cast<std::uint64_t>(90 * MiB));
    CHECK_FALSE(p.used_bytes());
    CHECK_FALSE(p.rest_bytes());
  }
  SECTION("device 1: a CUDA context and nothing else") {
    const LedgerAt& e = moment(m, 1, LedgerAt::Moment::end);
    CHECK(e.reserved_bytes == 0);
    REQUIRE(e.outside);
    CHECK(e.outside->total() == 0);
    CHECK(*e.rest_bytes() == 500 * MiB);
    CHECK_FALSE(e.context_bytes);  // the shim met no context there (nothing was allocated)
  }
  SECTION("summary, oom and report show it, with stable JSON keys") {
    const std::string text = render_summary_text(models);
    CHECK_THAT(text, Catch::Contains("Memory ledger of device 0 at the end"));
    CHECK_THAT(text, Catch::Contains("device level (the shim's trace " + pair.trace() + ")"));
    CHECK_THAT(text, Catch::Contains("+ rest: CUDA context, driver, other processes") &&
                         Catch::Contains("600.00 MiB") && Catch::Contains("500.00 MiB when vramtrace met the context"));
    CHECK_THAT(text, Catch::Contains("device 1: PyTorch's history holds nothing on this device"));
    const nlohmann::json j = summary_json(models)["traces"][0]["ledger"];
    CHECK(j["device_trace"] == pair.trace());
    const nlohmann::json end = j["devices"][0]["moments"][0];
    CHECK(end["moment"] == "end");
    CHECK(end["outside_bytes"] == 26 * MiB);
    CHECK(end["outside_by_kind"]["virtual_memory"] == 20 * MiB);
    CHECK(end["rest_bytes"] == 600 * MiB);
    CHECK(end["context_bytes"] == 500 * MiB);
    CHECK(end["used_bytes"] == 729 * MiB);
    CHECK(end["not_pytorch_bytes"] == 627 * MiB);
    const auto cases = oom_cases(m);
    const std::string oom = render_oom_text(m, cases, WhatIfRun{});
    CHECK_THAT(oom,
               Catch::Contains("Levels: tensor level") && Catch::Contains("Memory ledger of the device at this OOM"));
    const nlohmann::json oj = oom_json(m, cases, WhatIfRun{});
    CHECK(oj["ooms"][0]["ledger"]["outside_bytes"] == 90 * MiB);
    CHECK(oj["ooms"][0]["ledger"]["rest_bytes"] == 600 * MiB);
    const nlohmann::json data = report_data(models);
    CHECK(data["traces"][0]["ledger"]["devices"][1]["moments"][0]["rest_bytes"] == 500 * MiB);
    CHECK(render_report_html(models).find("ledgerSection") != std::string::npos);
  }
}

TEST_CASE("ledger: the merged view uses each process's ledger and flags a context on another device",
          "[ledger][processes]") {
  PairCopy pair("merged");
  std::vector<TraceModel> models = load_models({pair.snapshot(), pair.snapshot()});
  models[1].header.path = "second";  // two processes alike: their labels differ by path
  const ProcessDeviceView v = process_device_view(models);
  REQUIRE(v.processes.size() == 2);
  CHECK(v.processes[0].own_device == 0);
  CHECK(v.processes[0].foreign_devices == std::vector<std::int32_t>{1});  // its context on device 1
  const std::string text = render_process_device_text(v);
  CHECK_THAT(text, Catch::Contains("Memory ledger at each process's end"));
  CHECK_THAT(text, Catch::Contains("a CUDA context") && Catch::Contains("on device 1"));
  const nlohmann::json j = process_device_json(v);
  bool context_cell = false;
  for (const auto& c : j["cells"]) {
    if (c["process"] != 0) continue;
    if (c["device"] == 0) {
      CHECK(c["ledger_end"]["used_bytes"] == 729 * MiB);
      CHECK(c["ledger_end"]["outside_bytes"] == 26 * MiB);
    }
    if (c["device"] == 1) {
      context_cell = true;
      CHECK(c["context_only"] == true);
      CHECK(c["ledger_end"]["rest_bytes"] == 500 * MiB);
    }
  }
  CHECK(context_cell);
}

TEST_CASE("ledger: a malformed sidecar is a note, never an error or a figure", "[ledger]") {
  const std::string good = slurp(kPair / "run.4242.torch.pickle.json");
  auto edited = [&](const std::function<void(nlohmann::json&)>& f) {
    nlohmann::json j = nlohmann::json::parse(good);
    f(j);
    return j.dump();
  };
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"cut", good.substr(0, good.size() / 2)},
      {"another format", edited([](nlohmann::json& j) { j["format"] = "something else"; })},
      {"a newer version", edited([](nlohmann::json& j) { j["version"] = 2; })},
      {"another pickle", edited([](nlohmann::json& j) { j["snapshot"] = "other.torch.pickle"; })},
      {"free above total", edited([](nlohmann::json& j) {
         j["devices"][0]["mem_get_info"] = {kTotal + 1, kTotal};
       })},
      {"a time that is text", edited([](nlohmann::json& j) { j["written_at"] = "yesterday"; })},
      {"devices not a list", edited([](nlohmann::json& j) { j["devices"] = 3; })},
  };
  for (const auto& [what, text] : bad) {
    INFO(what);
    PairCopy pair("bad", {"run.4242.jsonl", "run.4242.torch.pickle"});
    pair.write("run.4242.torch.pickle.json", text);
    std::vector<TraceModel> models;
    REQUIRE_NOTHROW(models = load_models({pair.snapshot()}));
    const TraceModel& m = models.at(0);
    CHECK(has_note(m.notes, "run.4242.torch.pickle.json: not used"));
    CHECK(m.header.recorded_device_stats.empty());  // nothing of the sidecar
    // The shim's trace still gives the device level, and the process.
    CHECK(m.header.pid == 4242);
    CHECK(m.header.total_bytes_of(0) == static_cast<std::uint64_t>(kTotal));
    const LedgerAt& e = moment(m, 0, LedgerAt::Moment::end);
    CHECK(m.ledger->sidecar.empty());
    CHECK_FALSE(e.used_bytes());  // no reading: no rest, no guess
    CHECK_FALSE(e.rest_bytes());
    CHECK(e.tensor_source == "history");
    REQUIRE(e.outside);  // taken at the history's last event
    CHECK(e.outside->total() == static_cast<std::uint64_t>(90 * MiB));
    CHECK_THAT(render_summary_text(models), Catch::Contains("not used"));
  }
}

TEST_CASE("ledger: without the shim's trace, only what is not PyTorch's", "[ledger]") {
  PairCopy pair("alone", {"run.4242.torch.pickle", "run.4242.torch.pickle.json"});
  CHECK(device_level_companion(pair.snapshot()).empty());
  auto models = load_models({pair.snapshot()});
  const TraceModel& m = models.at(0);
  REQUIRE(m.ledger);
  CHECK(m.ledger->device_trace.empty());
  CHECK(has_note(m.ledger->notes, "no shim trace of this process"));
  const LedgerAt& e = moment(m, 0, LedgerAt::Moment::end);
  CHECK_FALSE(e.outside);
  CHECK_FALSE(e.rest_bytes());
  CHECK_FALSE(e.context_bytes);
  CHECK(*e.not_pytorch_bytes() == 627 * MiB);
  const LedgerAt& o = moment(m, 0, LedgerAt::Moment::oom);
  CHECK(*o.not_pytorch_bytes() == 691 * MiB);
  const std::string text = render_summary_text(models);
  CHECK_THAT(text, Catch::Contains("not PyTorch's: outside + rest together") && Catch::Contains("no device level"));
  CHECK(summary_json(models)["traces"][0]["ledger"]["devices"][0]["moments"][0]["outside_bytes"].is_null());
}

TEST_CASE("ledger: a trace of another process is not the snapshot's device level", "[ledger]") {
  PairCopy pair("other");
  pair.write("run.4242.jsonl", with_header(slurp(kPair / "run.4242.jsonl"), "pid", 999));
  auto models = load_models({pair.snapshot()});
  const TraceModel& m = models.at(0);
  REQUIRE(m.ledger);
  CHECK(m.ledger->device_trace.empty());
  CHECK(has_note(m.ledger->notes, "is of process 999"));
  CHECK_FALSE(moment(m, 0, LedgerAt::Moment::end).outside);
}

TEST_CASE("ledger: misaligned clocks leave the device level out instead of a wrong figure", "[ledger]") {
  for (std::int64_t shift_s : {3600, -3600}) {
    INFO("the shim's start moved by " << shift_s << " s");
    PairCopy pair("clock");
    const std::int64_t start = 1796134320'000'000'000 + shift_s * 1'000'000'000;
    pair.write("run.4242.jsonl", with_header(slurp(kPair / "run.4242.jsonl"), "start_unix_ns", start));
    // The pair is still found by its names, and a same-process check by time would refuse it:
    // that is the ledger's job here, moment by moment.
    auto models = load_models({pair.snapshot()});
    const TraceModel& m = models.at(0);
    REQUIRE(m.ledger);
    CHECK(m.ledger->device_trace == pair.trace());
    for (auto kind : {LedgerAt::Moment::end, LedgerAt::Moment::peak, LedgerAt::Moment::oom}) {
      const LedgerAt& at = moment(m, 0, kind);
      CHECK_FALSE(at.outside);
      CHECK_FALSE(at.rest_bytes());
      CHECK(has_note(at.notes, shift_s > 0 ? "before the shim's trace begins" : "after the shim's trace ended"));
    }
    // What does not depend on the device level stays.
    CHECK(*moment(m, 0, LedgerAt::Moment::end).not_pytorch_bytes() == 627 * MiB);
  }
}

TEST_CASE("ledger: the pair is found by its process when the names differ", "[ledger][paths]") {
  PairCopy pair("names", {"run.4242.torch.pickle", "run.4242.torch.pickle.json"});
  fs::copy_file(kPair / "run.4242.jsonl", pair.dir / "vramtrace.20261201-100000.4242.jsonl");
  const std::string trace = (pair.dir / "vramtrace.20261201-100000.4242.jsonl").string();
  CHECK(tensor_level_companion(trace) == pair.snapshot());
  CHECK(device_level_companion(pair.snapshot()) == trace);
  // Another run's trace with the same pid (a container's pids repeat): not this snapshot's.
  pair.write("vramtrace.20261201-100000.4242.jsonl",
             with_header(slurp(kPair / "run.4242.jsonl"), "start_unix_ns", 1796134320'000'000'000 + 7200'000'000'000));
  CHECK(tensor_level_companion(trace).empty());
  CHECK(device_level_companion(pair.snapshot()).empty());
  CHECK(same_process(7, "h", 100, 0, 7, "h", 50));  // no trailer: the end is open
  CHECK_FALSE(same_process(7, "h", 5'000'000'000, 0, 7, "h", 1'000'000'000));
  CHECK_FALSE(same_process(7, "h", 100, 0, 8, "h", 200));
  CHECK_FALSE(same_process(7, "h", 100, 0, 7, "g", 200));
}

TEST_CASE("ledger: an OOM only PyTorch's observer recorded still gets its ledger", "[ledger][oom]") {
  PairCopy pair("observer", {"run.4242.jsonl", "run.4242.torch.pickle"});
  nlohmann::json j = nlohmann::json::parse(slurp(kPair / "run.4242.torch.pickle.json"));
  nlohmann::json second = j["ooms"][0];
  second["time"] = 1796134321.2;  // after the history's last entry: its ring does not hold it
  second["alloc_bytes"] = 4 * GiB;
  second["device_free"] = kTotal - 729 * MiB;
  j["ooms"].push_back(second);
  pair.write("run.4242.torch.pickle.json", j.dump());
  auto models = load_models({pair.snapshot()});
  const TraceModel& m = models.at(0);
  const DeviceLedger* dl = m.ledger->device(0);
  REQUIRE(dl);
  const LedgerAt* o = dl->at(LedgerAt::Moment::oom, 1);
  REQUIRE(o);
  CHECK_FALSE(o->oom_in_history);
  CHECK(o->request_bytes == static_cast<std::uint64_t>(4 * GiB));
  CHECK(*o->not_pytorch_bytes() == 627 * MiB);
  CHECK_FALSE(o->outside);  // PyTorch's segments then are not known
  const std::string text = render_oom_text(m, oom_cases(m), WhatIfRun{});
  // The observer's OOM is one of the post-mortems, with its ledger under it.
  const auto second_oom =
      text.find("OOM 2 on device 0, +1.000 s: not in the history (known from PyTorch's OOM observer");
  REQUIRE(second_oom != std::string::npos);
  CHECK(text.find("Memory ledger of the device at this OOM:", second_oom) != std::string::npos);
  CHECK_THAT(text, !Catch::Contains("recorded by PyTorch's OOM observer only"));  // not a second time
}
