// Throughput of the report model (trace_model.cpp) without parsing: the gpt2 trace's records held
// in memory, fed to TraceModelBuilder repeatedly with shifted addresses (as gen_repeated_trace.py
// does on disk). Figures: docs/benchmarks.md.
#include <benchmark/benchmark.h>

#include <vector>

#include "model/trace_model.h"
#include "readers/open_trace.h"

using namespace vramtrace;

namespace {
std::vector<TraceRecord> gpt2_records() {
  static std::vector<TraceRecord> recs = [] {
    std::vector<TraceRecord> v;
    auto r = open_trace(std::string(VRAMTRACE_TEST_DATA_DIR) + "/torch-h200/gpt2_train.torchtrace.jsonl.gz");
    TraceRecord x;
    while (r->next(x)) v.push_back(x);
    return v;
  }();
  return recs;
}
}  // namespace

static void BM_TraceModel_Gpt2Repeated(benchmark::State& state) {
  auto base = gpt2_records();
  const int reps = static_cast<int>(state.range(0));
  for (auto _ : state) {
    TraceModelBuilder b(TraceHeader{});
    for (int rep = 0; rep < reps; ++rep) {
      const std::uint64_t shift = static_cast<std::uint64_t>(rep) << 37;
      for (TraceRecord r : base) {
        r.addr += shift;
        r.time_ns += static_cast<std::int64_t>(rep) * 1'000'000'000;
        b.add(r);
      }
    }
    benchmark::DoNotOptimize(b.finish(false));
  }
  state.SetItemsProcessed(state.iterations() * reps * static_cast<std::int64_t>(base.size()));
}
BENCHMARK(BM_TraceModel_Gpt2Repeated)->Arg(1)->Arg(20)->Unit(benchmark::kMillisecond);

BENCHMARK_MAIN();
