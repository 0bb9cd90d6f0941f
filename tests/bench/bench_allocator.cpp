// Allocator micro-benchmarks, each against its target (docs/benchmarks.md, "Targets"):
//  - a cache-hit allocate+free pair on one thread (target: <= 100 ns median);
//  - replay of a real PyTorch trace through the allocator alone (target: >= 5 M events/s);
//  - cost per operation with 1,000 versus 100,000 live blocks (target: within 1.5x).
// Run: build/tests/bench/bench_allocator --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
#include <benchmark/benchmark.h>
#include <zlib.h>

#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <unordered_map>
#include <vector>

#include "vramtrace/caching_allocator.h"
#include "vramtrace/sim_device.h"

using namespace vramtrace;

namespace {

void BM_CacheHitPair(benchmark::State& state) {
  SimulatedDevice dev;
  CachingAllocator a(dev, AllocatorSettings{});
  const auto size = static_cast<std::uint64_t>(state.range(0));
  DevicePtr warm = 0;
  a.allocate(size, {}, &warm);
  a.deallocate(warm);
  for (auto _ : state) {
    DevicePtr p = 0;
    a.allocate(size, {}, &p);
    benchmark::DoNotOptimize(p);
    a.deallocate(p);
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_CacheHitPair)->Arg(4096)->Arg(4 * 1024 * 1024)->Arg(64 * 1024 * 1024);
// The same pairs with a fixed count, for instruction counts under callgrind (docs/benchmarks.md):
// with --toggle-collect on this function, instructions / 100,000 = instructions per pair.
BENCHMARK(BM_CacheHitPair)
    ->Name("BM_CacheHitPairFixed")
    ->Arg(4096)
    ->Arg(4 * 1024 * 1024)
    ->Arg(64 * 1024 * 1024)
    ->Iterations(100000);

// One trace operation, resolved ahead of time to a slot so that only the allocator is measured.
struct Op {
  enum Kind : std::uint8_t { alloc, free, segment } kind;
  std::uint32_t slot;
  std::uint64_t size;
  std::uint64_t stream;
  DevicePtr addr;
};

struct LoadedTrace {
  std::vector<Op> ops;
  std::size_t slots = 0;
  std::size_t events = 0;  // trace entries, as replay counts them
};

LoadedTrace load_trace(const std::string& path) {
  LoadedTrace t;
  gzFile f = gzopen(path.c_str(), "rb");
  if (f == nullptr) return t;
  std::vector<char> buf(1 << 20);
  std::unordered_map<std::uint64_t, std::uint32_t> slot_of;
  std::vector<std::uint32_t> free_slots;
  bool header = true;
  while (gzgets(f, buf.data(), static_cast<int>(buf.size())) != nullptr) {
    if (header) {
      header = false;
      continue;
    }
    auto j = nlohmann::json::parse(buf.data());
    const std::string action = j["action"];
    const std::uint64_t addr = j["addr"], size = j["size"], stream = j["stream"];
    ++t.events;
    if (action == "alloc") {
      std::uint32_t slot;
      if (!free_slots.empty()) {
        slot = free_slots.back();
        free_slots.pop_back();
      } else {
        slot = static_cast<std::uint32_t>(t.slots++);
      }
      slot_of[addr] = slot;
      t.ops.push_back({Op::alloc, slot, size, stream, addr});
    } else if (action == "free_completed") {
      const std::uint32_t slot = slot_of.at(addr);
      slot_of.erase(addr);
      free_slots.push_back(slot);
      t.ops.push_back({Op::free, slot, size, stream, addr});
    } else if (action == "segment_alloc") {
      t.ops.push_back({Op::segment, 0, size, stream, addr});
    }
  }
  gzclose(f);
  return t;
}

void BM_ReplayThroughAllocator(benchmark::State& state, const char* name) {
  static std::unordered_map<std::string, LoadedTrace> cache;
  auto& trace = cache[name];
  if (trace.ops.empty()) trace = load_trace(std::string(VRAMTRACE_TEST_DATA_DIR) + "/torch-h200/" + name);
  if (trace.ops.empty()) {
    state.SkipWithError("trace not found");
    return;
  }
  std::vector<DevicePtr> slots(trace.slots);
  for (auto _ : state) {
    state.PauseTiming();
    SimulatedDevice::Options o;
    o.capacity_bytes = 150 * kGiB;
    SimulatedDevice dev(o);
    CachingAllocator a(dev, AllocatorSettings{});
    state.ResumeTiming();
    for (const Op& op : trace.ops) {
      switch (op.kind) {
        case Op::segment:
          dev.plan_address(op.size, op.addr);
          break;
        case Op::alloc:
          a.allocate(op.size, StreamId{op.stream}, &slots[op.slot]);
          break;
        case Op::free:
          a.deallocate(slots[op.slot]);
          break;
      }
    }
    state.PauseTiming();
    if (a.stats().num_device_alloc == 0) state.SkipWithError("replay did nothing");
    state.ResumeTiming();
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * trace.events));
  state.counters["trace_events"] = static_cast<double>(trace.events);
}
BENCHMARK_CAPTURE(BM_ReplayThroughAllocator, gpt2, "gpt2_train.torchtrace.jsonl.gz")->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_ReplayThroughAllocator, resnet50, "resnet50_train.torchtrace.jsonl.gz")
    ->Unit(benchmark::kMillisecond);

// Random frees and allocations (sizes 512 B .. 256 KiB, log-uniform) around a steady live set.
void BM_LiveBlocks(benchmark::State& state) {
  const auto live_count = static_cast<std::size_t>(state.range(0));
  SimulatedDevice::Options o;
  o.capacity_bytes = 1024 * kGiB;
  SimulatedDevice dev(o);
  CachingAllocator a(dev, AllocatorSettings{});
  std::mt19937_64 rng(42);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  auto random_size = [&] { return static_cast<std::uint64_t>(512.0 * std::exp(unit(rng) * std::log(512.0))); };
  std::vector<DevicePtr> live(live_count);
  for (auto& p : live) a.allocate(random_size(), {}, &p);
  // Pre-draw the random choices so that the loop measures the allocator only.
  constexpr std::size_t kDraws = 1 << 16;
  std::vector<std::uint32_t> victims(kDraws);
  std::vector<std::uint64_t> sizes(kDraws);
  for (std::size_t i = 0; i < kDraws; ++i) {
    victims[i] = static_cast<std::uint32_t>(rng() % live_count);
    sizes[i] = random_size();
  }
  std::size_t i = 0;
  for (auto _ : state) {
    const std::size_t k = i++ & (kDraws - 1);
    DevicePtr& p = live[victims[k]];
    a.deallocate(p);
    a.allocate(sizes[k], {}, &p);
  }
  state.SetItemsProcessed(state.iterations() * 2);  // one free and one allocation per iteration
}
BENCHMARK(BM_LiveBlocks)->Arg(1000)->Arg(100000);

// N live blocks stay allocated and untouched (weights, caches); a working set of 64 slots is freed
// and reallocated at random (activations). Measures whether the allocator's own structures (free
// tree, address table) slow down as the live set grows, apart from the cache misses of touching
// N random blocks, which BM_LiveBlocks includes.
void BM_LiveBlocksWorkingSet(benchmark::State& state) {
  const auto live_count = static_cast<std::size_t>(state.range(0));
  SimulatedDevice::Options o;
  o.capacity_bytes = 1024 * kGiB;
  SimulatedDevice dev(o);
  CachingAllocator a(dev, AllocatorSettings{});
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  auto random_size = [&] { return static_cast<std::uint64_t>(512.0 * std::exp(unit(rng) * std::log(512.0))); };
  std::vector<DevicePtr> held(live_count);
  constexpr std::size_t kWorking = 64;
  std::vector<DevicePtr> working(kWorking);
  // Interleave so that held and working blocks share segments, as weights and activations do.
  for (std::size_t i = 0; i < live_count; ++i) {
    a.allocate(random_size(), {}, &held[i]);
    if (i % (live_count / kWorking) == 0)
      a.allocate(random_size(), {}, &working[(i / (live_count / kWorking)) % kWorking]);
  }
  constexpr std::size_t kDraws = 1 << 16;
  std::vector<std::uint32_t> victims(kDraws);
  std::vector<std::uint64_t> sizes(kDraws);
  for (std::size_t i = 0; i < kDraws; ++i) {
    victims[i] = static_cast<std::uint32_t>(rng() % kWorking);
    sizes[i] = random_size();
  }
  std::size_t i = 0;
  for (auto _ : state) {
    const std::size_t k = i++ & (kDraws - 1);
    DevicePtr& p = working[victims[k]];
    a.deallocate(p);
    a.allocate(sizes[k], {}, &p);
  }
  state.SetItemsProcessed(state.iterations() * 2);
}
BENCHMARK(BM_LiveBlocksWorkingSet)->Arg(1000)->Arg(100000);

}  // namespace

BENCHMARK_MAIN();
