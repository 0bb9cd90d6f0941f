// Call stacks (shim/src/base/stacks.h): allocations through a known chain of functions,
//   main -> stack_level_1 -> stack_level_2 -> stack_lib_alloc (libstack_lib.so) -> cudaMalloc,
// repeated (one stack, many events); the driver road, main -> stack_driver_alloc ->
// cuMemAlloc_v2; managed memory (a pass-through segment); and threads that each allocate at their
// own recursion depth (distinct stacks recorded at once); an allocation from inside qsort's
// comparator (a libc frame between two of ours) and one from a signal handler (a signal frame,
// which the cached unwinder leaves to libgcc's). The test resolves the frames' addresses with `nm`
// and checks the chain, innermost first.
#define __CUDA_API_VERSION_INTERNAL 1
#include <cuda.h>
#include <cuda_runtime_api.h>

#include <csignal>
#include <cstdlib>
#include <thread>
#include <vector>

#include "road.h"

extern "C" int stack_lib_alloc(void** p, unsigned long bytes);

#define VT_KEEP_FRAME() __asm__ volatile("" ::: "memory")  // no tail call: the frame stays

extern "C" __attribute__((noinline)) void* stack_level_2(unsigned long bytes) {
  void* p = nullptr;
  CHECK_EQ(stack_lib_alloc(&p, bytes), cudaSuccess);
  VT_KEEP_FRAME();
  return p;
}

extern "C" __attribute__((noinline)) void* stack_level_1(unsigned long bytes) {
  void* p = stack_level_2(bytes);
  VT_KEEP_FRAME();
  return p;
}

extern "C" __attribute__((noinline)) CUdeviceptr stack_driver_alloc(unsigned long bytes) {
  CUdeviceptr p = 0;
  CHECK_EQ(cuMemAlloc_v2(&p, bytes), CUDA_SUCCESS);
  VT_KEEP_FRAME();
  return p;
}

extern "C" __attribute__((noinline)) void* stack_recurse(int depth, unsigned long bytes) {
  void* p = depth == 0 ? stack_level_1(bytes) : stack_recurse(depth - 1, bytes);
  VT_KEEP_FRAME();
  return p;
}

void* g_from_qsort = nullptr;
extern "C" __attribute__((noinline)) int stack_compare(const void* a, const void* b) {
  if (g_from_qsort == nullptr) CHECK_EQ(cudaMalloc(&g_from_qsort, 5 << 20), cudaSuccess);
  VT_KEEP_FRAME();
  return *static_cast<const int*>(a) - *static_cast<const int*>(b);
}

void* g_from_signal = nullptr;
// Allocating in a signal handler is not async-signal-safe in general; raise() below delivers it
// synchronously in a single-threaded moment of this test program, where nothing is held.
extern "C" __attribute__((noinline)) void stack_on_signal(int) {
  CHECK_EQ(cudaMalloc(&g_from_signal, 6 << 20), cudaSuccess);
  VT_KEEP_FRAME();
}

int main() {
  Tally tally;
  std::vector<void*> live;
  for (int i = 0; i < 50; ++i) {
    live.push_back(stack_level_1(1 << 20));
    tally.add("chain_allocs");
  }
  for (void* p : live) CHECK_EQ(cudaFree(p), cudaSuccess);
  CUdeviceptr d = stack_driver_alloc(3 << 20);
  tally.add("driver_allocs");
  CHECK_EQ(cuMemFree_v2(d), CUDA_SUCCESS);
  void* managed = nullptr;
  CHECK_EQ(cudaMallocManaged(&managed, 1 << 20, cudaMemAttachGlobal), cudaSuccess);
  CHECK_EQ(cudaFree(managed), cudaSuccess);
  const int threads = 8;
  std::vector<std::thread> ts;
  for (int t = 0; t < threads; ++t) {
    ts.emplace_back([t] {
      for (int i = 0; i < 20; ++i) CHECK_EQ(cudaFree(stack_recurse(t, 4096u << (i % 4))), cudaSuccess);
    });
  }
  for (auto& t : ts) t.join();
  tally.add("thread_allocs", threads * 20);
  int values[] = {3, 1, 2};
  std::qsort(values, 3, sizeof(int), stack_compare);
  CHECK_EQ(cudaFree(g_from_qsort), cudaSuccess);
  std::signal(SIGUSR1, stack_on_signal);
  std::raise(SIGUSR1);
  CHECK_EQ(cudaFree(g_from_signal), cudaSuccess);
  tally.print();
  return 0;
}
