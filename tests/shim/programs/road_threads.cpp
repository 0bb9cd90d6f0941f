// Many threads (shared cudart): cudaMalloc/cudaFree of mixed sizes, and stream-ordered
// allocations on each thread's per-thread default stream (_ptsz, stream 0), with data checks.
#include <cuda_runtime_api.h>

#include <atomic>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "road.h"

extern "C" cudaError_t cudaMallocAsync_ptsz(void** p, size_t size, cudaStream_t s);
extern "C" cudaError_t cudaFreeAsync_ptsz(void* p, cudaStream_t s);

constexpr int kThreads = 8;
constexpr int kIters = 200;

int main() {
  std::atomic<long> mallocs{0}, frees{0}, async_allocs{0}, async_frees{0};
  std::vector<std::thread> ts;
  for (int t = 0; t < kThreads; ++t) {
    ts.emplace_back([&, t] {
      std::mt19937 rng(t);
      std::vector<void*> live;
      for (int i = 0; i < kIters; ++i) {
        size_t n = 512u << (rng() % 12);
        void* p = nullptr;
        CHECK_EQ(cudaMalloc(&p, n), cudaSuccess);
        ++mallocs;
        unsigned char tag = static_cast<unsigned char>(t * 31 + i);
        std::vector<unsigned char> in(64, tag), out(64);
        CHECK_EQ(cudaMemcpy(p, in.data(), 64, cudaMemcpyHostToDevice), cudaSuccess);
        live.push_back(p);
        if (live.size() > 4) {
          size_t k = rng() % (live.size() - 1);  // never the block just written
          CHECK_EQ(cudaFree(live[k]), cudaSuccess);
          ++frees;
          live.erase(live.begin() + static_cast<long>(k));
        }
        CHECK_EQ(cudaMemcpy(out.data(), p, 64, cudaMemcpyDeviceToHost), cudaSuccess);
        CHECK(in == out);
        void* q = nullptr;
        CHECK_EQ(cudaMallocAsync_ptsz(&q, 1024, nullptr), cudaSuccess);
        ++async_allocs;
        CHECK_EQ(cudaFreeAsync_ptsz(q, nullptr), cudaSuccess);
        ++async_frees;
      }
      for (void* p : live) {
        CHECK_EQ(cudaFree(p), cudaSuccess);
        ++frees;
      }
    });
  }
  for (auto& th : ts) th.join();
  size_t f = 0, total = 0;
  CHECK_EQ(cudaMemGetInfo(&f, &total), cudaSuccess);
  CHECK_EQ(f, total);
  Tally tally;
  tally.add("cudaMalloc", mallocs);
  tally.add("cudaFree", frees);
  tally.add("cudaMallocAsync_ptsz", async_allocs);
  tally.add("cudaFreeAsync_ptsz", async_frees);
  tally.print();
  return 0;
}
