// Out of memory (shared cudart, a fake device of FAKECUDA_TOTAL_MB=48): what the program sees
// must not change under the shim.
//  - a freed 30 MiB block sits in our cache; a 40 MiB request only fits if the allocator releases
//    the cache first (release-and-retry);
//  - requests that do not fit fail with cudaErrorMemoryAllocation, as without us;
//  - a 6 MiB request makes the allocator ask for a 20 MiB segment (PyTorch's rule), which does not
//    fit; the shim then forwards the exact request (Note [no spurious OOM]), which does.
#include <cuda_runtime_api.h>

#include "road.h"

int main() {
  void *a = nullptr, *b = nullptr, *c = nullptr, *d = nullptr;
  CHECK_EQ(cudaMalloc(&a, 30 << 20), cudaSuccess);
  CHECK_EQ(cudaFree(a), cudaSuccess);
  CHECK_EQ(cudaMalloc(&b, 40 << 20), cudaSuccess);
  CHECK_EQ(cudaMalloc(&c, 10 << 20), cudaErrorMemoryAllocation);  // 40 + 10 > 48
  CHECK(c == nullptr);
  CHECK_EQ(cudaMalloc(&c, 64 << 20), cudaErrorMemoryAllocation);
  CHECK_EQ(cudaMalloc(&d, 6 << 20), cudaSuccess);  // 40 + 6 <= 48
  CHECK_EQ(cudaFree(d), cudaSuccess);
  CHECK_EQ(cudaFree(b), cudaSuccess);
  CHECK_EQ(cudaMalloc(&c, 10 << 20), cudaSuccess);
  CHECK_EQ(cudaFree(c), cudaSuccess);
  std::printf("program.cudaMalloc 6\n");
  return 0;
}
