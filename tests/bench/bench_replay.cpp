// Replay throughput end to end from a gzip file, and the trace readers alone.
//
// Input: a long training run made from the real GPT-2 trace (tests/data/torch-h200): its
// alloc/free entries repeated kRepeats times, the blocks still live at the end of each
// repetition freed before the next (as a training loop that drops its tensors), written as
// gzip JSON lines to a temporary file once per process. Each iteration opens and reads it
// whole. The snapshot benchmarks read the bundled snapshot pickle.
#include <benchmark/benchmark.h>
#include <unistd.h>
#include <zlib.h>

#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include "analyses/replay.h"
#include "vramtrace/trace/byte_source.h"

using namespace vramtrace;

namespace {

constexpr int kRepeats = 100;

/// The generated file, removed when the program ends.
struct TempFile {
  std::string path;
  ~TempFile() {
    std::error_code ec;
    std::filesystem::remove(path, ec);
  }
};

const std::string& long_trace() {
  static const TempFile file{[] {
    std::string src = std::string(VRAMTRACE_TEST_DATA_DIR) + "/torch-h200/gpt2_train.torchtrace.jsonl.gz";
    auto lines = LineSource::open(src);
    std::string_view line;
    std::string header;
    std::vector<std::string> body;
    std::set<std::uint64_t> live;
    auto reader = open_trace(src);
    TraceRecord r;
    lines->next_line(line);
    header = std::string(line);
    while (lines->next_line(line)) {
      reader->next(r);
      if (r.action == Action::segment_alloc) continue;  // later repetitions reuse the cache
      body.emplace_back(line);
      if (r.action == Action::alloc) live.insert(r.addr);
      if (r.action == Action::free_completed) live.erase(r.addr);
    }
    for (std::uint64_t a : live) {
      body.push_back("{\"action\": \"free_requested\", \"addr\": " + std::to_string(a) +
                     ", \"size\": 0, \"stream\": 0}");
      body.push_back("{\"action\": \"free_completed\", \"addr\": " + std::to_string(a) +
                     ", \"size\": 0, \"stream\": 0}");
    }
    std::string out =
        (std::filesystem::temp_directory_path() / ("vramtrace-bench-" + std::to_string(::getpid()) + ".jsonl.gz"))
            .string();
    gzFile f = gzopen(out.c_str(), "wb6");
    gzwrite(f, header.data(), unsigned(header.size()));
    gzwrite(f, "\n", 1);
    for (int k = 0; k < kRepeats; ++k)
      for (const auto& l : body) {
        gzwrite(f, l.data(), unsigned(l.size()));
        gzwrite(f, "\n", 1);
      }
    gzclose(f);
    return out;
  }()};
  return file.path;
}

ReplayConfig defaults() {
  ReplayConfig c;
  c.capacity_bytes = 150109880320ull;
  return c;
}

void BM_replay_gzip_end_to_end(benchmark::State& state) {
  const std::string& path = long_trace();
  std::uint64_t events = 0;
  for (auto _ : state) {
    auto reader = open_trace(path);
    ReplayReport rep = replay(*reader, {defaults()});
    events += rep.events;
    benchmark::DoNotOptimize(rep.results[0].stats.reserved_bytes[0].peak);
  }
  state.counters["events/s"] = benchmark::Counter(double(events), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_replay_gzip_end_to_end)->Unit(benchmark::kMillisecond);

/// Records held in memory, to measure the engine and the allocator without parsing.
class MemoryReader final : public TraceReader {
 public:
  explicit MemoryReader(const std::vector<TraceRecord>& recs) : recs_(recs) { header_.path = "memory"; }
  const TraceHeader& header() const override { return header_; }
  bool next(TraceRecord& out) override {
    if (i_ == recs_.size()) return false;
    out = recs_[i_++];
    return true;
  }
  std::string position() const override { return "record " + std::to_string(i_); }

 private:
  const std::vector<TraceRecord>& recs_;
  std::size_t i_ = 0;
  TraceHeader header_;
};

void BM_replay_from_memory(benchmark::State& state) {
  std::vector<TraceRecord> recs;
  {
    auto reader = open_trace(long_trace());
    TraceRecord r;
    while (reader->next(r)) recs.push_back(r);
  }
  std::uint64_t events = 0;
  for (auto _ : state) {
    MemoryReader reader(recs);
    ReplayReport rep = replay(reader, {defaults()});
    events += rep.events;
  }
  state.counters["events/s"] = benchmark::Counter(double(events), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_replay_from_memory)->Unit(benchmark::kMillisecond);

void BM_reader_only_gzip(benchmark::State& state) {
  const std::string& path = long_trace();
  std::uint64_t events = 0;
  for (auto _ : state) {
    auto reader = open_trace(path);
    TraceRecord r;
    while (reader->next(r)) ++events;
  }
  state.counters["events/s"] = benchmark::Counter(double(events), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_reader_only_gzip)->Unit(benchmark::kMillisecond);

void BM_lines_only_gzip(benchmark::State& state) {
  const std::string& path = long_trace();
  std::uint64_t lines = 0;
  for (auto _ : state) {
    auto src = LineSource::open(path);
    std::string_view line;
    while (src->next_line(line)) ++lines;
  }
  state.counters["lines/s"] = benchmark::Counter(double(lines), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_lines_only_gzip)->Unit(benchmark::kMillisecond);

void BM_reader_only_snapshot_pickle(benchmark::State& state) {
  std::string path = std::string(VRAMTRACE_TEST_DATA_DIR) + "/torch-h200/encoder_varlen.snapshot.pickle";
  std::uint64_t events = 0, bytes = 0;
  for (auto _ : state) {
    auto reader = open_trace(path);
    TraceRecord r;
    while (reader->next(r)) ++events;
    bytes += reader->bytes_total();
  }
  state.counters["events/s"] = benchmark::Counter(double(events), benchmark::Counter::kIsRate);
  state.counters["bytes/s"] = benchmark::Counter(double(bytes), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_reader_only_snapshot_pickle)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
