// Cache-hit cost of libvramtrace.so on the CPU machine: cudaMalloc + cudaFree pairs through the
// whole path (our runtime hook -> the fake shared cudart -> our driver hook via the resolver ->
// CachingAllocator), with the fake libcuda.so.1 of tests/shim. Run it under the shim:
//   LD_LIBRARY_PATH=<build>/tests/shim/fakelib LD_PRELOAD=<build>/shim/libvramtrace.so
//   [VRAMTRACE_CONF=reuse:stream_ordered] <build>/tests/shim/roads/bench_shim
// Without LD_PRELOAD it measures the fake driver itself (calloc/free of host memory), which is
// only a sanity baseline: the real driver costs ~74 us per pair (docs/h200.md).
#include <benchmark/benchmark.h>
#include <cuda_runtime_api.h>

#include <cstdlib>
#include <thread>
#include <vector>

extern "C" cudaError_t cudaMallocAsync_ptsz(void** p, size_t size, cudaStream_t s);
extern "C" cudaError_t cudaFreeAsync_ptsz(void* p, cudaStream_t s);

static void BM_malloc_free_pair(benchmark::State& state) {
  const size_t n = static_cast<size_t>(state.range(0));
  void* p = nullptr;
  if (cudaMalloc(&p, n) != cudaSuccess) state.SkipWithError("cudaMalloc failed");
  cudaFree(p);
  for (auto _ : state) {
    cudaMalloc(&p, n);
    benchmark::DoNotOptimize(p);
    cudaFree(p);
  }
}
BENCHMARK(BM_malloc_free_pair)->Arg(512)->Arg(1 << 20)->Arg(20 << 20);

// 64 live slots, sizes log-uniform 512 B .. 64 MiB (the random mix of docs/h200.md).
static void BM_random_mix(benchmark::State& state) {
  std::vector<void*> slots(64, nullptr);
  unsigned x = 12345;
  for (auto _ : state) {
    x = x * 1103515245u + 12345u;
    unsigned i = (x >> 8) % 64;
    if (slots[i]) {
      cudaFree(slots[i]);
      slots[i] = nullptr;
    } else {
      size_t n = size_t(512) << ((x >> 16) % 17);
      cudaMalloc(&slots[i], n);
    }
  }
  for (void* p : slots)
    if (p) cudaFree(p);
}
BENCHMARK(BM_random_mix);

static void BM_async_pair_per_thread_stream(benchmark::State& state) {
  void* p = nullptr;
  for (auto _ : state) {
    cudaMallocAsync_ptsz(&p, 1 << 20, nullptr);
    benchmark::DoNotOptimize(p);
    cudaFreeAsync_ptsz(p, nullptr);
  }
}
BENCHMARK(BM_async_pair_per_thread_stream)->Threads(1)->Threads(2);

BENCHMARK_MAIN();
