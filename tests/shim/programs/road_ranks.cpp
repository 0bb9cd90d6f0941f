// One process of a multi-process job (what torchrun starts): it takes its device from LOCAL_RANK
// (cudaSetDevice, as torch.cuda.set_device does), allocates ROAD_OWN_MB there and, when
// ROAD_CROSS_DEVICE is set, also ROAD_CROSS_MB on that device from two other threads: one through
// the runtime (cudaSetDevice in that thread: the current device is per thread) and one through
// the driver (cuCtxSetCurrent on the device's primary context). It checks that every block lies
// on the device that was current when it was allocated (the fake driver's addresses say which
// device: base + device * 64 GiB) and that the other threads did not change the main thread's
// device. Memory is freed before the end, so that only the peaks remain in the trace.
#include <cuda.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <thread>
#include <vector>

#include "road.h"

namespace {

constexpr std::uintptr_t kBase = 0x7f0000000000ull;  // as tests/shim/fake/fake_cuda.cpp
constexpr int kDeviceShift = 36;

int device_of(const void* p) { return static_cast<int>((reinterpret_cast<std::uintptr_t>(p) - kBase) >> kDeviceShift); }

int env_int(const char* name, int dflt) {
  const char* v = std::getenv(name);
  return v && *v ? std::atoi(v) : dflt;
}

}  // namespace

int main() {
  const int own = env_int("LOCAL_RANK", 0);
  const int cross = env_int("ROAD_CROSS_DEVICE", -1);
  const std::size_t own_bytes = static_cast<std::size_t>(env_int("ROAD_OWN_MB", 64)) << 20;
  const std::size_t cross_bytes = static_cast<std::size_t>(env_int("ROAD_CROSS_MB", 16)) << 20;

  CHECK_EQ(cudaSetDevice(own), cudaSuccess);
  std::vector<void*> blocks;
  void* a = nullptr;
  CHECK_EQ(cudaMalloc(&a, own_bytes), cudaSuccess);
  CHECK_EQ(device_of(a), own);
  blocks.push_back(a);

  if (cross >= 0) {
    // Runtime: another thread selects another device.
    std::thread t([&] {
      CHECK_EQ(cudaSetDevice(cross), cudaSuccess);
      void* b = nullptr;
      CHECK_EQ(cudaMalloc(&b, cross_bytes), cudaSuccess);
      CHECK_EQ(device_of(b), cross);
      CHECK_EQ(cudaFree(b), cudaSuccess);
      CHECK_EQ(cudaMalloc(&b, cross_bytes), cudaSuccess);  // a cache hit in the cross device's pool
      CHECK_EQ(device_of(b), cross);
      blocks.push_back(b);
    });
    t.join();
    // Driver: a third thread makes the cross device's primary context current.
    std::thread d([&] {
      // The driver was loaded by cudart (local scope): look its functions up through its handle;
      // under the shim, cuMemAlloc_v2 resolves to the shim's export (dlsym is hooked too).
      void* drv = fake_driver();
      CHECK(drv != nullptr);
      auto retain = reinterpret_cast<CUresult (*)(CUcontext*, CUdevice)>(dlsym(drv, "cuDevicePrimaryCtxRetain"));
      auto set_current = reinterpret_cast<CUresult (*)(CUcontext)>(dlsym(drv, "cuCtxSetCurrent"));
      auto mem_alloc = reinterpret_cast<CUresult (*)(CUdeviceptr*, size_t)>(dlsym(drv, "cuMemAlloc_v2"));
      CHECK(retain && set_current && mem_alloc);
      // Context and peer-access calls are not hooked: cuGetProcAddress (wrapped by the shim)
      // hands out the driver's own function, as for cuCtxEnablePeerAccess.
      auto get_proc =
          reinterpret_cast<CUresult (*)(const char*, void**, int, cuuint64_t, CUdriverProcAddressQueryResult*)>(
              dlsym(drv, "cuGetProcAddress_v2"));
      CHECK(get_proc != nullptr);
      void* fn = nullptr;
      CUdriverProcAddressQueryResult status{};
      CHECK_EQ(get_proc("cuCtxSetCurrent", &fn, 4000, CU_GET_PROC_ADDRESS_DEFAULT, &status), CUDA_SUCCESS);
      CHECK(fn == fake_real("cuCtxSetCurrent"));
      CUcontext ctx = nullptr;
      CHECK_EQ(retain(&ctx, cross), CUDA_SUCCESS);
      CHECK_EQ(set_current(ctx), CUDA_SUCCESS);
      CUdeviceptr p = 0;
      CHECK_EQ(mem_alloc(&p, 4 << 20), CUDA_SUCCESS);
      CHECK_EQ(device_of(reinterpret_cast<void*>(p)), cross);
      blocks.push_back(reinterpret_cast<void*>(p));
    });
    d.join();
    // The main thread's current device did not move.
    void* c = nullptr;
    CHECK_EQ(cudaMalloc(&c, 1 << 20), cudaSuccess);
    CHECK_EQ(device_of(c), own);
    blocks.push_back(c);
  }
  // Frees from the main thread, whatever device each block is on (the shim finds its pool).
  for (void* p : blocks) CHECK_EQ(cudaFree(p), cudaSuccess);
  std::printf("program.ok 1\n");
  return 0;
}
