// A fake CUDA runtime (built as libcudart.so.13 with versioned exports, and as a static archive)
// that reaches the driver exactly the way NVIDIA's cudart 13 does (docs/interposition.md, "What
// cudart 13 asks the driver for"):
// dlopen("libcuda.so.1"), dlsym(handle, "cuGetProcAddress_v2"), an empty-name probe, the
// self-lookup of "cuGetProcAddress" at 12000 (5 arguments) and at 11030 (4 arguments), then every
// other entry point through the 12000 pointer, per-thread variants with flags=2.
// Only what the shim tests need is implemented; errors keep the driver's numeric value, which
// equals the runtime's for every code used here.
#define __CUDA_API_VERSION_INTERNAL 1
#include <cuda.h>

#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <pthread.h>
#include <cstdint>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#define RT_EXPORT extern "C" __attribute__((visibility("default")))

namespace {

using GetProc12 = CUresult (*)(const char*, void**, int, cuuint64_t, CUdriverProcAddressQueryResult*);
using GetProc11 = CUresult (*)(const char*, void**, int, cuuint64_t);

template <class T>
using Fn = T;

struct Driver {
  GetProc12 get_proc = nullptr;
  GetProc11 get_proc_11030 = nullptr;
#define FAKE_CUDART_DECLARE
#define DRV(name, type) Fn<type> name = nullptr;
#include "fake_cudart_entries.inc"
#undef DRV
#undef FAKE_CUDART_DECLARE
};

Driver g;
bool g_ok = false;
pthread_once_t g_once = PTHREAD_ONCE_INIT;
CUcontext g_primary[8] = {};
thread_local int tl_device = 0;

template <class T>
void resolve(const char* name, int version, cuuint64_t flags, T* out) {
  void* p = nullptr;
  CUdriverProcAddressQueryResult status{};
  if (g.get_proc(name, &p, version, flags, &status) != CUDA_SUCCESS || !p) {
    fprintf(stderr, "fake cudart: cannot resolve %s@%d flags %llu\n", name, version, (unsigned long long)flags);
    return;
  }
  *out = reinterpret_cast<T>(p);
}

void init_once() {
  void* h = dlopen("libcuda.so.1", RTLD_NOW);
  if (!h) {
    fprintf(stderr, "fake cudart: %s\n", dlerror());
    return;
  }
  auto first = reinterpret_cast<GetProc12>(dlsym(h, "cuGetProcAddress_v2"));
  if (!first) return;
  void* p = nullptr;
  CUdriverProcAddressQueryResult status{};
  first("", &p, 0, 0, &status);  // probe, as cudart 13 does
  if (first("cuGetProcAddress", &p, 12000, 0, &status) != CUDA_SUCCESS || !p) return;
  g.get_proc = reinterpret_cast<GetProc12>(p);
  p = nullptr;
  if (g.get_proc("cuGetProcAddress", &p, 11030, 0, &status) == CUDA_SUCCESS)
    g.get_proc_11030 = reinterpret_cast<GetProc11>(p);
    // The entry points, resolved through the self-looked-up pointer.
#define LEGACY(field, name, version) resolve(#name, version, CU_GET_PROC_ADDRESS_LEGACY_STREAM, &g.field);
#define PERTHREAD(field, name, version) \
  resolve(#name, version, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &g.field);
#include "fake_cudart_entries.inc"
#undef LEGACY
#undef PERTHREAD
  // One lookup through the 4-argument ABI as well.
  if (g.get_proc_11030) {
    void* q = nullptr;
    g.get_proc_11030("cuDriverGetVersion", &q, 2020, 0);
  }
  if (g.cuInit && g.cuInit(0) == CUDA_SUCCESS) g_ok = true;
}

// Makes the primary context of the calling thread's device current (cudart's lazy init).
cudaError_t ready() {
  pthread_once(&g_once, init_once);
  if (!g_ok) return cudaErrorInitializationError;
  CUcontext cur = nullptr;
  g.cuCtxGetCurrent(&cur);
  unsigned flags = 0;
  int active = 0;
  g.cuDevicePrimaryCtxGetState(tl_device, &flags, &active);
  if (!active || !g_primary[tl_device]) {
    CUresult r = g.cuDevicePrimaryCtxRetain(&g_primary[tl_device], tl_device);
    if (r) return static_cast<cudaError_t>(r);
  }
  if (cur != g_primary[tl_device]) g.cuCtxSetCurrent(g_primary[tl_device]);
  return cudaSuccess;
}

cudaError_t ret(CUresult r) { return static_cast<cudaError_t>(r); }

#define READY()                       \
  do {                                \
    cudaError_t e_ = ready();         \
    if (e_ != cudaSuccess) return e_; \
  } while (0)

CUstream cu(cudaStream_t s) { return reinterpret_cast<CUstream>(s); }

}  // namespace

RT_EXPORT cudaError_t cudaSetDevice(int device) {
  tl_device = device;
  READY();
  return cudaSuccess;
}
RT_EXPORT cudaError_t cudaMalloc(void** p, size_t size) {
  READY();
  if (!p) return cudaErrorInvalidValue;
  if (size == 0) {
    *p = nullptr;
    return cudaSuccess;
  }
  CUdeviceptr d = 0;
  CUresult r = g.cuMemAlloc_v2(&d, size);
  if (r == CUDA_SUCCESS) *p = reinterpret_cast<void*>(d);
  return ret(r);
}
RT_EXPORT cudaError_t cudaFree(void* p) {
  READY();
  if (!p) return cudaSuccess;
  return ret(g.cuMemFree_v2(reinterpret_cast<CUdeviceptr>(p)));
}
RT_EXPORT cudaError_t cudaMemGetInfo(size_t* f, size_t* t) {
  READY();
  return ret(g.cuMemGetInfo_v2(f, t));
}
static cudaError_t malloc_async(CUresult (*fn)(CUdeviceptr*, size_t, CUstream), void** p, size_t size, cudaStream_t s) {
  READY();
  CUdeviceptr d = 0;
  CUresult r = fn(&d, size, cu(s));
  if (r == CUDA_SUCCESS) *p = reinterpret_cast<void*>(d);
  return ret(r);
}
RT_EXPORT cudaError_t cudaMallocAsync(void** p, size_t size, cudaStream_t s) {
  return malloc_async(g.cuMemAllocAsync, p, size, s);
}
RT_EXPORT cudaError_t cudaMallocAsync_ptsz(void** p, size_t size, cudaStream_t s) {
  return malloc_async(g.cuMemAllocAsync_ptsz, p, size, s);
}
RT_EXPORT cudaError_t cudaFreeAsync(void* p, cudaStream_t s) {
  READY();
  return ret(g.cuMemFreeAsync(reinterpret_cast<CUdeviceptr>(p), cu(s)));
}
RT_EXPORT cudaError_t cudaFreeAsync_ptsz(void* p, cudaStream_t s) {
  READY();
  return ret(g.cuMemFreeAsync_ptsz(reinterpret_cast<CUdeviceptr>(p), cu(s)));
}
RT_EXPORT cudaError_t cudaMallocManaged(void** p, size_t size, unsigned int flags) {
  READY();
  CUdeviceptr d = 0;
  CUresult r = g.cuMemAllocManaged(&d, size, flags);
  if (r == CUDA_SUCCESS) *p = reinterpret_cast<void*>(d);
  return ret(r);
}
RT_EXPORT cudaError_t cudaMallocPitch(void** p, size_t* pitch, size_t width, size_t height) {
  READY();
  CUdeviceptr d = 0;
  CUresult r = g.cuMemAllocPitch_v2(&d, pitch, width, height, 16);
  if (r == CUDA_SUCCESS) *p = reinterpret_cast<void*>(d);
  return ret(r);
}
RT_EXPORT cudaError_t cudaHostAlloc(void** p, size_t size, unsigned int flags) {
  READY();
  return ret(g.cuMemHostAlloc(p, size, flags));
}
RT_EXPORT cudaError_t cudaMallocHost(void** p, size_t size) {
  READY();
  return ret(g.cuMemHostAlloc(p, size, 0));
}
RT_EXPORT cudaError_t cudaFreeHost(void* p) {
  READY();
  return ret(g.cuMemFreeHost(p));
}
RT_EXPORT cudaError_t cudaDeviceReset() {
  READY();
  CUresult r = g.cuDevicePrimaryCtxReset(tl_device);
  g_primary[tl_device] = nullptr;
  return ret(r);
}
RT_EXPORT cudaError_t cudaDeviceSynchronize() {
  READY();
  return ret(g.cuCtxSynchronize());
}
RT_EXPORT cudaError_t cudaStreamSynchronize(cudaStream_t s) {
  READY();
  return ret(g.cuStreamSynchronize(cu(s)));
}
RT_EXPORT cudaError_t cudaEventCreate(cudaEvent_t* e) {
  READY();
  return ret(g.cuEventCreate(reinterpret_cast<CUevent*>(e), 0));
}
RT_EXPORT cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) {
  READY();
  return ret(g.cuEventRecord(reinterpret_cast<CUevent>(e), cu(s)));
}
RT_EXPORT cudaError_t cudaEventQuery(cudaEvent_t e) {
  READY();
  return ret(g.cuEventQuery(reinterpret_cast<CUevent>(e)));
}
RT_EXPORT cudaError_t cudaEventSynchronize(cudaEvent_t e) {
  READY();
  return ret(g.cuEventSynchronize(reinterpret_cast<CUevent>(e)));
}
RT_EXPORT cudaError_t cudaEventDestroy(cudaEvent_t e) {
  READY();
  return ret(g.cuEventDestroy_v2(reinterpret_cast<CUevent>(e)));
}
RT_EXPORT cudaError_t cudaStreamCreate(cudaStream_t* s) {
  READY();
  return ret(g.cuStreamCreate(reinterpret_cast<CUstream*>(s), 0));
}
RT_EXPORT cudaError_t cudaStreamDestroy(cudaStream_t s) {
  READY();
  return ret(g.cuStreamDestroy_v2(cu(s)));
}
RT_EXPORT cudaError_t cudaStreamBeginCapture(cudaStream_t s, cudaStreamCaptureMode m) {
  READY();
  return ret(g.cuStreamBeginCapture_v2(cu(s), static_cast<CUstreamCaptureMode>(m)));
}
RT_EXPORT cudaError_t cudaStreamEndCapture(cudaStream_t s, cudaGraph_t* graph) {
  READY();
  return ret(g.cuStreamEndCapture(cu(s), reinterpret_cast<CUgraph*>(graph)));
}
RT_EXPORT cudaError_t cudaMemcpy(void* dst, const void* src, size_t n, cudaMemcpyKind kind) {
  READY();
  if (kind == cudaMemcpyHostToDevice) return ret(g.cuMemcpyHtoD_v2(reinterpret_cast<CUdeviceptr>(dst), src, n));
  if (kind == cudaMemcpyDeviceToHost) return ret(g.cuMemcpyDtoH_v2(dst, reinterpret_cast<CUdeviceptr>(src), n));
  return cudaErrorInvalidMemcpyDirection;
}
RT_EXPORT cudaError_t cudaMemsetAsync(void* p, int value, size_t n, cudaStream_t s) {
  READY();
  // Stream 0 goes down as the runtime's own handle of the legacy stream, as the real cudart's
  // cudaMemsetAsync does (fake_cuda.cpp, kLegacyAlias).
  CUstream stream = s ? cu(s) : reinterpret_cast<CUstream>(std::uintptr_t{0x7000});
  return ret(g.cuMemsetD8Async(reinterpret_cast<CUdeviceptr>(p), static_cast<unsigned char>(value), n, stream));
}
RT_EXPORT cudaError_t cudaIpcGetMemHandle(cudaIpcMemHandle_t* h, void* p) {
  READY();
  return ret(g.cuIpcGetMemHandle(reinterpret_cast<CUipcMemHandle*>(h), reinterpret_cast<CUdeviceptr>(p)));
}
RT_EXPORT cudaError_t cudaGetDriverEntryPointByVersion(const char* symbol, void** fn, unsigned int version,
                                                       unsigned long long flags,
                                                       cudaDriverEntryPointQueryResult* status) {
  READY();
  CUdriverProcAddressQueryResult s{};
  CUresult r = g.get_proc(symbol, fn, static_cast<int>(version),
                          flags ? flags : static_cast<unsigned long long>(CU_GET_PROC_ADDRESS_DEFAULT), &s);
  if (status) *status = static_cast<cudaDriverEntryPointQueryResult>(s);
  return ret(r);
}

// Device properties: name and totalGlobalMem, the latter from cuDeviceTotalMem_v2 resolved through
// cuGetProcAddress, as NVIDIA's cudart does (so the shim's driver hook sees it).
RT_EXPORT cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device) {
  READY();
  if (!prop) return cudaErrorInvalidValue;
  memset(prop, 0, sizeof *prop);
  if (CUresult r = g.cuDeviceGetName(prop->name, sizeof prop->name, device)) return ret(r);
  size_t total = 0;
  if (CUresult r = g.cuDeviceTotalMem_v2(&total, device)) return ret(r);
  prop->totalGlobalMem = total;
  return cudaSuccess;
}
// CUDA 12's export. This one models a cudart that learnt the total without our resolver (read
// before the shim was asked, or cached): it calls the driver's own function by its address, so
// only the shim's runtime-level hook can cap it.
RT_EXPORT cudaError_t cudaGetDeviceProperties_v2(cudaDeviceProp* prop, int device) {
  READY();
  if (!prop) return cudaErrorInvalidValue;
  memset(prop, 0, sizeof *prop);
  void* self = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  auto real = self ? reinterpret_cast<void* (*)(const char*)>(dlsym(self, "fakecuda_real")) : nullptr;
  auto total_mem = real ? reinterpret_cast<CUresult (*)(size_t*, CUdevice)>(real("cuDeviceTotalMem_v2")) : nullptr;
  if (self) dlclose(self);
  if (!total_mem) return cudaErrorInitializationError;
  size_t total = 0;
  if (CUresult r = total_mem(&total, device)) return ret(r);
  prop->totalGlobalMem = total;
  return cudaSuccess;
}
