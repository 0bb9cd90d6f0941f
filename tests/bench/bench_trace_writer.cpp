// Trace writer and reader benchmarks (targets and figures: docs/benchmarks.md, "Targets").
//
//   append      ns per record() on the calling thread (median over batches of 4096)
//   sustained   events per second the background thread formats and writes to a file
//   bytes       bytes per event line for the event mix of the real PyTorch traces
//   reader      events per second read back by open_vramtrace_trace
#include <benchmark/benchmark.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "vramtrace/trace/vramtrace_reader.h"
#include "vramtrace/trace/writer.h"

using namespace vramtrace;
using namespace vramtrace::trace;

namespace {

std::string scratch_dir() {
  static std::string dir = [] {
    const char* base = std::getenv("TMPDIR");
    std::string pattern = std::string(base && *base ? base : "/tmp") + "/vramtrace-bench-XXXXXX";
    std::vector<char> buf(pattern.begin(), pattern.end());
    buf.push_back('\0');
    return std::string(mkdtemp(buf.data()));
  }();
  return dir;
}

std::string fresh_path(const std::string& name) {
  static int n = 0;
  std::string p = scratch_dir() + "/" + std::to_string(n++) + "-" + name;
  return p;
}

double cpu_seconds(clockid_t clock) {
  timespec ts{};
  clock_gettime(clock, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

std::uint64_t file_size(const std::string& path) {
  struct stat st {};
  return stat(path.c_str(), &st) == 0 ? static_cast<std::uint64_t>(st.st_size) : 0;
}

std::vector<std::string> gz_lines(const std::string& path) {
  std::vector<std::string> lines;
  gzFile gz = gzopen(path.c_str(), "rb");
  if (gz == nullptr) return lines;
  std::string cur;
  char buf[1 << 16];
  int n;
  while ((n = gzread(gz, buf, sizeof(buf))) > 0) {
    for (int i = 0; i < n; ++i) {
      if (buf[i] == '\n') {
        lines.push_back(std::move(cur));
        cur.clear();
      } else {
        cur.push_back(buf[i]);
      }
    }
  }
  gzclose(gz);
  if (!cur.empty()) lines.push_back(cur);
  return lines;
}

// The real PyTorch traces (tests/data/torch-h200) as the shim would record them: PyTorch's
// actions, addresses, sizes and streams; block bytes rounded to 512 B for allocs; one 7-digit
// thread id; entry point 1; times shifted to 100 s after the origin (a run already going for a
// while, so "t" has 12 digits).
std::vector<Event> shared_mix() {
  std::vector<Event> events;
  for (const char* name : {"gpt2_train.torchtrace.jsonl.gz", "resnet50_train.torchtrace.jsonl.gz"}) {
    std::uint64_t first_us = 0;
    for (const std::string& line : gz_lines(std::string(VRAMTRACE_SHARED_TRACES) + "/" + name)) {
      auto j = nlohmann::json::parse(line, nullptr, false);
      if (!j.is_object() || !j.contains("action")) continue;
      auto action = parse_action(j["action"].get<std::string>());
      if (!action) continue;
      Event e{};
      e.action = *action;
      e.addr = j.value("addr", std::uint64_t{0});
      e.size_bytes = j.value("size", std::uint64_t{0});
      e.block_bytes =
          (e.action == Action::alloc || e.action == Action::free_requested || e.action == Action::free_completed)
              ? std::max<std::uint64_t>(512, (e.size_bytes + 511) / 512 * 512)
              : e.size_bytes;
      e.stream = j.value("stream", std::uint64_t{0});
      std::uint64_t us = j.value("time_us", std::uint64_t{0});
      if (first_us == 0) first_us = us;
      e.time_ns = 100'000'000'000ull + (us - first_us) * 1000;
      e.thread_id = 2345678;
      e.entry_point = 1;
      events.push_back(e);
    }
  }
  return events;
}

TraceWriterOptions bench_options(const std::string& path) {
  TraceWriterOptions o;
  o.output_pattern = path;
  o.header.tool_version = "bench";
  return o;
}

// Median ns per append on the calling thread. Each iteration times one batch of 4096 appends
// (the ring holds 16384, so a batch never waits for the writer), then waits untimed until the
// writer has drained the ring.
void BM_AppendCallingThread(benchmark::State& state) {
  constexpr int kBatch = 4096;
  TraceWriter w(bench_options(fresh_path("append.jsonl")));
  w.start();
  Event e{};
  e.action = Action::alloc;
  e.addr = 0x7f0000000000;
  e.size_bytes = 1000;
  e.block_bytes = 1024;
  e.thread_id = 1234;
  e.time_ns = TraceWriter::now_ns();
  std::vector<double> per_append;
  for (auto _ : state) {
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < kBatch; ++i) {
      e.addr += 512;
      w.record(e);
    }
    auto t1 = std::chrono::steady_clock::now();
    double seconds = std::chrono::duration<double>(t1 - t0).count();
    state.SetIterationTime(seconds);
    per_append.push_back(seconds * 1e9 / kBatch);
    w.flush();
  }
  std::sort(per_append.begin(), per_append.end());
  state.counters["median_ns_per_append"] = per_append[per_append.size() / 2];
  state.counters["p99_ns_per_append"] = per_append[per_append.size() * 99 / 100];
  state.SetItemsProcessed(state.iterations() * kBatch);
  w.close();
}
BENCHMARK(BM_AppendCallingThread)->UseManualTime()->Iterations(2000)->Unit(benchmark::kMicrosecond);

// Sustained events per second through the background thread into a file: the calling thread
// appends `n` events as fast as it can (waiting on a full ring), the clock stops when the last
// one is written.
void BM_WriterSustained(benchmark::State& state) {
  const bool zstd = state.range(0) != 0;
  const std::vector<Event> mix = shared_mix();
  constexpr std::size_t kEvents = 4'000'000;
  std::uint64_t bytes = 0;
  double writer_cpu_s = 0;
  for (auto _ : state) {
    std::string path = fresh_path(zstd ? "sustained.jsonl.zst" : "sustained.jsonl");
    TraceWriter w(bench_options(path));
    w.start();
    const double p0 = cpu_seconds(CLOCK_PROCESS_CPUTIME_ID), m0 = cpu_seconds(CLOCK_THREAD_CPUTIME_ID);
    auto t0 = std::chrono::steady_clock::now();
    for (std::size_t i = 0; i < kEvents; ++i) w.record(mix[i % mix.size()]);
    w.flush();
    auto t1 = std::chrono::steady_clock::now();
    // CPU time of the process minus this thread's: the writer thread's own time.
    writer_cpu_s += (cpu_seconds(CLOCK_PROCESS_CPUTIME_ID) - p0) - (cpu_seconds(CLOCK_THREAD_CPUTIME_ID) - m0);
    state.SetIterationTime(std::chrono::duration<double>(t1 - t0).count());
    w.close();
    bytes = file_size(path);
    std::filesystem::remove(path);
  }
  state.SetItemsProcessed(state.iterations() * kEvents);
  state.counters["file_bytes_per_event"] = static_cast<double>(bytes) / kEvents;
  // Events per second of the writer thread's CPU time: what one dedicated core sustains,
  // independent of other load on the machine.
  state.counters["events_per_writer_cpu_s"] = static_cast<double>(state.iterations() * kEvents) / writer_cpu_s;
}
BENCHMARK(BM_WriterSustained)->Arg(0)->Arg(1)->UseManualTime()->Iterations(3)->Unit(benchmark::kMillisecond);

// Bytes per event line, uncompressed and zstd, for the real traces' mix (header and trailer
// excluded).
void BM_BytesPerEventSharedMix(benchmark::State& state) {
  const std::vector<Event> mix = shared_mix();
  double plain = 0, zstd = 0;
  for (auto _ : state) {
    for (bool compress : {false, true}) {
      std::string path = fresh_path(compress ? "mix.jsonl.zst" : "mix.jsonl");
      auto o = bench_options(path);
      o.header.tool_version = "bench";
      TraceWriter w(o);
      w.start();
      w.flush();
      std::uint64_t header_bytes = file_size(path);
      for (const Event& e : mix) w.record(e);
      w.close();
      std::uint64_t total = file_size(path);
      if (compress) {
        zstd = static_cast<double>(total) / static_cast<double>(mix.size());
      } else {
        // Subtract header and trailer: they are per file, not per event.
        auto reader = open_vramtrace_trace_details(path);
        std::FILE* f = std::fopen(path.c_str(), "rb");
        std::string content(total, '\0');
        std::fread(content.data(), 1, total, f);
        std::fclose(f);
        std::size_t trailer_at = content.rfind("{\"a\":\"trailer\"");
        plain = static_cast<double>(trailer_at - header_bytes) / static_cast<double>(mix.size());
      }
      std::filesystem::remove(path);
    }
  }
  state.counters["events"] = static_cast<double>(mix.size());
  state.counters["bytes_per_event"] = plain;
  state.counters["zstd_bytes_per_event"] = zstd;
}
BENCHMARK(BM_BytesPerEventSharedMix)->Iterations(1)->Unit(benchmark::kMillisecond);

// Events per second read back with open_vramtrace_trace (plain and zstd).
void BM_Reader(benchmark::State& state) {
  const bool zstd = state.range(0) != 0;
  static std::string paths[2];
  constexpr std::size_t kEvents = 2'000'000;
  std::string& path = paths[zstd ? 1 : 0];
  if (path.empty()) {
    path = fresh_path(zstd ? "reader.jsonl.zst" : "reader.jsonl");
    const std::vector<Event> mix = shared_mix();
    TraceWriter w(bench_options(path));
    w.start();
    for (std::size_t i = 0; i < kEvents; ++i) w.record(mix[i % mix.size()]);
    w.close();
  }
  std::uint64_t n = 0;
  for (auto _ : state) {
    auto reader = open_vramtrace_trace(path);
    TraceRecord r;
    n = 0;
    while (reader->next(r)) ++n;
    benchmark::DoNotOptimize(n);
  }
  if (n != kEvents) state.SkipWithError("reader returned the wrong number of events");
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * kEvents));
}
BENCHMARK(BM_Reader)->Arg(0)->Arg(1)->Iterations(3)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
