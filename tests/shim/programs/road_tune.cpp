// A program whose memory need depends on its allocator settings, for `vramtrace tune`: it
// allocates three 30 MiB buffers, or only one when PYTORCH_CUDA_ALLOC_CONF names
// max_split_size_mb:20, and exits 1 at the first failed cudaMalloc (as a program dies of its OOM).
// Under a 64 MiB cap its defaults run out of memory and that one setting fits.
#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

int main() {
  const char* conf = std::getenv("PYTORCH_CUDA_ALLOC_CONF");
  const int buffers = conf && std::strstr(conf, "max_split_size_mb:20") ? 1 : 3;
  void* p[3] = {};
  for (int i = 0; i < buffers; ++i) {
    if (cudaMalloc(&p[i], 30u << 20) != cudaSuccess) {
      std::printf("program.oom_at %d\n", i);
      return 1;
    }
  }
  for (void* x : p)
    if (x) cudaFree(x);
  std::printf("program.buffers %d\n", buffers);
  return 0;
}
