// Memory queries (policy REPORT) of the driver and the runtime: cuMemGetInfo_v2, cuMemGetInfo,
// cuDeviceTotalMem_v2, cudaGetDeviceProperties(_v2). NVML's are in nvml_hooks.cpp.
//
// Every hook calls the real function first and changes only a successful answer, by
// Note [capped figures] (memory_cap.h): idle cached bytes count as free (always), and under a
// cap the device looks capped (free <= total <= physical). Without a cap, cuDeviceTotalMem_v2 and
// cudaGetDeviceProperties are passed through untouched. A call made while the shim does its own
// work (InternalScope), or with a bad VRAMTRACE_CONF, is never changed.
#include <algorithm>
#include <climits>
#include <limits>

#include "base/config.h"
#include "base/entry.h"
#include "base/real.h"
#include "policies/context_pool.h"
#include "policies/memory_cap.h"
#include "policies/passthrough.h"

using namespace vramtrace;
using namespace vramtrace::shim;

namespace {
bool adjust() noexcept { return enabled() && !EntryScope::internal(); }
}  // namespace

// Both cuMemGetInfo ABIs: the real function is asked with our own variables and only the
// non-null outputs are written (NULL output pointers are accepted: OptiX passes one;
// HAMi-core #234/#333). `T` is size_t (_v2) or unsigned int (the 32-bit ABI that libcuda still
// exports, whose figures saturate at 4 GiB - 1 as the real one's do for larger devices).
template <Hook H, class T>
CUresult mem_get_info(T* free_bytes, T* total_bytes) noexcept {
  EntryScope e(H);
  using Fn = CUresult (*)(T*, T*);
  Fn real = real_driver<Fn>(H);
  if (!real) return CUDA_ERROR_NOT_INITIALIZED;
  T f = 0, t = 0;
  CUresult r = real(&f, &t);
  if (r != CUDA_SUCCESS) return r;
  if (adjust()) {
    const int dev = current_device();
    std::uint64_t free64 = f, total64 = t;
    capped_figures(dev, pools().cached_free_bytes(dev), free64, total64);
    constexpr std::uint64_t kMax = std::numeric_limits<T>::max();
    f = static_cast<T>(std::min(free64, kMax));
    t = static_cast<T>(std::min(total64, kMax));
  }
  if (free_bytes) *free_bytes = f;
  if (total_bytes) *total_bytes = t;
  return CUDA_SUCCESS;
}

extern "C" CUresult cuMemGetInfo_v2(size_t* free_bytes, size_t* total_bytes) {
  return mem_get_info<Hook::cuMemGetInfo_v2>(free_bytes, total_bytes);
}
extern "C" CUresult cuMemGetInfo(unsigned int* free_bytes, unsigned int* total_bytes) {
  return mem_get_info<Hook::cuMemGetInfo>(free_bytes, total_bytes);
}

// cudaGetDeviceProperties().totalGlobalMem comes from here in NVIDIA's cudart (it resolves
// cuDeviceTotalMem@3020 through cuGetProcAddress, i.e. through our resolver), so this covers
// static cudart too. Never more than the physical total (HAMi-core PR #81).
extern "C" CUresult cuDeviceTotalMem_v2(size_t* bytes, CUdevice dev) {
  EntryScope e(Hook::cuDeviceTotalMem_v2);
  using Fn = CUresult (*)(size_t*, CUdevice);
  Fn real = real_driver<Fn>(Hook::cuDeviceTotalMem_v2);
  if (!real) return CUDA_ERROR_NOT_INITIALIZED;
  CUresult r = real(bytes, dev);
  if (r == CUDA_SUCCESS && bytes && adjust()) {
    const std::uint64_t cap = cap_of(static_cast<int>(dev));
    if (cap != 0 && cap < *bytes) *bytes = static_cast<size_t>(cap);
  }
  return r;
}

namespace {
// Runtime level: a shared cudart may have read the total before we were asked (or from its own
// cache), so the answer is capped here too; capping twice changes nothing.
cudaError_t device_properties(Hook h, struct cudaDeviceProp* prop, int device) noexcept {
  EntryScope e(h);
  using Fn = cudaError_t (*)(struct cudaDeviceProp*, int);
  auto real = reinterpret_cast<Fn>(real_runtime(h));
  if (!real) return cudaErrorSharedObjectSymbolNotFound;
  cudaError_t r = real(prop, device);
  if (r == cudaSuccess && prop && adjust()) {
    const std::uint64_t cap = cap_of(device);
    if (cap != 0 && cap < prop->totalGlobalMem) prop->totalGlobalMem = static_cast<size_t>(cap);
  }
  return r;
}
}  // namespace

extern "C" cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp* prop, int device) {
  return device_properties(Hook::cudaGetDeviceProperties, prop, device);
}
extern "C" cudaError_t cudaGetDeviceProperties_v2(struct cudaDeviceProp* prop, int device) {
  return device_properties(Hook::cudaGetDeviceProperties_v2, prop, device);
}
