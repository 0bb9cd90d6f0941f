// `vramtrace export`: the pickle writer read back by our own unpickler, the memory-viz snapshot
// read back by our own snapshot reader (segments, blocks and history as the input had them), and
// the Perfetto JSON checked against the model (counters, slices, the peak of `summary --json`).
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "analyses/summary.h"
#include "layout_check.h"
#include "model/load_models.h"
#include "readers/open_trace.h"
#include "readers/pickle.h"
#include "render/memory_viz.h"
#include "render/perfetto_trace.h"
#include "render/pickle_writer.h"
#include "vramtrace/trace/byte_source.h"

using namespace vramtrace;
namespace fs = std::filesystem;

namespace {

const fs::path kData = fs::path(VRAMTRACE_TEST_DATA_DIR);

fs::path scratch(const std::string& name) {
  return fs::temp_directory_path() / ("vt-export-" + std::to_string(::getpid()) + "-" + name);
}

void write_file(const fs::path& p, const std::string& bytes) {
  std::ofstream f(p, std::ios::binary);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

pickle::ValuePtr unpickle(const std::string& bytes) {
  const fs::path p = scratch("values.pickle");
  write_file(p, bytes);
  auto src = ByteSource::open(p.string());
  pickle::Unpickler u(*src, p.string());
  while (u.run()) {
  }
  fs::remove(p);
  return u.result();
}

std::string memory_viz_of(const std::string& path, TraceModel* model_out = nullptr) {
  auto reader = open_trace(path);
  TraceModel m = build_trace_model(*reader);
  std::string out;
  write_memory_viz(
      m, reader->final_state(), [&path]() { return open_trace(path); }, [&out](std::string_view b) { out.append(b); });
  if (model_out) *model_out = std::move(m);
  return out;
}

}  // namespace

TEST_CASE("pickle writer: every kind of value reads back as written", "[export]") {
  const std::vector<std::int64_t> want = {0,
                                          1,
                                          255,
                                          256,
                                          65535,
                                          65536,
                                          -1,
                                          -129,
                                          2147483647,
                                          2147483648LL,
                                          -2147483648LL,
                                          -2147483649LL,
                                          140737488355328LL,
                                          INT64_MAX,
                                          INT64_MIN};
  PickleWriter w;
  w.begin_dict();
  w.key("ints");
  w.begin_list();
  for (std::int64_t v : want) w.integer(v);
  w.unsigned_integer(UINT64_MAX);
  w.end_list();
  w.key("text");
  w.string("h\xc3\xa9llo");
  w.key(std::string(300, 'k'));
  w.string(std::string(70000, 'x'));
  w.key("float");
  w.real(-2.5);
  w.key("flags");
  w.begin_list();
  w.boolean(true);
  w.boolean(false);
  w.none();
  w.end_list();
  w.key("many");
  w.begin_list();
  for (int i = 0; i < 2500; ++i) w.integer(i);  // three batches of APPENDS
  w.end_list();
  w.key("repeated");  // through the memo: BINPUT/BINGET, then LONG_BINPUT/LONG_BINGET past 256
  w.begin_list();
  for (int round = 0; round < 2; ++round)
    for (int i = 0; i < 600; ++i) w.string("name-" + std::to_string(i));
  w.end_list();
  w.key("empty");
  w.begin_dict();
  w.end_dict();
  w.end_dict();
  w.finish();
  const auto root = unpickle(w.take_bytes());
  REQUIRE(root->kind == pickle::Kind::dict);
  const pickle::Value* ints = root->find("ints");
  REQUIRE(ints);
  REQUIRE(ints->items.size() == 16);
  for (std::size_t i = 0; i < want.size(); ++i) {
    std::int64_t v = 0;
    REQUIRE(ints->items[i]->to_i64(v));
    CHECK(v == want[i]);
  }
  std::uint64_t big = 0;
  REQUIRE(ints->items[15]->to_u64(big));
  CHECK(big == UINT64_MAX);
  CHECK(root->find("text")->text == "h\xc3\xa9llo");
  CHECK(root->find(std::string(300, 'k'))->text.size() == 70000);
  CHECK(root->find("float")->floating == -2.5);
  const pickle::Value* flags = root->find("flags");
  CHECK(flags->items[0]->kind == pickle::Kind::boolean);
  CHECK(flags->items[0]->boolean);
  CHECK_FALSE(flags->items[1]->boolean);
  CHECK(flags->items[2]->kind == pickle::Kind::none);
  const pickle::Value* many = root->find("many");
  REQUIRE(many->items.size() == 2500);
  CHECK(many->items[2499]->integer == 2499);
  CHECK(root->find("empty")->entries.empty());
  const pickle::Value* repeated = root->find("repeated");
  REQUIRE(repeated->items.size() == 1200);
  for (int i = 0; i < 1200; ++i) CHECK(repeated->items[i]->text == "name-" + std::to_string(i % 600));
}

TEST_CASE("pickle writer: misuse is refused", "[export]") {
  PickleWriter w;
  w.begin_dict();
  CHECK_THROWS_AS(w.integer(1), std::logic_error);  // no key
  CHECK_THROWS_AS(w.end_list(), std::logic_error);
  CHECK_THROWS_AS(w.finish(), std::logic_error);
  w.key("a");
  CHECK_THROWS_AS(w.key("b"), std::logic_error);
  w.integer(1);
  w.end_dict();
  CHECK_THROWS_AS(w.integer(2), std::logic_error);  // a second top-level value
  w.finish();
}

TEST_CASE("memory-viz: a PyTorch snapshot round-trips through our own reader", "[export]") {
  for (const char* name : {"pickle/encoder_varlen.proto4.pickle.gz", "pickle/sites.snapshot.pickle",
                           "pickle/late_start.snapshot.pickle.gz", "torch-h200/gpt2_run.snapshot.pickle.zst"}) {
    INFO(name);
    const std::string in = (kData / name).string();
    const fs::path out = scratch("roundtrip.pickle");
    write_file(out, memory_viz_of(in));

    // Segments and blocks: the snapshot's own end state, unchanged.
    auto a = open_trace(in);
    auto b = open_trace(out.string());
    CHECK(b->header().format == "snapshot");
    TraceRecord ra, rb;
    std::size_t n = 0;
    while (a->next(ra)) {
      if (ra.action == Action::mark) continue;
      REQUIRE(b->next(rb));
      ++n;
      CHECK(rb.action == ra.action);
      CHECK(rb.addr == (ra.action == Action::oom ? 0 : ra.addr));
      CHECK(rb.size == ra.size);
      CHECK(rb.stream == ra.stream);
      CHECK(rb.device == ra.device);
      CHECK(rb.device_free == ra.device_free);
      CHECK(rb.time_ns / 1000 == ra.time_ns / 1000);
      const auto* fa = a->stack(ra.stack_id);
      const auto* fb = b->stack(rb.stack_id);
      REQUIRE((fa == nullptr) == (fb == nullptr));
      if (fa) {
        REQUIRE(fa->size() == fb->size());
        for (std::size_t i = 0; i < fa->size(); ++i) {
          CHECK((*fa)[i].filename == (*fb)[i].filename);
          CHECK((*fa)[i].line == (*fb)[i].line);
          CHECK((*fa)[i].name == (*fb)[i].name);
        }
      }
    }
    CHECK_FALSE(b->next(rb));
    const Snapshot* sa = a->final_state();
    const Snapshot* sb = b->final_state();
    REQUIRE(sa);
    REQUIRE(sb);
    testing::check_same_segments(sa->segments, sb->segments, testing::StackIds::presence);
    CHECK(a->header().settings == b->header().settings);
    CHECK(n > 0);

    // And the reports agree on the figures.
    const auto ma = load_models({in});
    const auto mb = load_models({out.string()});
    REQUIRE(ma.front().devices.size() == mb.front().devices.size());
    for (std::size_t i = 0; i < ma.front().devices.size(); ++i) {
      const DeviceModel& da = ma.front().devices[i];
      const DeviceModel& db = mb.front().devices[i];
      CHECK(da.stats.allocated_bytes[kStatAll].peak == db.stats.allocated_bytes[kStatAll].peak);
      CHECK(da.stats.reserved_bytes[kStatAll].peak == db.stats.reserved_bytes[kStatAll].peak);
      CHECK(da.at_end.stats.allocated_bytes[kStatAll].current == db.at_end.stats.allocated_bytes[kStatAll].current);
    }
    fs::remove(out);
  }
}

TEST_CASE("memory-viz: a trace without an end state gets the model's end layout and its history", "[export]") {
  // Traces whose every block lies in a segment they record (a snapshot's end state then says the
  // same as the history; the ledger pair's synthetic trace has blocks in no segment on purpose).
  for (const char* name : {"torch-h200/resnet50_train.torchtrace.jsonl.gz", "torch-h200/gpt2_train.torchtrace.jsonl.gz",
                           "oom/retries.vramtrace.jsonl", "oom/plain_oom.vramtrace.jsonl"}) {
    INFO(name);
    const std::string in = (kData / name).string();
    TraceModel m;
    const fs::path out = scratch("device.pickle");
    write_file(out, memory_viz_of(in, &m));
    const auto back = load_models({out.string()});
    REQUIRE(back.front().devices.size() == m.devices.size());
    for (std::size_t i = 0; i < m.devices.size(); ++i) {
      const DeviceModel& d = m.devices[i];
      const DeviceModel& e = back.front().devices[i];
      // The snapshot's segments are the model's end state...
      std::uint64_t reserved = 0;
      for (const auto& s : d.at_end.layout.segments) reserved += s.total_size;
      std::uint64_t reserved_back = 0;
      for (const auto& s : e.at_end.layout.segments) reserved_back += s.total_size;
      CHECK(reserved_back == reserved);
      // ...and the history read back gives the same peaks.
      CHECK(e.stats.allocated_bytes[kStatAll].peak == d.stats.allocated_bytes[kStatAll].peak);
      CHECK(e.stats.reserved_bytes[kStatAll].peak == d.stats.reserved_bytes[kStatAll].peak);
      // Only the failures the program saw are `oom` entries, as in PyTorch's history: the OOMs
      // counted are the same, the attempts retried with success are gone.
      CHECK(e.oom_count.ooms == d.oom_count.ooms);
      std::size_t seen = 0;
      for (const OomRecord& o : d.ooms) seen += o.fate == OomFate::oom ? 1 : 0;
      CHECK(e.ooms.size() == seen);
    }
    fs::remove(out);
  }
}

// A vramtrace trace with a Python and a native frame on its one allocation (docs/trace-format.md,
// "Call stacks").
constexpr const char* kStackTrace =
    R"({"a":"header","format":"vramtrace","version":"1.2","tool_version":"0.1.0","pid":77,"ppid":1,"host":"h","rank":"","command_line":["python3","t.py"],"start_unix_ns":1796000000000000000,"clock":"CLOCK_MONOTONIC","origin_monotonic_ns":1000,"cuda_driver_version":13000,"cuda_runtime_version":13000,"devices":[{"id":0,"name":"GPU","total_bytes":85899345920}],"allocator_settings":"","settings":{"stacks":"native,python"},"entry_points":["","cudaMalloc","cudaFree"],"trace":{"buffer_events":16384,"on_full":"wait","flush_interval_ms":100,"compression":"none"}}
{"a":"module","id":1,"path":"/nonexistent/libtrain.so","bias":4096,"start":4096,"size":65536}
{"a":"string","id":1,"text":"/home/me/train.py"}
{"a":"string","id":2,"text":"step"}
{"a":"stack","id":1,"frames":[{"m":1,"pc":8192},{"f":1,"l":42,"n":2}]}
{"a":"segment_alloc","t":100,"p":139637976727552,"r":2097152,"th":1,"e":1,"st":1}
{"a":"alloc","t":200,"p":139637976727552,"r":1000,"b":1024,"th":1,"e":1,"st":1}
{"a":"free_requested","t":300,"p":139637976727552,"r":1000,"b":1024,"th":1,"e":2}
{"a":"free_completed","t":300,"p":139637976727552,"r":1000,"b":1024,"th":1,"e":2}
)";

TEST_CASE("memory-viz: call stacks of a vramtrace trace become frames", "[export]") {
  const fs::path in = scratch("stacks.vramtrace.jsonl");
  write_file(in, kStackTrace);
  const fs::path out = scratch("stacks.pickle");
  write_file(out, memory_viz_of(in.string()));
  const auto root = unpickle(memory_viz_of(in.string()));
  const pickle::Value* traces = root->find("device_traces");
  REQUIRE(traces);
  REQUIRE(traces->items.size() == 1);
  const auto& entries = traces->items[0]->items;
  REQUIRE(entries.size() == 4);
  CHECK(entries[1]->find("action")->text == "alloc");
  const pickle::Value* frames = entries[1]->find("frames");
  REQUIRE(frames->items.size() == 2);
  // Innermost first: the native caller (named by its module, no source file), then Python's.
  CHECK(frames->items[0]->find("filename")->text == "/nonexistent/libtrain.so");
  CHECK(frames->items[0]->find("name")->text.find("libtrain.so") != std::string::npos);
  CHECK(frames->items[1]->find("filename")->text == "/home/me/train.py");
  CHECK(frames->items[1]->find("line")->integer == 42);
  CHECK(frames->items[1]->find("name")->text == "step");
  CHECK(entries[3]->find("frames")->items.empty());  // frees record no stack
  // Our own reader finds the same frames again.
  auto b = open_trace(out.string());
  TraceRecord r;
  std::size_t with_stack = 0;
  while (b->next(r))
    if (r.action == Action::alloc && r.stack_id != 0 && b->stack(r.stack_id)->size() == 2) ++with_stack;
  CHECK(with_stack == 1);
  fs::remove(in);
  fs::remove(out);
}

namespace {

nlohmann::json perfetto_of(const std::vector<std::string>& paths, std::vector<TraceModel>& models) {
  models = load_models(paths);
  std::vector<PerfettoProcess> procs;
  for (std::size_t i = 0; i < paths.size(); ++i) {
    const std::string p = paths[i];
    procs.push_back({&models[i], [p]() { return open_trace(p); }});
  }
  std::string out;
  write_perfetto_json(procs, [&out](std::string_view b) { out.append(b); });
  return nlohmann::json::parse(out);  // throws on invalid JSON
}

}  // namespace

TEST_CASE("perfetto: counters, slices and the peak of summary --json", "[export]") {
  const std::vector<std::string> paths = {(kData / "torch-h200/gpt2_train.torchtrace.jsonl.gz").string(),
                                          (kData / "ledger/run.4242.jsonl").string(),
                                          (kData / "oom/retries.vramtrace.jsonl").string()};
  std::vector<TraceModel> models;
  const nlohmann::json j = perfetto_of(paths, models);
  REQUIRE(j.at("displayTimeUnit") == "ns");
  const auto& events = j.at("traceEvents");
  REQUIRE(events.is_array());

  std::map<int, std::string> process_names;
  std::map<std::pair<int, std::string>, std::vector<std::pair<double, std::int64_t>>> counters;  // (pid, name arg)
  std::map<std::string, int> open;                                                               // id -> b minus e
  std::size_t begins = 0;
  for (const auto& e : events) {
    const std::string ph = e.at("ph");
    REQUIRE(e.contains("pid"));
    if (ph == "M" && e.at("name") == "process_name") process_names[e.at("pid")] = e.at("args").at("name");
    if (ph == "C") {
      for (const auto& [k, v] : e.at("args").items()) {
        REQUIRE(v.is_number_integer());
        CHECK(v.get<std::int64_t>() >= 0);
        counters[{e.at("pid"), e.at("name").get<std::string>() + " " + k}].push_back(
            {e.at("ts").get<double>(), v.get<std::int64_t>()});
      }
    }
    if (ph == "b" || ph == "e") {
      CHECK(e.at("cat") == "alloc");
      const std::string id = e.at("id").dump();
      open[id] += ph == "b" ? 1 : -1;
      CHECK(open[id] >= 0);  // an e never before its b (events of one id come in order)
      CHECK(open[id] <= 1);
      if (ph == "b") {
        ++begins;
        CHECK(e.at("args").contains("address"));
        CHECK(e.at("args").contains("size"));
        CHECK(e.at("args").contains("stream"));
      }
    }
  }
  CHECK(process_names.size() == 3);
  CHECK(begins > 0);
  for (const auto& [id, n] : open) CHECK(n == 0);  // every slice ends (at the end, if alive)

  // The peak: the counters reach summary --json's figures, at the peak's own time.
  const nlohmann::json summary = summary_json(models);
  std::size_t checked = 0;
  std::vector<int> pids;
  for (const auto& [pid, name] : process_names) pids.push_back(pid);
  for (std::size_t t = 0; t < models.size(); ++t) {
    for (const auto& dj : summary.at("traces").at(t).at("devices")) {
      if (!dj.contains("peak")) continue;
      const int dev = dj.at("device");
      const std::string prefix = "cuda:" + std::to_string(dev);
      const auto& alloc = counters[{pids[t], prefix + " allocated"}];
      const auto& reserved = counters[{pids[t], prefix + " reserved"}];
      REQUIRE_FALSE(alloc.empty());
      std::int64_t max_alloc = 0;
      for (const auto& [ts, v] : alloc) max_alloc = std::max(max_alloc, v);
      CHECK(max_alloc == dj.at("stats").at("allocated_bytes.all.peak").get<std::int64_t>());
      CHECK(max_alloc == dj.at("peak").at("allocated_bytes").get<std::int64_t>());
      // At the peak's time the reserved counter holds the peak's reserved bytes.
      double peak_ts = -1;
      for (const auto& [ts, v] : alloc)
        if (v == max_alloc) {
          peak_ts = ts;
          break;
        }
      bool found = false;
      for (const auto& [ts, v] : reserved)
        if (ts == peak_ts && v == dj.at("peak").at("reserved_bytes").get<std::int64_t>()) found = true;
      CHECK(found);
      ++checked;
    }
  }
  CHECK(checked >= 3);
}
