// Two driver contexts on one device share the device's cap (VRAMTRACE_CONF=limit:100MiB, run by
// tests/shim "memory cap: contexts ..."): the first fills it with 20 MiB allocations, the second
// then gets none and sees a full capped device; destroying the first context gives its memory back
// to the cap. Also several threads racing for the last bytes of the cap in one context never pass
// it. Prints program.<name> N for the harness.
#define __CUDA_API_VERSION_INTERNAL 1
#include <cuda.h>

#include <atomic>
#include <thread>
#include <vector>

#include "road.h"

static long fill(std::vector<CUdeviceptr>& keep, size_t bytes) {
  long n = 0;
  for (;;) {
    CUdeviceptr p = 0;
    CUresult r = cuMemAlloc_v2(&p, bytes);
    if (r == CUDA_ERROR_OUT_OF_MEMORY) return n;
    CHECK_EQ(r, CUDA_SUCCESS);
    keep.push_back(p);
    if (++n > 1000) return n;  // no cap in force: stop anyway
  }
}

int main() {
  Tally t;
  const size_t MiB = 1 << 20;
  CHECK_EQ(cuInit(0), CUDA_SUCCESS);
  CUcontext a = nullptr, b = nullptr;
  CHECK_EQ(cuCtxCreate_v2(&a, 0, 0), CUDA_SUCCESS);
  std::vector<CUdeviceptr> in_a, in_b;
  t.add("a", fill(in_a, 20 * MiB));
  CHECK_EQ(cuCtxCreate_v2(&b, 0, 0), CUDA_SUCCESS);  // b current, same device
  t.add("b", fill(in_b, 20 * MiB));
  size_t f = 0, tot = 0;
  CHECK_EQ(cuMemGetInfo_v2(&f, &tot), CUDA_SUCCESS);
  t.add("b.free", static_cast<long>(f));
  t.add("b.total", static_cast<long>(tot));
  CHECK_EQ(cuCtxDestroy_v2(a), CUDA_SUCCESS);
  CHECK_EQ(cuCtxSetCurrent(b), CUDA_SUCCESS);
  t.add("b.after_destroy", fill(in_b, 20 * MiB));
  for (CUdeviceptr p : in_b) CHECK_EQ(cuMemFree_v2(p), CUDA_SUCCESS);
  in_b.clear();

  // Threads in one context race for 2 MiB allocations; with caching, frees stay in b's cache.
  std::atomic<long> got{0};
  std::vector<std::thread> threads;
  std::vector<std::vector<CUdeviceptr>> kept(8);
  for (int i = 0; i < 8; ++i) {
    threads.emplace_back([&, i] {
      CHECK_EQ(cuCtxSetCurrent(b), CUDA_SUCCESS);
      got += fill(kept[i], 12 * MiB);
    });
  }
  for (auto& th : threads) th.join();
  t.add("threads", got.load());
  t.print();
  return 0;
}
