// NVIDIA's real cudart 13 (static or shared, from the toolkit) against the fake driver. The real
// runtime refuses to initialise without the driver's private export tables, but it resolves all
// of its ~440 entry points first (docs/interposition.md: "What cudart 13 asks the driver for",
// "Testing without a GPU"): through dlsym of
// "cuGetProcAddress_v2", the empty probe, the self-lookup, then the resolver it got. Under the shim
// all of that must go through our wrappers. The program prints what cudaMalloc returned.
#include <cuda_runtime_api.h>

#include <cstdio>

int main() {
  void* p = nullptr;
  cudaError_t e = cudaMalloc(&p, 1 << 20);
  std::printf("program.cudaMalloc 1\nprogram.error %d\n", static_cast<int>(e));
  return 0;
}
