// Cost of call stacks in the shim (shim/src/base/stacks.h) on the CPU machine: cudaMalloc +
// cudaFree pairs through the runtime fast path with the fake libcuda.so.1 of tests/shim, the
// allocation made at a chosen depth of native frames below main (each pair captures one stack;
// frees capture none). Run under the shim with a trace file and each VRAMTRACE_STACKS value,
// interleaved; tests/bench/stacks_bench.py does that and prints the cost per capture:
//   python3 tests/bench/stacks_bench.py --build build --rounds 3
#include <benchmark/benchmark.h>
#include <cuda_runtime_api.h>

#include <cstdlib>

namespace {

#define VT_KEEP_FRAME() __asm__ volatile("" ::: "memory")  // no tail call: the frame stays

__attribute__((noinline)) void* allocate_at(int depth, size_t bytes) {
  if (depth > 0) {
    void* p = allocate_at(depth - 1, bytes);
    VT_KEEP_FRAME();
    return p;
  }
  void* p = nullptr;
  if (cudaMalloc(&p, bytes) != cudaSuccess) std::abort();
  return p;
}

// state.range(0): the frames added below the benchmark's own (about 8: main, the library's loop).
void BM_pair_at_depth(benchmark::State& state) {
  const int depth = static_cast<int>(state.range(0));
  cudaFree(allocate_at(depth, 4096));  // the first allocation creates the context and the pool
  for (auto _ : state) {
    void* p = allocate_at(depth, 4096);
    benchmark::DoNotOptimize(p);
    cudaFree(p);
  }
}
BENCHMARK(BM_pair_at_depth)->Arg(0)->Arg(24)->Arg(56);

}  // namespace

BENCHMARK_MAIN();
