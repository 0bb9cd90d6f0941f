// Many threads allocate and free device memory at once, so that the driver hands a freed address
// to another thread at once. Run under the shim with reuse:none (every allocation forwarded to
// the driver), the trace must describe the memory without contradiction (no two live segments at
// one address). Usage: threads_reuse_check THREADS OPS
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <random>
#include <thread>
#include <vector>

int main(int argc, char** argv) {
  const int threads = argc > 1 ? std::atoi(argv[1]) : 8;
  const int ops = argc > 2 ? std::atoi(argv[2]) : 2000;
  cudaFree(nullptr);  // the context, before the threads
  std::vector<std::thread> pool;
  std::vector<int> failures(threads, 0);
  for (int t = 0; t < threads; ++t)
    pool.emplace_back([t, ops, &failures] {
      std::mt19937_64 rng(1234 + t);
      std::vector<void*> live;
      for (int i = 0; i < ops; ++i) {
        if (live.empty() || rng() % 2 == 0) {
          void* p = nullptr;
          const size_t bytes = size_t{4096} << (rng() % 6);  // 4 KiB .. 128 KiB: few distinct sizes
          if (cudaMalloc(&p, bytes) != cudaSuccess)
            ++failures[t];
          else
            live.push_back(p);
        } else {
          const size_t k = rng() % live.size();
          if (cudaFree(live[k]) != cudaSuccess) ++failures[t];
          live.erase(live.begin() + static_cast<long>(k));
        }
      }
      for (void* p : live) cudaFree(p);
    });
  for (auto& th : pool) th.join();
  int bad = 0;
  for (int f : failures) bad += f;
  std::printf("threads_reuse_check: %d threads x %d operations, %d failures\n", threads, ops, bad);
  return bad == 0 ? 0 : 1;
}
