// The runtime road: a program using the CUDA runtime API, linked with the fake cudart either
// shared (libcudart.so.13, versioned exports: road P1) or static (road P2, only the driver-level
// hooks can see it). It asserts what the program sees, which must be the same with and without
// the shim, plus what only holds under the shim; the harness compares the "program." tally with
// the shim's stats file.
#include <cuda_runtime_api.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "road.h"

extern "C" cudaError_t cudaMallocAsync_ptsz(void** p, size_t size, cudaStream_t s);
extern "C" cudaError_t cudaFreeAsync_ptsz(void* p, cudaStream_t s);

static Tally tally;

static void* dmalloc(size_t n) {
  void* p = nullptr;
  tally.add("cudaMalloc");
  CHECK_EQ(cudaMalloc(&p, n), cudaSuccess);
  CHECK(p != nullptr);
  CHECK_EQ(reinterpret_cast<uintptr_t>(p) % 256, 0);
  return p;
}
static cudaError_t dfree(void* p) {
  tally.add("cudaFree");
  return cudaFree(p);
}

static void write_read(void* d, size_t n, unsigned char seed) {
  std::vector<unsigned char> in(n), out(n);
  for (size_t i = 0; i < n; ++i) in[i] = static_cast<unsigned char>(seed + i * 7);
  CHECK_EQ(cudaMemcpy(d, in.data(), n, cudaMemcpyHostToDevice), cudaSuccess);
  CHECK_EQ(cudaMemcpy(out.data(), d, n, cudaMemcpyDeviceToHost), cudaSuccess);
  CHECK(in == out);
}

int main() {
  // ROAD_EXPECT (set by the harness): lazy (default policy), device (reuse:device_sync), ordered,
  // none, off (no caching). ROAD_EARLY_STREAM=1: create a stream before the first allocation and
  // put work on it; ROAD_EARLY_STREAM=idle: create it and leave it idle (PyTorch's pool streams).
  const char* expect_env = std::getenv("ROAD_EXPECT");
  const std::string expect = expect_env ? expect_env : (under_shim() ? "lazy" : "off");
  const bool shim = expect == "lazy" || expect == "device" || expect == "ordered";  // blocks come from our cache
  const char* early_env = std::getenv("ROAD_EARLY_STREAM");
  const bool early_stream = early_env && std::string(early_env) == "1";
  const bool idle_stream = early_env && std::string(early_env) == "idle";
  cudaStream_t early = nullptr;
  if (early_stream || idle_stream) CHECK_EQ(cudaStreamCreate(&early), cudaSuccess);
  // Work on the stream (zero bytes: work as far as the shim can tell). Work on the legacy stream,
  // which the runtime names by a handle of its own here, is not work on another stream.
  CHECK_EQ(cudaMemsetAsync(nullptr, 0, 0, nullptr), cudaSuccess);
  tally.add("cudaMemsetAsync");
  if (early_stream) {
    CHECK_EQ(cudaMemsetAsync(nullptr, 0, 0, early), cudaSuccess);
    tally.add("cudaMemsetAsync");
  }
  // One lazy synchronisation before the reuse below: always under reuse:device_sync; under
  // lazy_sync only once the program has put work on a second stream (Note [work on another
  // stream]): a stream that was only created changes nothing.
  const long expected_syncs = expect == "device" || (expect == "lazy" && early_stream) ? 1 : 0;
  // The fake driver's contexts may take memory of their own (FAKECUDA_CONTEXT_MB): used, never free.
  const char* context_env = std::getenv("FAKECUDA_CONTEXT_MB");
  const size_t context = context_env ? static_cast<size_t>(std::strtoull(context_env, nullptr, 10)) << 20 : 0;
  size_t free0 = 0, total = 0;
  CHECK_EQ(cudaMemGetInfo(&free0, &total), cudaSuccess);
  CHECK_EQ(free0, total - context);

  // Allocate, use, free, allocate the same size again: under the shim the second one is a cache
  // hit, preceded by expected_syncs lazy synchronisations (Note [lazy sync before reuse]).
  void* a = dmalloc(1 << 20);
  write_read(a, 1 << 20, 1);
  size_t f = 0;
  CHECK_EQ(cudaMemGetInfo(&f, &total), cudaSuccess);
  CHECK_EQ(f, total - context - (1 << 20));  // idle cached bytes count as free under the shim
  CHECK_EQ(dfree(a), cudaSuccess);
  long syncs_before = fake_calls("cuCtxSynchronize");
  void* b = dmalloc(1 << 20);
  write_read(b, 1 << 20, 2);
  if (shim) {
    CHECK_EQ(fake_calls("cuMemAlloc_v2") + fake_calls("cuMemCreate"), 1);  // one segment (or page)
    CHECK(b == a);
    CHECK_EQ(fake_calls("cuCtxSynchronize") - syncs_before, expected_syncs);
  }

  // Batched: free several blocks, then reuse them all: one synchronisation at most.
  std::vector<void*> v;
  for (int i = 0; i < 4; ++i) v.push_back(dmalloc(4096));
  for (void* p : v) CHECK_EQ(dfree(p), cudaSuccess);
  syncs_before = fake_calls("cuCtxSynchronize");
  for (int i = 0; i < 4; ++i) v[i] = dmalloc(4096);
  if (shim) CHECK(fake_calls("cuCtxSynchronize") - syncs_before <= 1);
  for (void* p : v) CHECK_EQ(dfree(p), cudaSuccess);

  // Zero bytes: success and NULL, as cudart does.
  void* z = reinterpret_cast<void*>(1);
  tally.add("cudaMalloc");
  CHECK_EQ(cudaMalloc(&z, 0), cudaSuccess);
  CHECK(z == nullptr);

  // Double free and unknown pointers: the real API's error.
  CHECK_EQ(dfree(b), cudaSuccess);
  CHECK_EQ(dfree(b), cudaErrorInvalidValue);
  CHECK_EQ(dfree(reinterpret_cast<void*>(0x1234000)), cudaErrorInvalidValue);

  // Everything freed: all memory is free again (the cache counts as free).
  CHECK_EQ(cudaMemGetInfo(&f, &total), cudaSuccess);
  CHECK_EQ(f, total - context);
  if (under_shim() && expect != "off") {
    size_t t2 = 0;
    CHECK_EQ(cudaMemGetInfo(nullptr, &t2), cudaSuccess);  // NULL out pointers accepted
    CHECK_EQ(t2, total);
    CHECK_EQ(cudaMemGetInfo(&f, nullptr), cudaSuccess);
  }

  // Managed and pitched memory: passed through (traced), freed with cudaFree.
  void* m = nullptr;
  tally.add("cudaMallocManaged");
  CHECK_EQ(cudaMallocManaged(&m, 8192, cudaMemAttachGlobal), cudaSuccess);
  write_read(m, 8192, 3);
  CHECK_EQ(dfree(m), cudaSuccess);
  void* pp = nullptr;
  size_t pitch = 0;
  tally.add("cudaMallocPitch");
  CHECK_EQ(cudaMallocPitch(&pp, &pitch, 100, 10), cudaSuccess);
  CHECK(pitch >= 100);
  CHECK_EQ(dfree(pp), cudaSuccess);
  void* h = nullptr;
  tally.add("cudaHostAlloc");
  CHECK_EQ(cudaHostAlloc(&h, 4096, 0), cudaSuccess);
  std::memset(h, 1, 4096);
  tally.add("cudaFreeHost");
  CHECK_EQ(cudaFreeHost(h), cudaSuccess);

  // Stream-ordered memory on two streams, one freed on the other stream.
  cudaStream_t s1 = nullptr, s2 = nullptr;
  CHECK_EQ(cudaStreamCreate(&s1), cudaSuccess);
  CHECK_EQ(cudaStreamCreate(&s2), cudaSuccess);
  void* x = nullptr;
  void* y = nullptr;
  tally.add("cudaMallocAsync", 2);
  CHECK_EQ(cudaMallocAsync(&x, 1000, s1), cudaSuccess);
  CHECK_EQ(cudaMallocAsync(&y, 1000, s2), cudaSuccess);
  write_read(x, 1000, 4);
  tally.add("cudaFreeAsync", 2);
  CHECK_EQ(cudaFreeAsync(x, s1), cudaSuccess);
  CHECK_EQ(cudaFreeAsync(y, s1), cudaSuccess);  // cross-stream free
  // Per-thread default stream (cudaMallocAsync_ptsz with stream 0) from two threads.
  // Each thread's stream 0 is its own stream, so thread 2 must not get thread 1's freed block
  // (nothing orders thread 2's work after thread 1's).
  void* seen[2] = {};
  for (int t = 0; t < 2; ++t) {
    std::thread th([&seen, t] {
      void* q = nullptr;
      CHECK_EQ(cudaMallocAsync_ptsz(&q, 2048, nullptr), cudaSuccess);
      write_read(q, 2048, 5);
      CHECK_EQ(cudaFreeAsync_ptsz(q, nullptr), cudaSuccess);
      seen[t] = q;
    });
    th.join();
  }
  CHECK(seen[0] != seen[1]);
  tally.add("cudaMallocAsync_ptsz", 2);
  tally.add("cudaFreeAsync_ptsz", 2);

  // Stream capture (global mode): cudaMalloc fails as it would without us.
  CHECK_EQ(cudaStreamBeginCapture(s1, cudaStreamCaptureModeGlobal), cudaSuccess);
  void* c = nullptr;
  tally.add("cudaMalloc");
  CHECK_EQ(cudaMalloc(&c, 4096), cudaErrorStreamCaptureUnsupported);
  cudaGraph_t g = nullptr;
  CHECK_EQ(cudaStreamEndCapture(s1, &g), cudaSuccess);
  CHECK_EQ(cudaStreamDestroy(s1), cudaSuccess);
  CHECK_EQ(cudaStreamDestroy(s2), cudaSuccess);

  // cudaDeviceReset destroys every allocation; the driver reuses the same addresses. A cached
  // pre-reset block must never come back: the memory behind it is gone.
  void* r1 = dmalloc(3 << 20);
  CHECK_EQ(dfree(r1), cudaSuccess);
  tally.add("cudaDeviceReset");
  CHECK_EQ(cudaDeviceReset(), cudaSuccess);
  void* r2 = dmalloc(3 << 20);
  write_read(r2, 3 << 20, 6);  // fails in the fake driver if r2 is a stale pre-reset block
  CHECK_EQ(dfree(r2), cudaSuccess);

  // Driver entry points through the runtime (PyTorch's expandable segments take this road).
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult qr{};
  CHECK_EQ(cudaGetDriverEntryPointByVersion("cuMemAlloc", &fn, 12000, cudaEnableDefault, &qr), cudaSuccess);
  CHECK(fn != nullptr);
  if (under_shim() && expect != "off") CHECK(fn == dlsym(RTLD_DEFAULT, "cuMemAlloc_v2"));
  unsigned long long dp = 0;
  tally.add("driver.cuMemAlloc_v2");
  CHECK_EQ(reinterpret_cast<int (*)(unsigned long long*, size_t)>(fn)(&dp, 8192), 0);
  CHECK_EQ(dfree(reinterpret_cast<void*>(dp)), cudaSuccess);

  // IPC: a block whose handle was exported is never handed out again (the importer may map it).
  void* ipc = dmalloc(2 << 20);
  cudaIpcMemHandle_t handle;
  CHECK_EQ(cudaIpcGetMemHandle(&handle, ipc), cudaSuccess);
  CHECK_EQ(dfree(ipc), cudaSuccess);
  void* again = dmalloc(2 << 20);
  CHECK(again != ipc);
  CHECK_EQ(dfree(again), cudaSuccess);

  tally.add("fake.cuStreamWaitEvent", fake_calls("cuStreamWaitEvent"));
  tally.print();
  return 0;
}
