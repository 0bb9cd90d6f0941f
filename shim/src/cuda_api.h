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
