// The process x device view of several traces (processes.h), on synthetic traces: case C10 of
// docs/cases.md with its exact figures, each own-device rule, labels, the report's data and
// the expansion of trace arguments (trace_paths.h).
#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "analyses/oom/oom_report.h"
#include "analyses/processes.h"
#include "model/load_models.h"
#include "readers/open_trace.h"
#include "readers/trace_paths.h"
#include "render/report_html.h"
#include "vector_reader.h"

using namespace vramtrace;
using vramtrace::testing::RecordList;
using vramtrace::testing::VectorReader;

namespace {

constexpr std::uint64_t MiB = 1ull << 20;

struct Holding {
  std::int32_t device;
  std::uint64_t bytes;
};

/// One process's trace: for each holding a segment of exactly `bytes` and one block filling it
/// (all live together), then everything freed. Times start at `t0_ns`.
TraceModel process(TraceHeader h, const std::vector<Holding>& holdings, std::int64_t t0_ns = 0) {
  RecordList l;
  DevicePtr addr = 0x7f0000000000ull;
  for (const auto& x : holdings) {
    l.add(Action::segment_alloc, addr, x.bytes, 0, x.device);
    l.add(Action::alloc, addr, x.bytes, 0, x.device);
    addr += 1ull << 36;
  }
  addr = 0x7f0000000000ull;
  for (const auto& x : holdings) {
    l.add(Action::free_requested, addr, x.bytes, 0, x.device);
    l.add(Action::free_completed, addr, x.bytes, 0, x.device);
    addr += 1ull << 36;
  }
  for (auto& r : l.records) r.time_ns += t0_ns;
  if (h.format.empty()) h.format = "vramtrace";
  VectorReader reader(l.records, h);
  return build_trace_model(reader);
}

TraceHeader header(const std::string& path, std::int64_t pid, const std::string& rank, const std::string& local_rank,
                   const std::string& host = "node1") {
  TraceHeader h;
  h.path = path;
  h.pid = pid;
  h.rank = rank;
  h.local_rank = local_rank;
  h.host = host;
  return h;
}

/// Case C10: 4 processes, process r allocates 2.9 GiB (2970 MiB) on device r; processes 1 to 3
/// also about 1387 MiB on device 0.
std::vector<TraceModel> case_c10() {
  std::vector<TraceModel> m;
  for (int r = 0; r < 4; ++r) {
    std::vector<Holding> h = {{r, 2970 * MiB}};
    if (r > 0) h.push_back({0, 1387 * MiB});
    m.push_back(process(header("rank" + std::to_string(r) + ".jsonl", 1000 + r, std::to_string(r), std::to_string(r)),
                        h, r * 500));
  }
  return m;
}

const ProcessDeviceCell* cell(const ProcessDeviceView& v, std::size_t p, std::int32_t d) {
  for (const auto& c : v.cells)
    if (c.process == p && c.device == d) return &c;
  return nullptr;
}

}  // namespace

TEST_CASE("case C10: the process x device table, every cross-device process flagged, device 0 at 2.4x", "[processes]") {
  auto models = case_c10();
  ProcessDeviceView v = process_device_view(models);
  REQUIRE(v.processes.size() == 4);
  REQUIRE(v.devices.size() == 4);
  for (int r = 0; r < 4; ++r) {
    const auto& p = v.processes[static_cast<std::size_t>(r)];
    CHECK(p.label == "rank " + std::to_string(r));
    REQUIRE(p.own_device);
    CHECK(*p.own_device == r);
    CHECK(p.own_device_rule == "LOCAL_RANK");
    const auto* own = cell(v, static_cast<std::size_t>(r), r);
    REQUIRE(own);
    CHECK(own->peak_allocated == static_cast<std::int64_t>(2970 * MiB));
    CHECK(own->peak_reserved == static_cast<std::int64_t>(2970 * MiB));
    if (r == 0) {
      CHECK(p.foreign_devices.empty());
    } else {
      CHECK(p.foreign_devices == std::vector<std::int32_t>{0});
      const auto* d0 = cell(v, static_cast<std::size_t>(r), 0);
      REQUIRE(d0);
      CHECK(d0->peak_reserved == static_cast<std::int64_t>(1387 * MiB));
    }
  }
  CHECK(v.devices[0].peak_reserved_sum == static_cast<std::int64_t>((2970 + 3 * 1387) * MiB));
  CHECK(v.devices[0].processes == 4);
  for (int d = 1; d < 4; ++d)
    CHECK(v.devices[static_cast<std::size_t>(d)].peak_reserved_sum == static_cast<std::int64_t>(2970 * MiB));
  REQUIRE(v.imbalance);
  CHECK(*v.imbalance == Approx(7131.0 / 2970.0));
  CHECK(v.most_loaded == 0);
  CHECK(v.least_loaded == 1);
  CHECK(v.others_equal);

  std::string text = render_process_device_text(v);
  CHECK(text.find("Imbalance: device 0 holds 2.4x the others (6.96 GiB reserved vs 2.90 GiB on each other device).") !=
        std::string::npos);
  CHECK(text.find("3 of 4 processes hold memory on a device other than their own:") != std::string::npos);
  CHECK(text.find("  rank 1: 1.35 GiB reserved on device 0 (its own device is device 1, from LOCAL_RANK=1)") !=
        std::string::npos);
  CHECK(text.find("  rank 0:") == std::string::npos);
  // The table row of rank 2: nothing on device 1, its cross-device cell starred.
  INFO(text);
  CHECK(text.find("  rank 2             2  1.35 GiB / 1.35 GiB *                    -  2.90 GiB / 2.90 GiB") !=
        std::string::npos);

  auto j = process_device_json(v);
  CHECK(j["cross_device"] == nlohmann::json::array({"rank 1", "rank 2", "rank 3"}));
  CHECK(j["imbalance"]["most_loaded"] == 0);
  CHECK(j["devices"][0]["reserved_bytes.all.peak"] == (2970 + 3 * 1387) * MiB);
  CHECK(j["processes"][0]["cross_device"] == false);
  CHECK(j["processes"][3]["foreign_devices"] == nlohmann::json::array({0}));
}

TEST_CASE("C10 timelines: one band per process on each device, stacked to the device's total", "[processes]") {
  auto models = case_c10();
  ProcessDeviceView v = process_device_view(models);
  auto tl = process_device_timelines_json(models, v);
  REQUIRE(tl.size() == 4);
  CHECK(tl[0]["device"] == 0);
  REQUIRE(tl[0]["bands"].size() == 4);
  CHECK(tl[1]["bands"].size() == 1);
  // The processes start 0.5 us apart, one event a microsecond: process 0 holds its 2970 MiB on
  // device 0 from 1 to 4 us, process r > 0 its 1387 MiB from 3 + r/2 to 8 + r/2 us. The axis's
  // intervals are (lo, hi]: process 0's band ends at 4 us and process 2's begins there, so the most
  // at once is process 0 with process 1, from 3.5 to 4 us; the bands never add up to all four.
  const auto& t = tl[0]["t"];
  std::int64_t best = 0;
  for (std::size_t i = 0; i < t.size(); ++i) {
    std::int64_t sum = 0;
    for (const auto& b : tl[0]["bands"]) sum += b["reserved"][i].get<std::int64_t>();
    best = std::max(best, sum);
  }
  CHECK(best == static_cast<std::int64_t>((2970 + 1387) * MiB));
  // Times are relative to the earliest event of any trace.
  CHECK(t[0].get<double>() == Approx(0.0));
}

TEST_CASE("timelines: a process that has ended holds nothing, however coarse the axis", "[processes]") {
  // Two runs one after another on device 0, 10 s apart, each with many events: an axis of 10
  // points put most of them inside the runs, and one interval spanned the first run's end and
  // the idle 10 s, holding its memory all along.
  std::vector<Holding> many(60, Holding{0, 64 * MiB});
  std::vector<TraceModel> m = {process(header("a.jsonl", 1, "", ""), many),
                               process(header("b.jsonl", 2, "", ""), many, 10'000'000'000)};
  ProcessDeviceView v = process_device_view(m);
  auto tl = process_device_timelines_json(m, v, 10);
  REQUIRE(tl.size() == 1);
  const auto& t = tl[0]["t"];
  const auto& bands = tl[0]["bands"];
  REQUIRE(bands.size() == 2);
  const auto& atl = m[0].devices[0].timeline;  // the axis counts from the earliest event
  const double a_end_ms = static_cast<double>(atl.back().t_end_ns - atl.front().t_begin_ns) / 1e6;
  // Wherever the first run's band holds memory, the interval ends by the run's end.
  std::size_t held = 0;
  for (std::size_t i = 0; i < t.size(); ++i) {
    if (bands[0]["reserved"][i] == 0) continue;
    ++held;
    INFO("interval " << (i ? t[i - 1].get<double>() : 0.0) << " .. " << t[i].get<double>() << " ms");
    CHECK(t[i].get<double>() <= a_end_ms + 1e-6);
  }
  CHECK(held >= 1);
  // And the second run's band holds nothing before it begins.
  const double b_begin_ms =
      static_cast<double>(m[1].devices[0].timeline.front().t_begin_ns - atl.front().t_begin_ns) / 1e6;
  for (std::size_t i = 1; i < t.size(); ++i) {
    if (bands[1]["reserved"][i] == 0) continue;
    INFO("interval " << t[i - 1].get<double>() << " .. " << t[i].get<double>() << " ms");
    CHECK(t[i - 1].get<double>() >= b_begin_ms - 1e-6);
  }
}

TEST_CASE("own device: CUDA_VISIBLE_DEVICES, LOCAL_RANK, rank on one host, else where most memory is", "[processes]") {
  SECTION("the classic bug: rank 1 never selected its device, everything landed on device 0") {
    std::vector<TraceModel> m = {process(header("a", 1, "0", "0"), {{0, 100 * MiB}}),
                                 process(header("b", 2, "1", "1"), {{0, 100 * MiB}})};
    auto v = process_device_view(m);
    CHECK(v.processes[0].foreign_devices.empty());
    CHECK(v.processes[1].foreign_devices == std::vector<std::int32_t>{0});
    CHECK_FALSE(v.imbalance);  // one device holds memory
    CHECK(render_process_device_text(v).find("rank 1: 100.00 MiB reserved on device 0") != std::string::npos);
  }
  SECTION("one GPU per process through CUDA_VISIBLE_DEVICES: device 0 of each is a different GPU") {
    auto h0 = header("a", 1, "0", "0");
    auto h1 = header("b", 2, "1", "1");
    h0.cuda_visible_devices = "0";
    h1.cuda_visible_devices = "1";
    std::vector<TraceModel> m = {process(h0, {{0, 100 * MiB}}), process(h1, {{0, 150 * MiB}})};
    auto v = process_device_view(m);
    REQUIRE(v.devices.size() == 2);
    CHECK(v.devices[1].device == 1);
    CHECK(v.processes[1].own_device == 1);
    CHECK(v.processes[1].own_device_rule == "CUDA_VISIBLE_DEVICES");
    CHECK(v.processes[1].foreign_devices.empty());
    CHECK(*v.imbalance == Approx(1.5));
    CHECK(render_process_device_text(v).find("Every process holds memory only on its own device.") !=
          std::string::npos);
    // Equal loads: balanced, and the least loaded device is another one than the most loaded.
    std::vector<TraceModel> even = {process(h0, {{0, 100 * MiB}}), process(h1, {{0, 100 * MiB}})};
    auto e = process_device_view(even);
    REQUIRE(e.imbalance);
    CHECK(*e.imbalance == 1.0);
    CHECK(e.most_loaded == 0);
    CHECK(e.least_loaded == 1);
    CHECK(render_process_device_text(e).find("Balance: the devices hold the same within 5%") != std::string::npos);
  }
  SECTION("a reordered CUDA_VISIBLE_DEVICES maps ordinals to the GPUs it names") {
    auto h = header("a", 1, "", "");
    h.cuda_visible_devices = "3,1";
    auto v = process_device_view({process(h, {{0, 10 * MiB}, {1, 30 * MiB}})});
    REQUIRE(v.devices.size() == 2);
    CHECK(v.devices[0].device == 1);
    CHECK(v.devices[0].peak_reserved_sum == static_cast<std::int64_t>(30 * MiB));
    CHECK(v.devices[1].device == 3);
    CHECK(v.processes[0].own_device == 1);  // most memory
    CHECK(v.processes[0].foreign_devices == std::vector<std::int32_t>{3});
  }
  SECTION("rank without LOCAL_RANK on one host") {
    std::vector<TraceModel> m = {process(header("a", 1, "1", ""), {{0, 10 * MiB}, {1, 5 * MiB}}),
                                 process(header("b", 2, "0", ""), {{0, 5 * MiB}})};
    auto v = process_device_view(m);
    CHECK(v.processes[0].own_device_rule == "RANK");
    CHECK(v.processes[0].foreign_devices == std::vector<std::int32_t>{0});
  }
  SECTION("no launcher: the device with the most memory; several hosts keep their devices apart") {
    std::vector<TraceModel> m = {process(header("a", 1, "", "", "h1"), {{0, 10 * MiB}, {1, 50 * MiB}}),
                                 process(header("b", 1, "", "", "h2"), {{0, 20 * MiB}})};
    auto v = process_device_view(m);
    CHECK(v.processes[0].own_device_rule == "most memory");
    CHECK(v.processes[0].own_device == 1);
    CHECK(v.processes[0].foreign_devices == std::vector<std::int32_t>{0});
    CHECK(v.processes[0].label == "h1 pid 1");
    REQUIRE(v.devices.size() == 3);
    CHECK(v.devices[2].label == "h2 device 0");
    CHECK(v.processes[1].foreign_devices.empty());
  }
  SECTION("same rank twice (a fork child): labels stay unique") {
    std::vector<TraceModel> m = {process(header("a", 7, "0", "0"), {{0, MiB}}),
                                 process(header("b", 8, "0", "0"), {{0, MiB}})};
    auto v = process_device_view(m);
    CHECK(v.processes[0].label == "rank 0 (pid 7)");
    CHECK(v.processes[1].label == "rank 0 (pid 8)");
  }
}

TEST_CASE("processes that ran one after another on a device: a note says their sum was never held", "[processes]") {
  auto has_note = [](const ProcessDeviceView& v) {
    for (const auto& n : v.notes)
      if (n.find("do not overlap in time") != std::string::npos) return n;
    return std::string();
  };
  // Two runs of 3 and 5 MiB on device 0, the second starting 20 s after the first: apart.
  const std::vector<TraceModel> apart = {process(header("a.jsonl", 1, "", ""), {{0, 3 * MiB}}),
                                         process(header("b.jsonl", 2, "", ""), {{0, 5 * MiB}}, 20'000'000'000)};
  const ProcessDeviceView v = process_device_view(apart);
  REQUIRE(v.devices.size() == 1);
  CHECK(v.devices[0].peak_reserved_sum == static_cast<std::int64_t>(8 * MiB));  // the table's sum stays
  const std::string note = has_note(v);
  INFO(note);
  CHECK(note.find("device 0: its 2 processes' traces do not overlap in time (20.0 s or more between one's last "
                  "event and the next one's first)") != std::string::npos);
  CHECK(note.find("never held the sum of their peaks at once; the largest single peak reserved is 5.00 MiB") !=
        std::string::npos);
  CHECK(render_process_device_text(v).find("Note: device 0: its 2 processes' traces do not overlap in time") !=
        std::string::npos);
  // The report's page carries it (processes.js shows the view's notes under its table).
  const nlohmann::json data = report_data(apart);
  REQUIRE(data["processes"]["notes"].size() == 1);
  CHECK(data["processes"]["notes"][0] == note);
  // The ranks of a job: overlapping, or one after another within seconds (short traces whose
  // processes still held their memory after their last event): no such note.
  CHECK(has_note(process_device_view({process(header("a.jsonl", 1, "", ""), {{0, 3 * MiB}}),
                                      process(header("b.jsonl", 2, "", ""), {{0, 5 * MiB}}, 5'000'000'000)}))
            .empty());
  const std::vector<TraceModel> together = {process(header("a.jsonl", 1, "", ""), {{0, 3 * MiB}}),
                                            process(header("b.jsonl", 2, "", ""), {{0, 5 * MiB}}, 2'000)};
  CHECK(has_note(process_device_view(together)).empty());
  // Apart, and on a second device as well: no imbalance of sums that were never held.
  const std::vector<TraceModel> two = {process(header("a.jsonl", 1, "", ""), {{0, 3 * MiB}, {1, MiB}}),
                                       process(header("b.jsonl", 2, "", ""), {{0, 5 * MiB}, {1, MiB}}, 20'000'000'000)};
  const ProcessDeviceView v2 = process_device_view(two);
  CHECK(v2.apart_devices.size() == 2);
  CHECK_FALSE(v2.imbalance);
  CHECK(render_process_device_text(v2).find("Imbalance") == std::string::npos);
  // No claim where a span is not known. A history without times (every time 0):
  auto untimed = [&](std::int64_t t0_ns) {
    RecordList l;
    l.add(Action::segment_alloc, 0x7f0000000000ull, 5 * MiB).add(Action::alloc, 0x7f0000000000ull, 5 * MiB);
    for (auto& r : l.records) r.time_ns = t0_ns;
    TraceHeader h = header("b.jsonl", 2, "", "");
    h.format = "torchtrace";
    VectorReader reader(l.records, h);
    return build_trace_model(reader);
  };
  CHECK(has_note(process_device_view({process(header("a.jsonl", 1, "", ""), {{0, 3 * MiB}}), untimed(0)})).empty());
  // A history that began late (a free of memory from before its first event):
  {
    RecordList l;
    l.add(Action::free_requested, 0x7e0000000000ull, MiB).add(Action::free_completed, 0x7e0000000000ull, MiB);
    l.add(Action::segment_alloc, 0x7f0000000000ull, 5 * MiB);
    for (auto& r : l.records) r.time_ns += 20'000'000'000;
    TraceHeader h = header("b.jsonl", 2, "", "");
    h.format = "vramtrace";
    VectorReader reader(l.records, h);
    const std::vector<TraceModel> late = {process(header("a.jsonl", 1, "", ""), {{0, 3 * MiB}}),
                                          build_trace_model(reader)};
    REQUIRE(late[1].devices[0].history == DeviceModel::History::late);
    CHECK(has_note(process_device_view(late)).empty());
  }
  // Times that go back: its first event stamped far after the rest (the span would be one moment).
  {
    std::vector<TraceModel> odd = {process(header("a.jsonl", 1, "", ""), {{0, 3 * MiB}}),
                                   process(header("b.jsonl", 2, "", ""), {{0, 5 * MiB}})};
    RecordList l;
    l.add(Action::segment_alloc, 0x7f0000000000ull, 5 * MiB).add(Action::alloc, 0x7f0000000000ull, 5 * MiB);
    l.records[0].time_ns = 30'000'000'000;
    TraceHeader h = header("b.jsonl", 2, "", "");
    h.format = "vramtrace";
    VectorReader reader(l.records, h);
    odd[1] = build_trace_model(reader);
    REQUIRE(odd[1].devices[0].times_back == 1);
    CHECK(has_note(process_device_view(odd)).empty());
  }
}

TEST_CASE("report data: the process section only with several traces", "[processes][report]") {
  auto models = case_c10();
  auto j = report_data(models);
  REQUIRE(j.contains("processes"));
  CHECK(j["processes"]["timelines"].size() == 4);
  CHECK(j["processes"]["text"].get<std::string>().find("2.4x") != std::string::npos);
  CHECK(j["title"] == "vramtrace report: rank0.jsonl, rank1.jsonl, rank2.jsonl, rank3.jsonl");
  auto same = header("x.jsonl", 5, "0", "0");
  same.workload = "python3 train.py";
  auto same2 = header("y.jsonl", 6, "1", "1");
  same2.workload = "python3 train.py";
  CHECK(report_data({process(same, {{0, MiB}}), process(same2, {{1, MiB}})})["title"] ==
        "vramtrace report: python3 train.py (2 processes)");
  std::vector<TraceModel> one = {std::move(models.front())};
  CHECK_FALSE(report_data(one).contains("processes"));
}

TEST_CASE("trace arguments: files, globs and directories", "[processes][paths]") {
  namespace fs = std::filesystem;
  fs::path dir = fs::temp_directory_path() / ("vt-paths-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir / "sub");
  for (const char* n : {"b.jsonl", "a.jsonl.zst", "c.pickle", "notes.txt", "report.html", "s.json", "sub/d.jsonl"})
    std::ofstream(dir / n) << "x";
  auto names = [](const std::vector<std::string>& v) {
    std::vector<std::string> out;
    for (const auto& p : v) out.push_back(fs::path(p).filename().string());
    return out;
  };
  CHECK(names(expand_trace_paths({dir.string()})) == std::vector<std::string>{"a.jsonl.zst", "b.jsonl", "c.pickle"});
  TracePathOptions with_json;
  with_json.include_summary_json = true;
  CHECK(names(expand_trace_paths({dir.string()}, with_json)) ==
        std::vector<std::string>{"a.jsonl.zst", "b.jsonl", "c.pickle", "s.json"});
  CHECK(names(expand_trace_paths({(dir / "*.jsonl*").string()})) == std::vector<std::string>{"a.jsonl.zst", "b.jsonl"});
  // A file named twice is read once; order is kept.
  CHECK(names(expand_trace_paths({(dir / "b.jsonl").string(), dir.string()})) ==
        std::vector<std::string>{"b.jsonl", "a.jsonl.zst", "c.pickle"});
  CHECK_THROWS_WITH(expand_trace_paths({(dir / "*.nothing").string()}),
                    Catch::Contains("no file matches this pattern"));
  fs::create_directories(dir / "empty");
  CHECK_THROWS_WITH(expand_trace_paths({(dir / "empty").string()}), Catch::Contains("holds no trace"));
  // A missing plain name is kept: opening it gives the usual error.
  CHECK(expand_trace_paths({"/nonexistent/x.jsonl"}) == std::vector<std::string>{"/nonexistent/x.jsonl"});
  fs::remove_all(dir);
}

TEST_CASE("a device reached after the header: its device record gives its own capacity", "[processes][oom]") {
  // Device 0 (64 MiB) in the header; device 1 (32 MiB, e.g. capped by limit:[0:64MiB,*:32MiB])
  // reached later, then an OOM on device 1. Without the record (format 1.0) device 1's capacity
  // is unknown, never device 0's.
  const std::string dir = std::filesystem::temp_directory_path() / ("vt-devrec-" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  for (bool with_record : {true, false}) {
    INFO((with_record ? "with" : "without") << " the device record");
    const std::string path = dir + (with_record ? "/rec.jsonl" : "/norec.jsonl");
    {
      std::ofstream f(path);
      f << R"({"a":"header","format":"vramtrace","version":"1.1","pid":1,"devices":[{"id":0,"name":"A","total_bytes":67108864}],"allocator_settings":"","settings":{},"entry_points":[""]})"
        << "\n"
        << R"({"a":"segment_alloc","t":1,"d":0,"p":4096000000,"r":20971520})"
        << "\n"
        << R"({"a":"alloc","t":2,"d":0,"p":4096000000,"r":1048576,"b":1048576})"
        << "\n";
      if (with_record)
        f << R"({"a":"device","id":1,"name":"B","total_bytes":33554432})"
          << "\n";
      f << R"({"a":"segment_alloc","t":3,"d":1,"p":8192000000,"r":20971520})"
        << "\n"
        << R"({"a":"alloc","t":4,"d":1,"p":8192000000,"r":20971520})"
        << "\n"
        << R"({"a":"oom","t":5,"d":1,"r":33554432,"b":33554432,"free":12582912})"
        << "\n";
    }
    auto models = load_models({path});
    REQUIRE(models.size() == 1);
    CHECK(models[0].header.total_bytes_of(0) == 64 * MiB);
    bool saw_device1_oom = false;
    for (const OomCase& c : oom_cases(models[0])) {
      if (c.device != 1 || c.last_state) continue;
      saw_device1_oom = true;
      if (with_record) {
        REQUIRE(c.figures.device_total.has_value());
        CHECK(*c.figures.device_total == 32 * MiB);
      } else {
        CHECK_FALSE(c.figures.device_total.has_value());
      }
    }
    CHECK(saw_device1_oom);
    CHECK(models[0].header.device_total_bytes == 64 * MiB);
  }
  std::filesystem::remove_all(dir);
}

TEST_CASE("trace level: a run's tensor-level snapshot is read in place of its shim trace", "[processes][paths]") {
  namespace fs = std::filesystem;
  fs::path dir = fs::temp_directory_path() / ("vt-level-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  auto vt_trace = [&](const std::string& name, int pid) {
    std::ofstream(dir / name) << R"({"a":"header","format":"vramtrace","version":"1.1","pid":)" << pid
                              << R"(,"devices":[],"allocator_settings":"","settings":{},"entry_points":[""]})"
                              << "\n";
  };
  const fs::path snapshot = fs::path(VRAMTRACE_TEST_DATA_DIR) / "torch-h200" / "encoder_varlen.snapshot.pickle";
  vt_trace("t.jsonl", 77);
  fs::copy_file(snapshot, dir / "t.77.torch.pickle");  // the name `vramtrace run -o t.jsonl` gives it
  vt_trace("u.5.jsonl", 5);
  fs::copy_file(snapshot, dir / "u.5.torch.pickle");  // -o u.%p.jsonl
  vt_trace("other.jsonl", 8);
  fs::copy_file(snapshot, dir / "other.9.torch.pickle");  // another process's: not other.jsonl's
  std::ofstream(dir / "h.jsonl") << R"({"workload":"a PyTorch history, not a shim trace"})"
                                 << "\n";
  fs::copy_file(snapshot, dir / "h.torch.pickle");
  auto names = [](const std::vector<std::string>& v) {
    std::vector<std::string> out;
    for (const auto& p : v) out.push_back(fs::path(p).filename().string());
    return out;
  };
  const auto all = expand_trace_paths({dir.string()});
  std::vector<std::string> notes;
  CHECK(names(choose_trace_level(all, TraceLevel::automatic, notes)) ==
        std::vector<std::string>{"h.jsonl", "h.torch.pickle", "other.9.torch.pickle", "other.jsonl",
                                 "t.77.torch.pickle", "u.5.torch.pickle"});
  REQUIRE(notes.size() == 2);
  CHECK_THAT(notes[0], Catch::Contains("t.jsonl: tensor level from") && Catch::Contains("t.77.torch.pickle"));
  CHECK_THAT(notes[1], Catch::Contains("u.5.jsonl: tensor level from") && Catch::Contains("--level device"));

  notes.clear();
  CHECK(names(choose_trace_level(all, TraceLevel::device, notes)) ==
        std::vector<std::string>{"h.jsonl", "h.torch.pickle", "other.9.torch.pickle", "other.jsonl", "t.jsonl",
                                 "u.5.jsonl"});
  CHECK(notes.size() == 2);

  // A trace named alone brings its snapshot; named with it, the snapshot is read once.
  notes.clear();
  CHECK(names(choose_trace_level({(dir / "t.jsonl").string()}, TraceLevel::automatic, notes)) ==
        std::vector<std::string>{"t.77.torch.pickle"});
  notes.clear();
  CHECK(names(choose_trace_level({(dir / "t.jsonl").string(), (dir / "t.77.torch.pickle").string()},
                                 TraceLevel::automatic, notes)) == std::vector<std::string>{"t.77.torch.pickle"});
  notes.clear();
  CHECK(names(choose_trace_level({(dir / "other.jsonl").string()}, TraceLevel::tensors, notes)) ==
        std::vector<std::string>{"other.jsonl"});
  REQUIRE(notes.size() == 1);
  CHECK_THAT(notes[0], Catch::Contains("no tensor level"));
  CHECK(parse_trace_level("device") == TraceLevel::device);
  CHECK(parse_trace_level("torch") == TraceLevel::tensors);
  CHECK_FALSE(parse_trace_level("segments").has_value());
  fs::remove_all(dir);
}

namespace {
int vramtrace_opens = 0;
std::unique_ptr<TraceReader> counting_vramtrace_opener(const std::string& path) {
  ++vramtrace_opens;
  return open_vramtrace_trace(path);
}
}  // namespace

TEST_CASE("trace level: a trace is opened once, looking for its snapshot and reading it", "[processes][paths]") {
  namespace fs = std::filesystem;
  fs::path dir = fs::temp_directory_path() / ("vt-level-once-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  auto vt_trace = [&](const std::string& name, int pid) {
    std::ofstream(dir / name) << R"({"a":"header","format":"vramtrace","version":"1.1","pid":)" << pid
                              << R"(,"devices":[],"allocator_settings":"","settings":{},"entry_points":[""]})"
                              << "\n";
  };
  vt_trace("lone.jsonl", 3);  // no snapshot beside it
  vt_trace("t.jsonl", 77);    // `vramtrace run -o t.jsonl`: t.<pid>.torch.pickle
  vt_trace("t.7.jsonl", 7);   // not t.jsonl's snapshot: a trace
  vt_trace("t.x.jsonl", 7);   // nor this
  fs::copy_file(fs::path(VRAMTRACE_TEST_DATA_DIR) / "torch-h200" / "encoder_varlen.snapshot.pickle",
                dir / "t.77.torch.pickle");
  register_trace_format("vramtrace", counting_vramtrace_opener);  // forwards: the same reader

  std::vector<std::string> notes;
  vramtrace_opens = 0;
  const auto lone = choose_trace_level({(dir / "lone.jsonl").string()}, TraceLevel::automatic, notes);
  CHECK(vramtrace_opens == 0);  // no snapshot of its name: not opened to look
  load_models(lone);
  CHECK(vramtrace_opens == 1);

  vramtrace_opens = 0;
  const auto t = choose_trace_level({(dir / "t.jsonl").string()}, TraceLevel::automatic, notes);
  REQUIRE(t.size() == 1);
  CHECK(fs::path(t[0]).filename() == "t.77.torch.pickle");
  CHECK(vramtrace_opens == 1);  // its header, for the pid; the snapshot is read in its place
  CHECK(tensor_level_companion((dir / "t.7.jsonl").string()).empty());
  CHECK(tensor_level_companion((dir / "t.x.jsonl").string()).empty());
  CHECK(tensor_level_companion((dir / "lone.jsonl").string()).empty());
  fs::remove_all(dir);
}

TEST_CASE("trace level: what is missing of the tensor level of a killed run is said", "[processes][paths]") {
  namespace fs = std::filesystem;
  fs::path dir = fs::temp_directory_path() / ("vt-level-gap-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const fs::path data = fs::path(VRAMTRACE_TEST_DATA_DIR) / "ledger";
  nlohmann::json base;
  std::ifstream(data / "run.4242.torch.pickle.json") >> base;  // pid 4242 on gpu-node-7
  auto run = [&](const std::string& trace, const std::string& sidecar, const std::string& reason, bool final,
                 std::int64_t pid = 4242) {
    fs::copy_file(data / "run.4242.jsonl", dir / trace);
    nlohmann::json j = base;
    j["reason"] = reason;
    j["final"] = final;
    j["pid"] = pid;
    j["snapshot"] = sidecar.substr(0, sidecar.size() - 5);
    std::ofstream(dir / sidecar) << j.dump();
  };
  auto notes_of = [&](const std::string& trace) {
    std::vector<std::string> notes;
    const auto read = choose_trace_level({(dir / trace).string()}, TraceLevel::automatic, notes);
    CHECK(read.size() == 1);
    return notes;
  };
  // Killed before any write: the sidecar of the start alone, with %p in the name or without.
  base["written_at"] = 1796134320.1;
  run("k.jsonl", "k.4242.torch.pickle.json", "started", false);
  auto notes = notes_of("k.jsonl");
  REQUIRE(notes.size() == 1);
  CHECK_THAT(notes[0], Catch::Contains("k.jsonl: PyTorch's tensor level was being recorded") &&
                           Catch::Contains("all of the tensor level is missing") &&
                           Catch::Contains("at 0.100 s into the trace"));
  run("p.jsonl", "p.torch.pickle.json", "started", false);
  CHECK(notes_of("p.jsonl").size() == 1);
  // Another process's sidecar, or none: nothing is said.
  run("q.jsonl", "q.torch.pickle.json", "started", false, 999);
  CHECK(notes_of("q.jsonl").empty());
  fs::copy_file(data / "run.4242.jsonl", dir / "none.jsonl");
  CHECK(notes_of("none.jsonl").empty());
  // A sidecar whose pickle is gone.
  run("g.jsonl", "g.torch.pickle.json", "exit", true);
  notes = notes_of("g.jsonl");
  REQUIRE(notes.size() == 1);
  CHECK_THAT(notes[0], Catch::Contains("which is not there"));
  // An OOM's write, then no exit write: the tensor level ends at that write.
  base["written_at"] = 1796134321.5;
  run("o.jsonl", "o.4242.torch.pickle.json", "oom", false);
  fs::copy_file(data / "run.4242.torch.pickle", dir / "o.4242.torch.pickle");
  notes = notes_of("o.jsonl");
  REQUIRE(notes.size() == 2);
  CHECK_THAT(notes[0], Catch::Contains("tensor level from"));
  CHECK_THAT(notes[1], Catch::Contains("ends at its last write (\"oom\" at 1.500 s into the trace)") &&
                           Catch::Contains("the trace goes on to 2.000 s"));
  // The exit write: nothing is missing.
  run("e.jsonl", "e.4242.torch.pickle.json", "exit", true);
  fs::copy_file(data / "run.4242.torch.pickle", dir / "e.4242.torch.pickle");
  CHECK(notes_of("e.jsonl").size() == 1);
  fs::remove_all(dir);
}
