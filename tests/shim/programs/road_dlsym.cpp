// The dlopen + dlsym road (P4) and the resolver road (P5): a program that finds the driver the
// way TF/XLA stubs and cudart do, by handle-scoped dlsym and by cuGetProcAddress(_v2).
#define __CUDA_API_VERSION_INTERNAL 1
#include <cuda.h>

#include <cstring>

#include "road.h"

static Tally tally;

using GetProc12 = CUresult (*)(const char*, void**, int, cuuint64_t, CUdriverProcAddressQueryResult*);
using GetProc11 = CUresult (*)(const char*, void**, int, cuuint64_t);

int main() {
  void* h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  CHECK(h != nullptr);
  const bool shim = under_shim();
  auto ours = [&](const char* n) { return shim ? dlsym(RTLD_DEFAULT, n) : fake_real(n); };

  // Handle-scoped lookups of hooked names give our wrappers; others the driver's own.
  void* alloc = dlsym(h, "cuMemAlloc_v2");
  CHECK(alloc != nullptr);
  CHECK(alloc == ours("cuMemAlloc_v2"));
  CHECK(dlsym(h, "cuMemAlloc") == fake_real("cuMemAlloc"));  // 32-bit ABI: not hooked
  CHECK(dlsym(h, "cuInit") == fake_real("cuInit"));
  CHECK(dlsym(h, "cuNoSuchFunction") == nullptr);
  CHECK(dlerror() != nullptr);
  // A handle that does not define the name gets NULL even for a hooked name.
  void* self = dlopen(nullptr, RTLD_NOW);
  void* libc = dlopen("libc.so.6", RTLD_NOW | RTLD_NOLOAD);
  CHECK(dlsym(libc, "cuMemAlloc_v2") == nullptr);
  (void)self;

  auto init = reinterpret_cast<CUresult (*)(unsigned)>(dlsym(h, "cuInit"));
  auto retain = reinterpret_cast<CUresult (*)(CUcontext*, CUdevice)>(dlsym(h, "cuDevicePrimaryCtxRetain"));
  auto set = reinterpret_cast<CUresult (*)(CUcontext)>(dlsym(h, "cuCtxSetCurrent"));
  CHECK_EQ(init(0), CUDA_SUCCESS);
  CUcontext ctx = nullptr;
  CHECK_EQ(retain(&ctx, 0), CUDA_SUCCESS);
  CHECK_EQ(set(ctx), CUDA_SUCCESS);

  auto a = reinterpret_cast<CUresult (*)(CUdeviceptr*, size_t)>(alloc);
  auto fr = reinterpret_cast<CUresult (*)(CUdeviceptr)>(dlsym(h, "cuMemFree_v2"));
  CUdeviceptr p = 0;
  for (int i = 0; i < 3; ++i) {
    CHECK_EQ(a(&p, 10000), CUDA_SUCCESS);
    CHECK_EQ(fr(p), CUDA_SUCCESS);
  }
  tally.add("dlsym.cuMemAlloc_v2", 3);
  tally.add("dlsym.cuMemFree_v2", 3);

  // cuGetProcAddress_v2: the ABI variant is the driver's choice, the pointer ours.
  auto gpa = reinterpret_cast<GetProc12>(dlsym(h, "cuGetProcAddress_v2"));
  CHECK(gpa == ours("cuGetProcAddress_v2"));
  void* fn = nullptr;
  CUdriverProcAddressQueryResult st{};
  CHECK_EQ(gpa("", &fn, 0, 0, &st), CUDA_SUCCESS);  // the runtime's probe, forwarded untouched
  CHECK(fn == nullptr);
  CHECK_EQ(gpa("cuMemAlloc", &fn, 3020, 0, &st), CUDA_SUCCESS);
  CHECK(fn == ours("cuMemAlloc_v2"));
  CHECK_EQ(st, CU_GET_PROC_ADDRESS_SUCCESS);
  CHECK_EQ(gpa("cuMemAlloc", &fn, 2000, 0, &st), CUDA_SUCCESS);
  CHECK(fn == fake_real("cuMemAlloc"));  // old ABI stays the driver's
  CHECK_EQ(gpa("cuMemAllocAsync", &fn, 11020, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &st), CUDA_SUCCESS);
  CHECK(fn == ours("cuMemAllocAsync_ptsz"));
  CHECK_EQ(gpa("cuMemAllocAsync", &fn, 11020, CU_GET_PROC_ADDRESS_LEGACY_STREAM, &st), CUDA_SUCCESS);
  CHECK(fn == ours("cuMemAllocAsync"));
  CHECK_EQ(gpa("cuDevicePrimaryCtxReset", &fn, 7000, 0, &st), CUDA_SUCCESS);
  CHECK(fn == ours("cuDevicePrimaryCtxReset"));
  CHECK_EQ(gpa("cuDevicePrimaryCtxReset", &fn, 11000, 0, &st), CUDA_SUCCESS);
  CHECK(fn == ours("cuDevicePrimaryCtxReset_v2"));
  CHECK_EQ(gpa("cuNoSuchFunction", &fn, 12000, 0, &st), CUDA_SUCCESS);
  CHECK(fn == nullptr);
  CHECK_EQ(st, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
  CHECK_EQ(gpa("cuMemAlloc", &fn, 99999, 0, &st), CUDA_ERROR_INVALID_VALUE);
  // Self-lookups: both ABIs map to the wrapper of exactly that variant.
  CHECK_EQ(gpa("cuGetProcAddress", &fn, 12000, 0, &st), CUDA_SUCCESS);
  CHECK(fn == ours("cuGetProcAddress_v2"));
  CHECK_EQ(gpa("cuGetProcAddress", &fn, 11030, 0, &st), CUDA_SUCCESS);
  CHECK(fn == ours("cuGetProcAddress"));
  auto gpa11 = reinterpret_cast<GetProc11>(fn);
  CHECK_EQ(gpa11("cuMemFree", &fn, 3020, 0), CUDA_SUCCESS);
  CHECK(fn == ours("cuMemFree_v2"));
  tally.add("gpa.cuGetProcAddress_v2", 11);
  tally.add("gpa.cuGetProcAddress", 1);

  // Allocate through resolved pointers too.
  CHECK_EQ(gpa("cuMemAlloc", &fn, 3020, 0, &st), CUDA_SUCCESS);
  tally.add("gpa.cuGetProcAddress_v2");
  auto a2 = reinterpret_cast<CUresult (*)(CUdeviceptr*, size_t)>(fn);
  CHECK_EQ(a2(&p, 4096), CUDA_SUCCESS);
  CHECK_EQ(fr(p), CUDA_SUCCESS);
  tally.add("dlsym.cuMemAlloc_v2");
  tally.add("dlsym.cuMemFree_v2");
  if (shim) CHECK_EQ(fake_calls("cuMemAlloc_v2"), 1);  // one segment served all four
  tally.print();
  return 0;
}
