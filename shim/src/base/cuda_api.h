// The CUDA declarations the shim compiles against: every driver function by its exact ABI name
// (cuMemAlloc_v2, cuMemAlloc, cuGetProcAddress with 4 arguments, the _ptsz variants), which is
// what cuda.h declares for the driver's own build (__CUDA_API_VERSION_INTERNAL). Without it,
// cuda.h's macros silently rename bare names (cuGetProcAddress -> cuGetProcAddress_v2).
// Headers only: the shim never links libcuda or libcudart.
#pragma once

#define __CUDA_API_VERSION_INTERNAL 1
#include <cuda.h>
#include <cuda_runtime_api.h>

// Per-thread runtime variants: cuda_runtime_api.h declares them only under
// CUDA_API_PER_THREAD_DEFAULT_STREAM; same signatures as the legacy ones.
extern "C" {
cudaError_t cudaMallocAsync_ptsz(void** devPtr, size_t size, cudaStream_t s);
cudaError_t cudaFreeAsync_ptsz(void* devPtr, cudaStream_t s);
cudaError_t cudaMallocFromPoolAsync_ptsz(void** p, size_t size, cudaMemPool_t pool, cudaStream_t s);
}

// cudaGetDeviceProperties_v2: CUDA 12's export (cuda_runtime_api.h 12.x maps cudaGetDeviceProperties
// to it; CUDA 13 exports only cudaGetDeviceProperties). totalGlobalMem is at the same offset in
// both layouts (after name, uuid, luid, luidDeviceNodeMask), which is the only field we touch.
extern "C" cudaError_t cudaGetDeviceProperties_v2(struct cudaDeviceProp* prop, int device);

// NVML, declared here (the shim never includes nvml.h nor links libnvidia-ml: the real library is
// found with dlopen only when the program itself calls one of these; nvml_hooks.cpp). Layouts and
// values as in nvml.h (stable since NVML 1.0 for nvmlMemory_t, 11.x for nvmlMemory_v2_t).
extern "C" {
typedef struct nvmlDevice_st* nvmlDevice_t;
typedef int nvmlReturn_t;
enum {
  NVML_SUCCESS = 0,
  NVML_ERROR_UNINITIALIZED = 1,
  NVML_ERROR_INVALID_ARGUMENT = 2,
  NVML_ERROR_NOT_SUPPORTED = 3,
  NVML_ERROR_LIBRARY_NOT_FOUND = 12,
  NVML_ERROR_FUNCTION_NOT_FOUND = 13,
};
typedef struct nvmlMemory_st {
  unsigned long long total;  ///< bytes
  unsigned long long free;
  unsigned long long used;  ///< total - free (includes the driver's reserved memory)
} nvmlMemory_t;
typedef struct nvmlMemory_v2_st {
  unsigned int version;  ///< nvmlMemory_v2 = sizeof | (2 << 24)
  unsigned long long total;
  unsigned long long reserved;  ///< reserved by the driver and firmware
  unsigned long long free;
  unsigned long long used;  ///< total - reserved - free
} nvmlMemory_v2_t;
}
