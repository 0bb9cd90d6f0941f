// GPU check program for libvramtrace.so (scripts/gpu-check.sh compat): built with nvcc both with the
// default static cudart and with -cudart shared. It checks what the program sees (data written
// by kernels survives, a freed-and-reallocated buffer is not overwritten while a kernel on another
// stream still reads it: Note [lazy sync before reuse]), counts its own allocation calls for the
// comparison with the shim's stats file, and times cudaMalloc/cudaFree pairs.
//
// Output: "key value" lines (program.cudaMalloc N, ..., check.errors N, time.pair_us X).
// Usage: alloc_check [--quick]
#include <cuda_runtime.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

static long n_malloc = 0, n_free = 0, n_malloc_async = 0, n_free_async = 0;
static long errors = 0;

#define CK(call)                                                                                  \
  do {                                                                                            \
    cudaError_t e_ = (call);                                                                      \
    if (e_ != cudaSuccess) {                                                                      \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); \
      std::exit(1);                                                                               \
    }                                                                                             \
  } while (0)

static void* dmalloc(size_t n) {
  void* p = nullptr;
  ++n_malloc;
  CK(cudaMalloc(&p, n));
  return p;
}
static void dfree(void* p) {
  ++n_free;
  CK(cudaFree(p));
}

__global__ void fill(unsigned* p, size_t n, unsigned seed) {
  for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) p[i] = seed ^ (unsigned)i;
}
__global__ void verify(const unsigned* p, size_t n, unsigned seed, unsigned long long* bad) {
  for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
    if (p[i] != (seed ^ (unsigned)i)) atomicAdd(bad, 1ull);
}
// Spins ~`cycles`, then sums the buffer: a slow reader on another stream.
__global__ void slow_sum(const unsigned* p, size_t n, long long cycles, unsigned long long* out) {
  long long start = clock64();
  while (clock64() - start < cycles) {
  }
  unsigned long long s = 0;
  for (size_t i = threadIdx.x; i < n; i += blockDim.x) s += p[i];
  atomicAdd(out, s);
}

int main(int argc, char** argv) {
  const bool quick = argc > 1 && std::strcmp(argv[1], "--quick") == 0;
  unsigned long long* bad = nullptr;
  CK(cudaMallocManaged(&bad, sizeof *bad));
  *bad = 0;

  // 1. Random alloc/free with data checks.
  std::mt19937 rng(42);
  std::vector<std::pair<unsigned*, size_t>> live;
  const int iters = quick ? 300 : 2000;
  for (int i = 0; i < iters; ++i) {
    size_t words = (size_t(256) << (rng() % 16)) / 4;
    auto* p = static_cast<unsigned*>(dmalloc(words * 4));
    fill<<<64, 256>>>(p, words, (unsigned)i);
    verify<<<64, 256>>>(p, words, (unsigned)i, bad);
    live.push_back({p, words});
    if (live.size() > 16) {
      size_t k = rng() % (live.size() - 1);
      dfree(live[k].first);
      live.erase(live.begin() + (long)k);
    }
  }
  for (auto& b : live) dfree(b.first);
  CK(cudaDeviceSynchronize());
  errors += (long)*bad;

  // 2. Free while a kernel on a non-blocking stream still reads, then reallocate the same size
  //    and overwrite it on the legacy stream. cudaFree's implicit synchronisation makes the
  //    reader finish first; the shim must keep that (lazy sync before reuse).
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  const size_t words = (4u << 20) / 4;
  for (int round = 0; round < 3; ++round) {
    auto* a = static_cast<unsigned*>(dmalloc(words * 4));
    CK(cudaMemset(a, 0, words * 4));
    fill<<<64, 256>>>(a, words, 7);
    CK(cudaDeviceSynchronize());
    unsigned long long* sum = nullptr;
    CK(cudaMallocManaged(&sum, sizeof *sum));
    *sum = 0;
    slow_sum<<<1, 256, 0, s>>>(a, words, 200000000ll, sum);  // ~0.1 s
    dfree(a);
    auto* b = static_cast<unsigned*>(dmalloc(words * 4));
    CK(cudaMemset(b, 0xff, words * 4));
    CK(cudaDeviceSynchronize());
    unsigned long long expect = 0;
    for (size_t i = 0; i < words; ++i) expect += 7u ^ (unsigned)i;
    if (*sum != expect) ++errors;
    dfree(b);
    dfree(sum);
  }

  // 3. Stream-ordered allocations on two streams, one freed on the other stream.
  cudaStream_t s2;
  CK(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
  *bad = 0;
  for (int i = 0; i < (quick ? 100 : 1000); ++i) {
    unsigned* p = nullptr;
    size_t w = (size_t(1024) << (i % 10)) / 4;
    ++n_malloc_async;
    CK(cudaMallocAsync(reinterpret_cast<void**>(&p), w * 4, i % 2 ? s : s2));
    fill<<<32, 256, 0, i % 2 ? s : s2>>>(p, w, (unsigned)i);
    verify<<<32, 256, 0, i % 2 ? s : s2>>>(p, w, (unsigned)i, bad);
    ++n_free_async;
    CK(cudaFreeAsync(p, i % 3 ? s : s2));
  }
  CK(cudaDeviceSynchronize());
  errors += (long)*bad;

  size_t f = 0, t = 0;
  CK(cudaMemGetInfo(&f, &t));

  // 4. Timing: cudaMalloc + cudaFree pairs of 1 MiB (a cache hit under the shim).
  const int pairs = quick ? 1000 : 10000;
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < pairs; ++i) dfree(dmalloc(1 << 20));
  auto t1 = std::chrono::steady_clock::now();
  double us = std::chrono::duration<double, std::micro>(t1 - t0).count() / pairs;

  dfree(bad);
  CK(cudaStreamDestroy(s));
  CK(cudaStreamDestroy(s2));
  std::printf("program.cudaMalloc %ld\nprogram.cudaFree %ld\nprogram.cudaMallocAsync %ld\nprogram.cudaFreeAsync %ld\n",
              n_malloc, n_free, n_malloc_async, n_free_async);
  std::printf("program.cudaMallocManaged 4\n");
  std::printf("check.errors %ld\nmeminfo.free_bytes %zu\nmeminfo.total_bytes %zu\ntime.pair_us %.3f\n", errors, f, t,
              us);
  return errors == 0 ? 0 : 3;
}
