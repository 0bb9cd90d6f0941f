// The driver road (P3): a program linked directly against libcuda.so.1 (the fake), calling
// cuMemAlloc_v2 & co. by their ABI names. Two contexts on two devices: one pool each; destroying a
// context drops its cache; a program's own cuCtxSynchronize ends the lazy-sync epoch.
#define __CUDA_API_VERSION_INTERNAL 1
#include <cuda.h>

#include "road.h"

static Tally tally;

int main() {
  const bool shim = under_shim();
  CHECK_EQ(cuInit(0), CUDA_SUCCESS);
  CUcontext c0 = nullptr, c1 = nullptr;
  CHECK_EQ(cuCtxCreate_v2(&c1, 0, 1), CUDA_SUCCESS);
  CHECK_EQ(cuCtxCreate_v2(&c0, 0, 0), CUDA_SUCCESS);  // c0 current

  CUdeviceptr a = 0, b = 0;
  tally.add("cuMemAlloc_v2", 2);
  CHECK_EQ(cuMemAlloc_v2(&a, 5 << 20), CUDA_SUCCESS);
  CHECK_EQ(cuMemAlloc_v2(&b, 0), CUDA_ERROR_INVALID_VALUE);  // zero bytes keeps the driver's error
  tally.add("cuMemFree_v2");
  CHECK_EQ(cuMemFree_v2(a), CUDA_SUCCESS);
  // The program synchronises itself: the freed block is safe to reuse without another sync.
  tally.add("cuCtxSynchronize");
  CHECK_EQ(cuCtxSynchronize(), CUDA_SUCCESS);
  long syncs = fake_calls("cuCtxSynchronize");
  tally.add("cuMemAlloc_v2");
  CHECK_EQ(cuMemAlloc_v2(&b, 5 << 20), CUDA_SUCCESS);
  if (shim) {
    CHECK(b == a);
    CHECK_EQ(fake_calls("cuCtxSynchronize"), syncs);  // no lazy sync needed
    CHECK_EQ(fake_calls("cuMemAlloc_v2"), 2);         // one segment, plus the zero-byte call forwarded
  }
  size_t f = 0, t = 0;
  tally.add("cuMemGetInfo_v2");
  CHECK_EQ(cuMemGetInfo_v2(&f, &t), CUDA_SUCCESS);
  CHECK_EQ(f, t - (5 << 20));
  if (shim) {
    tally.add("cuMemGetInfo_v2", 2);
    CHECK_EQ(cuMemGetInfo_v2(nullptr, &t), CUDA_SUCCESS);
    CHECK_EQ(cuMemGetInfo_v2(&f, nullptr), CUDA_SUCCESS);
  }

  // Second context, other device: its own pool.
  CHECK_EQ(cuCtxSetCurrent(c1), CUDA_SUCCESS);
  CUdeviceptr d1 = 0;
  tally.add("cuMemAlloc_v2");
  CHECK_EQ(cuMemAlloc_v2(&d1, 1 << 20), CUDA_SUCCESS);
  tally.add("cuMemFree_v2");
  CHECK_EQ(cuMemFree_v2(d1), CUDA_SUCCESS);

  // Stream-ordered memory given back with a plain free keeps cudaFree's guarantee: work on
  // another stream may still use it, so its reuse on the stream it came from synchronises
  // first (two contexts have switched the process to the multi-stream rule).
  CUstream s1 = nullptr;
  CHECK_EQ(cuStreamCreate(&s1, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  CUdeviceptr x = 0, y = 0;
  tally.add("cuMemAllocAsync", 2);
  tally.add("cuMemFree_v2");
  CHECK_EQ(cuMemAllocAsync(&x, 1 << 20, s1), CUDA_SUCCESS);
  CHECK_EQ(cuMemFree_v2(x), CUDA_SUCCESS);
  syncs = fake_calls("cuCtxSynchronize");
  CHECK_EQ(cuMemAllocAsync(&y, 1 << 20, s1), CUDA_SUCCESS);
  if (shim) {
    CHECK(y == x);
    CHECK_EQ(fake_calls("cuCtxSynchronize"), syncs + 1);
  }
  tally.add("cuMemFreeAsync");
  CHECK_EQ(cuMemFreeAsync(y, s1), CUDA_SUCCESS);
  CHECK_EQ(cuStreamSynchronize(s1), CUDA_SUCCESS);
  CHECK_EQ(cuStreamDestroy_v2(s1), CUDA_SUCCESS);

  // Destroying c0 drops its cache; b dies with it, so freeing b afterwards is the driver's error.
  CHECK_EQ(cuCtxSetCurrent(c0), CUDA_SUCCESS);
  tally.add("cuCtxDestroy_v2");
  CHECK_EQ(cuCtxDestroy_v2(c0), CUDA_SUCCESS);
  tally.add("cuMemFree_v2");
  CHECK_EQ(cuMemFree_v2(b), CUDA_ERROR_INVALID_VALUE);
  CHECK_EQ(cuCtxSetCurrent(c1), CUDA_SUCCESS);
  tally.add("cuCtxDestroy_v2");
  CHECK_EQ(cuCtxDestroy_v2(c1), CUDA_SUCCESS);
  CHECK_EQ(fake_live_allocations(), 0);
  if (auto mark = reinterpret_cast<void (*)(const char*)>(dlsym(RTLD_DEFAULT, "vramtrace_mark"))) {
    mark("road_driver done");
    mark("road_driver done");
    tally.add("vramtrace_mark", 2);
  }
  tally.print();
  return 0;
}
