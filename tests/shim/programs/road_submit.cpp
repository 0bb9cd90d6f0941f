// Work that counts as "on another stream" although it names the legacy stream, and captures
// begun by the older entry points (Note [work on another stream], Note [capture]): a program
// linked against the fake driver reuses a block on the legacy stream at once, then submits
// ROAD_CASE on the legacy stream and allocates again:
//   plain  a launch on the legacy stream: no switch, the next reuse needs no synchronisation;
//   peer   a copy between devices (cuMemcpyPeerAsync): it runs on the other device's stream too;
//   pdl    a launch with programmatic stream serialization allowed (cuLaunchKernelEx): it may
//          overlap the work before it;
//   v1     a capture begun by cuStreamBeginCapture (v1, global mode): an allocation during it
//          gets the driver's error, as without the shim, never a block of the cache;
//   graph  the same with cuStreamBeginCaptureToGraph.
// The harness compares the shim's counters (test_shim.cpp).
#define __CUDA_API_VERSION_INTERNAL 1
#include <cuda.h>

#include <cstring>
#include <string>

#include "road.h"

int main() {
  const bool shim = under_shim();
  const char* c = std::getenv("ROAD_CASE");
  const std::string which = c ? c : "plain";
  CHECK_EQ(cuInit(0), CUDA_SUCCESS);
  CUcontext ctx = nullptr;
  CHECK_EQ(cuCtxCreate_v2(&ctx, 0, 0), CUDA_SUCCESS);
  CUdeviceptr a = 0, b = 0;
  CHECK_EQ(cuMemAlloc_v2(&a, 1 << 20), CUDA_SUCCESS);
  CHECK_EQ(cuMemFree_v2(a), CUDA_SUCCESS);
  CHECK_EQ(cuMemAlloc_v2(&b, 1 << 20), CUDA_SUCCESS);  // reused at once: one stream so far
  if (shim) CHECK(b == a);
  CUstream s = nullptr;
  CHECK_EQ(cuStreamCreate(&s, 0), CUDA_SUCCESS);
  if (which == "plain") {
    CHECK_EQ(cuLaunchKernel(nullptr, 1, 1, 1, 1, 1, 1, 0, nullptr, nullptr, nullptr), CUDA_SUCCESS);
  } else if (which == "peer") {
    CHECK_EQ(cuMemcpyPeerAsync(b, ctx, b, ctx, 16, nullptr), CUDA_SUCCESS);
  } else if (which == "pdl") {
    CUlaunchAttribute attr;
    std::memset(&attr, 0, sizeof attr);
    attr.id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
    attr.value.programmaticStreamSerializationAllowed = 1;
    CUlaunchConfig cfg;
    std::memset(&cfg, 0, sizeof cfg);
    cfg.gridDimX = cfg.gridDimY = cfg.gridDimZ = cfg.blockDimX = cfg.blockDimY = cfg.blockDimZ = 1;
    cfg.hStream = nullptr;
    cfg.attrs = &attr;
    cfg.numAttrs = 1;
    CHECK_EQ(cuLaunchKernelEx(&cfg, nullptr, nullptr, nullptr), CUDA_SUCCESS);
  } else if (which == "v1" || which == "graph") {
    if (which == "v1")
      CHECK_EQ(cuStreamBeginCapture(s), CUDA_SUCCESS);
    else
      CHECK_EQ(cuStreamBeginCaptureToGraph(s, nullptr, nullptr, nullptr, 0, CU_STREAM_CAPTURE_MODE_GLOBAL),
               CUDA_SUCCESS);
    // A global-mode capture makes cuMemAlloc illegal: the driver's error, not a cached block.
    CUdeviceptr g = 0;
    CHECK_EQ(cuMemAlloc_v2(&g, 1 << 20), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
    CUgraph graph = nullptr;
    CHECK_EQ(cuStreamEndCapture(s, &graph), CUDA_SUCCESS);
  } else {
    std::fprintf(stderr, "road_submit: unknown ROAD_CASE %s\n", which.c_str());
    return 2;
  }
  CHECK_EQ(cuMemFree_v2(b), CUDA_SUCCESS);
  CUdeviceptr d = 0;
  const long syncs = fake_calls("cuCtxSynchronize");
  CHECK_EQ(cuMemAlloc_v2(&d, 1 << 20), CUDA_SUCCESS);
  std::printf("program.syncs_at_reuse %ld\n", fake_calls("cuCtxSynchronize") - syncs);
  CHECK_EQ(cuMemFree_v2(d), CUDA_SUCCESS);
  CHECK_EQ(cuStreamDestroy_v2(s), CUDA_SUCCESS);
  CHECK_EQ(cuCtxDestroy_v2(ctx), CUDA_SUCCESS);
  return 0;
}
