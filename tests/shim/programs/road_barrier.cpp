// Reuse safety against the fake driver's order model (fake_cuda.cpp): a kernel reads a buffer on
// a non-blocking stream, the buffer is freed with cuMemFree_v2 and the same size allocated at once
// (the shim hands the block out again), and the block's next users are launched on another
// non-blocking stream, on a stream created after the reuse, on the legacy stream, on a blocking
// stream and on the per-thread default stream. For each, the program prints whether the model
// orders that launch after the reader (or the reader has finished): what cudaFree's implicit
// synchronisation guarantees a program. A second round repeats it with a reader on a stream that
// is destroyed before the free (its queued work still runs), and a third with the first stream
// again (a later barrier must wait for it again).
//
// Run with FAKECUDA_EVENTS_PENDING large, so that no event ever reads as complete and every order
// must come from a wait or a synchronisation. Prints "program.<what> 0|1" lines and the
// cuCtxSynchronize calls made by the reuses; the harness (test_shim.cpp) compares them per policy.
#define __CUDA_API_VERSION_INTERNAL 1
#include <cuda.h>

#include "road.h"

namespace {

long last_work() {
  auto fn = reinterpret_cast<long (*)()>(dlsym(fake_driver(), "fakecuda_last_work"));
  CHECK(fn);
  return fn();
}
int ordered_after(long id, CUstream s) {
  auto fn = reinterpret_cast<int (*)(long, CUstream)>(dlsym(fake_driver(), "fakecuda_ordered_after"));
  CHECK(fn);
  return fn(id, s);
}
void launch(CUstream s) { CHECK_EQ(cuLaunchKernel(nullptr, 1, 1, 1, 1, 1, 1, 0, s, nullptr, nullptr), CUDA_SUCCESS); }

// Frees `buf` after `reader` was submitted, allocates the same size again, and launches a user of
// the new block on `user`: 1 when that launch is ordered after the reader.
int reuse_then_use(CUdeviceptr* buf, long reader, CUstream user, long* syncs) {
  CHECK_EQ(cuMemFree_v2(*buf), CUDA_SUCCESS);
  const long before = fake_calls("cuCtxSynchronize");
  CUdeviceptr again = 0;
  CHECK_EQ(cuMemAlloc_v2(&again, 1 << 20), CUDA_SUCCESS);
  *syncs += fake_calls("cuCtxSynchronize") - before;
  if (under_shim()) CHECK(again == *buf);  // the same block, handed out again
  *buf = again;
  launch(user);
  return ordered_after(reader, user);
}

}  // namespace

int main() {
  CHECK_EQ(cuInit(0), CUDA_SUCCESS);
  CUcontext ctx = nullptr;
  CHECK_EQ(cuCtxCreate_v2(&ctx, 0, 0), CUDA_SUCCESS);
  CUstream s1 = nullptr, s2 = nullptr, blocking = nullptr;
  CHECK_EQ(cuStreamCreate(&s1, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  CHECK_EQ(cuStreamCreate(&s2, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  CHECK_EQ(cuStreamCreate(&blocking, CU_STREAM_DEFAULT), CUDA_SUCCESS);
  CUdeviceptr buf = 0;
  CHECK_EQ(cuMemAlloc_v2(&buf, 1 << 20), CUDA_SUCCESS);
  long syncs = 0;

  // Round 1: a reader on s1; the block's next user on each kind of stream in turn.
  struct User {
    const char* name;
    CUstream stream;
  };
  const User users[] = {
      {"other_stream", s2}, {"legacy", nullptr}, {"blocking", blocking}, {"per_thread", CU_STREAM_PER_THREAD}};
  for (const User& u : users) {
    launch(s1);
    const long reader = last_work();
    std::printf("program.ordered_%s %d\n", u.name, reuse_then_use(&buf, reader, u.stream, &syncs));
  }
  // A stream created after the reuse.
  launch(s1);
  const long reader = last_work();
  CHECK_EQ(cuMemFree_v2(buf), CUDA_SUCCESS);
  const long before = fake_calls("cuCtxSynchronize");
  CHECK_EQ(cuMemAlloc_v2(&buf, 1 << 20), CUDA_SUCCESS);
  syncs += fake_calls("cuCtxSynchronize") - before;
  CUstream later = nullptr;
  CHECK_EQ(cuStreamCreate(&later, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  launch(later);
  std::printf("program.ordered_new_stream %d\n", ordered_after(reader, later));

  // Round 2: the reader's stream is destroyed before the free.
  CUstream dying = nullptr;
  CHECK_EQ(cuStreamCreate(&dying, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  launch(dying);
  const long dead_reader = last_work();
  CHECK_EQ(cuStreamDestroy_v2(dying), CUDA_SUCCESS);
  std::printf("program.ordered_destroyed %d\n", reuse_then_use(&buf, dead_reader, s2, &syncs));

  // Round 3: s1 again, after barriers that saw it before.
  launch(s1);
  const long again = last_work();
  std::printf("program.ordered_again %d\n", reuse_then_use(&buf, again, s2, &syncs));

  std::printf("program.syncs_at_reuse %ld\n", syncs);
  CHECK_EQ(cuMemFree_v2(buf), CUDA_SUCCESS);
  for (CUstream s : {s1, s2, blocking, later}) CHECK_EQ(cuStreamDestroy_v2(s), CUDA_SUCCESS);
  CHECK_EQ(cuCtxDestroy_v2(ctx), CUDA_SUCCESS);
  return 0;
}
