// What input supports a verdict (analyses/oom/verdict_support.h) and the level of a trace
// (model/allocation_level.h): a framework allocator's segments are told from a program's requests,
// and get neither verdicts nor a capacity/fragmentation diagnosis; the settings the replay does not
// model exactly get none either.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "analyses/oom/oom_cases.h"
#include "analyses/oom/oom_report.h"
#include "analyses/oom/oom_whatif.h"
#include "analyses/oom/verdict_support.h"
#include "analyses/summary.h"
#include "model/load_models.h"
#include "readers/trace_paths.h"

using namespace vramtrace;
namespace fs = std::filesystem;

namespace {

constexpr std::uint64_t MiB = 1ull << 20;
constexpr std::uint64_t GiB = 1ull << 30;

struct TempDir {
  fs::path dir = fs::temp_directory_path() / ("vt-rules-" + std::to_string(::getpid()));
  TempDir() { fs::create_directories(dir); }
  ~TempDir() { fs::remove_all(dir); }
};

/// A vramtrace trace on a 1 GiB device of `sizes` allocations the shim served itself (alloc events
/// in segments of their own), with the header's `command` and tool `settings`, and an `oom` of
/// `request` at the end with 100 MiB free.
std::string shim_trace(const fs::path& path, const std::string& command, const std::string& settings,
                       const std::vector<std::uint64_t>& sizes, std::uint64_t request) {
  std::ostringstream o;
  o << R"({"a":"header","format":"vramtrace","version":"1.2","pid":9,"command_line":[)" << command
    << R"(],"devices":[{"id":0,"name":"GPU","total_bytes":)" << GiB << R"(}],"allocator_settings":"",)"
    << R"("settings":{)" << settings << R"(},"entry_points":["","cudaMalloc"]})"
    << "\n";
  std::uint64_t addr = 1ull << 40, t = 1000;
  for (std::uint64_t s : sizes) {
    o << R"({"a":"segment_alloc","t":)" << (t += 10) << R"(,"p":)" << addr << R"(,"r":)" << s << "}\n";
    o << R"({"a":"alloc","t":)" << (t += 10) << R"(,"p":)" << addr << R"(,"r":)" << s << "}\n";
    addr += 1ull << 32;
  }
  o << R"({"a":"oom","t":)" << (t += 10) << R"(,"r":)" << request << R"(,"free":)" << 100 * MiB << "}\n";
  std::ofstream(path) << o.str();
  return path.string();
}

}  // namespace

TEST_CASE("the level of a trace: PyTorch's segments by their library, their sizes, or the header", "[rules][level]") {
  TempDir tmp;
  const std::vector<std::uint64_t> segments = {2 * MiB, 20 * MiB, 20 * MiB, 64 * MiB, 2 * MiB, 512 * MiB};
  // A Python program without stacks whose every request is one of PyTorch's segment sizes.
  auto m = load_models({shim_trace(tmp.dir / "seg.jsonl", R"("python3","train.py")", "", segments, 40 * MiB)});
  CHECK(m[0].level.level == AllocationLevel::allocator_segments);
  CHECK(m[0].level.pytorch);
  CHECK(m[0].level.evidence.find("whole multiples of 2 MiB") != std::string::npos);
  // The same requests from a program that is not Python: its own requests.
  m = load_models({shim_trace(tmp.dir / "plain.jsonl", R"("./solver")", "", segments, 40 * MiB)});
  CHECK(m[0].level.level == AllocationLevel::requests);
  // Tensor sizes: not a caching allocator's segments.
  m = load_models(
      {shim_trace(tmp.dir / "tensors.jsonl", R"("python3","train.py")", "", {1000, 3 * MiB + 7, 4096, 77777}, MiB)});
  CHECK(m[0].level.level == AllocationLevel::requests);
  // PyTorch's cache switched off (vramtrace run --tensors): the shim saw the tensors, whatever the sizes.
  m = load_models({shim_trace(tmp.dir / "off.jsonl", R"("python3","train.py")",
                              R"("pytorch_no_cuda_memory_caching":"1")", segments, 40 * MiB)});
  CHECK(m[0].level.level == AllocationLevel::requests);
  // PyTorch's own formats are always its requests.
  m = load_models({std::string(VRAMTRACE_TEST_DATA_DIR) + "/oom/dead_entry.torchtrace.jsonl"});
  CHECK(m[0].level.level == AllocationLevel::requests);
  // A real run's shim trace: its stacks pass through libc10_cuda.so.
  const std::string bert = std::string(VRAMTRACE_TEST_DATA_DIR) + "/oom/bert_16g/bert.jsonl.zst";
  m = load_models({bert});
  CHECK(m[0].level.level == AllocationLevel::allocator_segments);
  CHECK(m[0].level.evidence.find("libc10_cuda") != std::string::npos);
}

TEST_CASE("a framework's segments: no verdict, no capacity or fragmentation, and the way to the tensors",
          "[rules][level]") {
  TempDir tmp;
  const std::vector<std::uint64_t> segments = {2 * MiB, 20 * MiB, 20 * MiB, 64 * MiB, 2 * MiB, 512 * MiB};
  // A 400 MiB segment asked for with 100 MiB free on the device: whether PyTorch's cache held free
  // memory for it (fragmentation) or not (capacity) is not in a trace of its segments.
  const std::string path = shim_trace(tmp.dir / "seg.jsonl", R"("python3","train.py")", "", segments, 400 * MiB);
  auto m = load_models({path});
  auto cases = oom_cases(m[0]);
  REQUIRE(cases.size() == 1);
  CHECK(cases[0].diagnosis.code == DiagnosisCode::undetermined);
  CHECK(cases[0].diagnosis.code != DiagnosisCode::capacity);
  CHECK(cases[0].diagnosis.code != DiagnosisCode::fragmentation);
  CHECK(cases[0].diagnosis.next_step.find("vramtrace run -- python3 train.py") != std::string::npos);
  const WhatIfRun run = run_whatifs(path, m[0]);
  REQUIRE(run.withheld);
  for (const auto& w : run.rows) {
    CHECK(w.judgement.verdict == WhatIfVerdict::withheld);
    // Nothing was replayed: no figure, not a figure of 0.
    CHECK_FALSE(w.judgement.replayed);
    CHECK(judgement_json(w.judgement)["peak_reserved_bytes"].is_null());
  }
  const std::string whatif = render_whatif_text(run);
  CHECK(whatif.find("not replayed") != std::string::npos);
  CHECK(whatif.find("0 bytes") == std::string::npos);
  CHECK(tune_command(run, GiB, "python3 train.py").empty());
  // The summary says whose segments its table holds, not "PyTorch CUDA memory summary".
  const std::string text = render_summary_text(m);
  CHECK(text.find("Device level (a caching allocator's segments, not tensors)") != std::string::npos);
  CHECK(text.find("Held in segments") != std::string::npos);
  CHECK(text.find("PyTorch CUDA memory summary") == std::string::npos);
  CHECK(summary_json(m)["traces"][0]["level"]["allocations"] == "allocator_segments");
  // The bundled real run at --level device: its tensor level is named as the way to a verdict.
  const std::string bert = std::string(VRAMTRACE_TEST_DATA_DIR) + "/oom/bert_16g/bert.jsonl.zst";
  std::vector<std::string> notes;
  auto b = load_models(choose_trace_level({bert}, TraceLevel::device, notes));
  const WhatIfRun brun = run_whatifs(bert, b[0]);
  REQUIRE(brun.withheld);
  CHECK(brun.withheld->how.find("bert.485.torch.pickle.gz") != std::string::npos);
  auto bcases = oom_cases(b[0]);
  REQUIRE_FALSE(bcases.empty());
  CHECK(bcases[0].diagnosis.code == DiagnosisCode::undetermined);
}

TEST_CASE("settings the replay does not model exactly get no verdict", "[rules][settings]") {
  AllocatorSettings gc_limit, gc_fraction, gc_alone, fraction;
  std::string err;
  REQUIRE(AllocatorSettings::parse("garbage_collection_threshold:0.6,limit:15GiB", gc_limit, err));
  REQUIRE(
      AllocatorSettings::parse("garbage_collection_threshold:0.6,per_process_memory_fraction:0.2", gc_fraction, err));
  REQUIRE(AllocatorSettings::parse("garbage_collection_threshold:0.6", gc_alone, err));
  REQUIRE(AllocatorSettings::parse("per_process_memory_fraction:0.5", fraction, err));
  WhatIfCapacity device;
  device.bytes = device.device_total_bytes = 140 * GiB;
  device.kind = WhatIfCapacity::Kind::device_total;
  // garbage collection acts in PyTorch only under its fraction: with `limit` it would not.
  const auto w = setting_support(gc_limit, device);
  REQUIRE(w);
  CHECK(w->why.find("`limit` is a cap PyTorch does not see") != std::string::npos);
  CHECK_FALSE(setting_support(gc_fraction, device));  // modelled: PyTorch's fraction of the device
  CHECK_FALSE(setting_support(gc_alone, device));     // modelled: no collection in either
  // On a recorded PyTorch fraction replayed as a device, garbage collection acted in PyTorch.
  WhatIfCapacity cap = device;
  cap.bytes = 24 * GiB;
  cap.kind = WhatIfCapacity::Kind::recorded_cap;
  cap.pytorch_fraction_cap = true;
  const auto g = setting_support(gc_alone, cap);
  REQUIRE(g);
  CHECK(g->how.find("--capacity 150323855360") != std::string::npos);
  // A fraction on a cap, or on what the allocator reached at the OOM: a cap of a cap.
  for (auto kind : {WhatIfCapacity::Kind::recorded_cap, WhatIfCapacity::Kind::reached_at_oom}) {
    cap.kind = kind;
    const auto f = setting_support(fraction, cap);
    REQUIRE(f);
    CHECK(f->why.find("a cap of a cap") != std::string::npos);
  }
  cap.kind = WhatIfCapacity::Kind::given;
  CHECK_FALSE(setting_support(fraction, cap));
}

TEST_CASE("each device of a trace is judged on its own capacity, and one that runs out decides", "[rules][devices]") {
  TempDir tmp;
  // Device 0 (16 GiB) holds 10 GiB and never runs out; device 1 (8 GiB) runs out at 7.5 GiB + 1 GiB.
  const fs::path p = tmp.dir / "two.jsonl";
  std::ostringstream o;
  o << R"({"a":"header","format":"vramtrace","version":"1.2","pid":9,"command_line":["./solver"],"devices":[)"
    << R"({"id":0,"name":"A","total_bytes":)" << 16 * GiB << R"(},{"id":1,"name":"B","total_bytes":)" << 8 * GiB
    << R"(}],"allocator_settings":"","settings":{},"entry_points":["","cudaMalloc"]})"
    << "\n";
  std::uint64_t t = 1000;
  auto block = [&](int d, std::uint64_t addr, std::uint64_t size) {
    o << R"({"a":"segment_alloc","t":)" << (t += 10) << R"(,"d":)" << d << R"(,"p":)" << addr << R"(,"r":)" << size
      << "}\n";
    o << R"({"a":"alloc","t":)" << (t += 10) << R"(,"d":)" << d << R"(,"p":)" << addr << R"(,"r":)" << size << "}\n";
  };
  for (int i = 0; i < 10; ++i) block(0, (1ull << 40) + i * (1ull << 32), GiB);
  for (int i = 0; i < 15; ++i) block(1, (2ull << 40) + i * (1ull << 32), 512 * MiB);
  o << R"({"a":"oom","t":)" << (t += 10) << R"(,"d":1,"r":)" << GiB << R"(,"free":)" << 256 * MiB << "}\n";
  std::ofstream(p) << o.str();
  auto m = load_models({p.string()});
  const WhatIfRun run = run_whatifs(p.string(), m[0]);
  const WhatIf* own = nullptr;
  for (const auto& w : run.rows)
    if (w.own) own = &w;
  REQUIRE(own);
  REQUIRE(own->results.size() == 2);
  // Device 0 on its own 16 GiB (the device total), device 1 on what its allocator reached at the OOM.
  CHECK(own->results[0].device == 0);
  CHECK(own->results[0].config.capacity_bytes == 16 * GiB);
  CHECK(own->results[0].failed_allocs == 0);
  CHECK(own->results[1].config.capacity_bytes == 7 * GiB + 768 * MiB);
  CHECK(own->per_device[1].verdict == WhatIfVerdict::does_not_fit);
  // The setting does not fit: the program dies on device 1, whatever device 0's replay may say.
  CHECK(own->judgement.verdict == WhatIfVerdict::does_not_fit);
  CHECK_FALSE(own->judgement.margin_bytes);
}
