// An allocation sequence that runs out of memory under `limit:64MiB` (shared cudart, device 0):
//   alloc 0: 30 MiB, alloc 1: 20 MiB, free 0, alloc 2: 40 MiB (fits only after the cached 30 MiB
//   segment is released: one counted retry), alloc 3: 10 MiB (60 + 10 > 64: a second retry, then
//   cudaErrorMemoryAllocation).
// It stops the sequence at the first failure and prints "program.failed_at K" (K = index of the
// failed request among the sequence's allocations; -1 if none failed), so that the harness can
// compare with `vramtrace replay --capacity 64MiB` of the same sequence recorded without a cap.
// With ROAD_CAP=1 (run under the cap) it also checks: the driver entry point fails with
// CUDA_ERROR_OUT_OF_MEMORY and cudaMallocAsync with cudaErrorMemoryAllocation, and the trace file
// (VRAMTRACE_OUTPUT, a plain path) already holds the oom line with its snapshot right after the
// failing call returned (the shim writes it before returning), and cuMemCreate of device memory
// is refused over the cap as well.
#include <cuda.h>
#include <cuda_runtime_api.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "road.h"

static bool trace_has_oom_snapshot() {
  const char* path = std::getenv("VRAMTRACE_OUTPUT");
  if (!path) return false;
  std::ifstream f(path);
  std::string line;
  while (std::getline(f, line))
    if (line.find("\"a\":\"oom\"") != std::string::npos &&
        line.find("\"snapshot\":{\"segments\":[") != std::string::npos)
      return true;
  return false;
}

int main() {
  const bool capped = std::getenv("ROAD_CAP") != nullptr;
  // ROAD_FORWARD=1: as PyTorch's tensor-level recorder does, ask the shim to forward every
  // allocation (one cache: the program's).
  if (std::getenv("ROAD_FORWARD")) {
    auto forward = reinterpret_cast<void (*)()>(dlsym(RTLD_DEFAULT, "vramtrace_forward_allocations"));
    CHECK(forward != nullptr);
    forward();
  }
  const size_t MiB = 1 << 20;
  struct Op {
    bool alloc;
    int slot;
    size_t bytes;
  };
  const std::vector<Op> ops = {
      {true, 0, 30 * MiB}, {true, 1, 20 * MiB}, {false, 0, 0}, {true, 2, 40 * MiB}, {true, 3, 10 * MiB}};
  void* p[4] = {};
  int alloc_index = 0, failed_at = -1;
  cudaError_t failure = cudaSuccess;
  for (const Op& op : ops) {
    if (!op.alloc) {
      CHECK_EQ(cudaFree(p[op.slot]), cudaSuccess);
      p[op.slot] = nullptr;
      continue;
    }
    cudaError_t e = cudaMalloc(&p[op.slot], op.bytes);
    if (e != cudaSuccess) {
      failed_at = alloc_index;
      failure = e;
      CHECK(p[op.slot] == nullptr);
      break;
    }
    ++alloc_index;
  }
  std::printf("program.failed_at %d\n", failed_at);
  if (capped) {
    CHECK_EQ(failed_at, 3);
    CHECK_EQ(failure, cudaErrorMemoryAllocation);
    std::printf("program.trace_has_oom %d\n", trace_has_oom_snapshot() ? 1 : 0);
    // The driver entry point, as a -lcuda or XLA program calls it.
    void* cu = dlopen("libcuda.so.1", RTLD_NOW);
    auto alloc = reinterpret_cast<CUresult (*)(CUdeviceptr*, size_t)>(dlsym(cu, "cuMemAlloc_v2"));
    CHECK(alloc != nullptr);
    CUdeviceptr d = 0;
    CHECK_EQ(alloc(&d, 100 * MiB), CUDA_ERROR_OUT_OF_MEMORY);
    void* q = nullptr;
    CHECK_EQ(cudaMallocAsync(&q, 100 * MiB, nullptr), cudaErrorMemoryAllocation);
    // Virtual memory (PyTorch's expandable segments) counts too: refused before the driver gives it.
    auto create = reinterpret_cast<CUresult (*)(CUmemGenericAllocationHandle*, size_t, const CUmemAllocationProp*,
                                                unsigned long long)>(dlsym(cu, "cuMemCreate"));
    auto release = reinterpret_cast<CUresult (*)(CUmemGenericAllocationHandle)>(dlsym(cu, "cuMemRelease"));
    CHECK(create != nullptr && release != nullptr);
    CUmemAllocationProp prop = {};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = 0;
    CUmemGenericAllocationHandle h = 0;
    CHECK_EQ(create(&h, 20 * MiB, &prop, 0), CUDA_ERROR_OUT_OF_MEMORY);
    CHECK_EQ(create(&h, 2 * MiB, &prop, 0), CUDA_SUCCESS);  // 2 MiB of the 4 MiB left
    CHECK_EQ(release(h), CUDA_SUCCESS);
    // What still fits does: 64 - 60 = 4 MiB left, and a 2 MiB small-pool segment fits in it.
    CHECK_EQ(cudaMalloc(&q, 1000), cudaSuccess);
    CHECK_EQ(cudaFree(q), cudaSuccess);
  }
  for (void* x : p)
    if (x) CHECK_EQ(cudaFree(x), cudaSuccess);
  std::fflush(stdout);
  return 0;
}
