// GPU check of reuse safety (tests/gpu/reuse_check.sh): a correct CUDA program that frees a
// buffer while a kernel on another stream still reads it and allocates the same size at once.
// cudaFree synchronises the device, so natively the reader has finished before the free returns;
// a cache that hands the block out again without that guarantee lets the new owner overwrite it
// while it is read. The new owner writes on the legacy stream ("legacy") or on a second
// non-blocking stream ("side"). A third variant ("async") allocates both buffers with
// cudaMallocAsync on the writer's stream and frees the first with a plain cudaFree (legal for
// stream-ordered memory), so the next cudaMallocAsync on that stream may find the same block.
// Prints "wrong N of T" per writer.
//
// `reuse_check switch`: one trial of the first work on another stream, in a process that so far
// put work only on the legacy stream (the shim's lazy_sync reuses at once there): a slow reader on
// the legacy stream, the free, the reallocation, then the new owner's write as the first work on
// a non-blocking stream created at start-up and left idle until then (PyTorch's pool streams). A
// non-blocking stream does not wait for legacy work, so only the shim's switch (Note [work on
// another stream]) keeps the reader's data. Prints "switch wrong 0|1 (same address 0|1)"; run it
// in a fresh process per trial.
//
// Usage: reuse_check [TRIALS]  (default 20) | reuse_check switch
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>

#define CK(call)                                                                                  \
  do {                                                                                            \
    cudaError_t e_ = (call);                                                                      \
    if (e_ != cudaSuccess) {                                                                      \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); \
      std::exit(1);                                                                               \
    }                                                                                             \
  } while (0)

__global__ void fill(unsigned* p, size_t n, unsigned v) {
  for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) p[i] = v;
}
// Waits ~`cycles`, then sums the buffer.
__global__ void slow_sum(const unsigned* p, size_t n, long long cycles, unsigned long long* out) {
  long long start = clock64();
  while (clock64() - start < cycles) {
  }
  unsigned long long s = 0;
  for (size_t i = threadIdx.x; i < n; i += blockDim.x) s += p[i];
  atomicAdd(out, s);
}

static int switch_trial() {
  cudaStream_t idle;
  CK(cudaStreamCreateWithFlags(&idle, cudaStreamNonBlocking));
  const size_t words = (8u << 20) / 4;
  unsigned long long* sum = nullptr;
  CK(cudaMallocManaged(&sum, sizeof *sum));
  unsigned* a = nullptr;
  CK(cudaMalloc(&a, words * 4));
  fill<<<128, 256>>>(a, words, 1);
  CK(cudaDeviceSynchronize());
  *sum = 0;
  slow_sum<<<1, 256>>>(a, words, 100000000ll, sum);  // ~50 ms, on the legacy stream
  CK(cudaFree(a));
  unsigned* b = nullptr;
  CK(cudaMalloc(&b, words * 4));
  fill<<<128, 256, 0, idle>>>(b, words, 2);  // the first work on another stream
  CK(cudaDeviceSynchronize());
  std::printf("switch wrong %d (same address %d)\n", *sum != words ? 1 : 0, b == a ? 1 : 0);
  return 0;
}

int main(int argc, char** argv) {
  if (argc > 1 && argv[1][0] == 's') return switch_trial();
  const int trials = argc > 1 ? std::atoi(argv[1]) : 20;
  cudaStream_t reader, writer;
  CK(cudaStreamCreateWithFlags(&reader, cudaStreamNonBlocking));
  CK(cudaStreamCreateWithFlags(&writer, cudaStreamNonBlocking));
  const size_t words = (8u << 20) / 4;
  unsigned long long* sum = nullptr;
  CK(cudaMallocManaged(&sum, sizeof *sum));
  const char* names[] = {"legacy", "side", "async"};
  for (int mode = 0; mode < 3; ++mode) {
    const bool async = mode == 2;
    cudaStream_t ws = mode ? writer : cudaStream_t{};
    int wrong = 0, same_address = 0;
    for (int t = 0; t < trials; ++t) {
      unsigned* a = nullptr;
      if (async)
        CK(cudaMallocAsync(reinterpret_cast<void**>(&a), words * 4, ws));
      else
        CK(cudaMalloc(&a, words * 4));
      fill<<<128, 256, 0, ws>>>(a, words, 1);
      CK(cudaDeviceSynchronize());
      *sum = 0;
      slow_sum<<<1, 256, 0, reader>>>(a, words, 100000000ll, sum);  // ~50 ms
      CK(cudaFree(a));
      unsigned* b = nullptr;
      if (async)
        CK(cudaMallocAsync(reinterpret_cast<void**>(&b), words * 4, ws));
      else
        CK(cudaMalloc(&b, words * 4));
      same_address += b == a;
      fill<<<128, 256, 0, ws>>>(b, words, 2);
      CK(cudaDeviceSynchronize());
      if (*sum != words) ++wrong;
      CK(cudaFree(b));
    }
    std::printf("%s wrong %d of %d (same address %d)\n", names[mode], wrong, trials, same_address);
  }
  return 0;
}
