// What a generated TRACE/PASS wrapper does after forwarding a call: Tracer<Hook::name>::after.
// The primary template does nothing (PASS); each TRACE hook of hooks.def has a specialisation in
// tracers.cpp. `entry` is the outermost entry point (Note [count once]); `r` the real result.
#pragma once

#include <cstdint>

#include "base/hooks.h"

namespace vramtrace::shim {

template <Hook H>
struct Tracer {
  template <class... A>
  static void after(std::uint16_t, CUresult, A...) noexcept {}
};

/// What a generated TRACE wrapper asks before forwarding a call: Admit<Hook::name>::admits. True
/// lets the call through; false makes the wrapper return CUDA_ERROR_OUT_OF_MEMORY without calling
/// the driver. The primary template admits everything; the forwarded calls that take device memory
/// (cuMemCreate, cuMemAllocPitch_v2, cuMemAllocFromPoolAsync) are refused when they would not fit
/// under the memory cap (memory_cap.h), with an `oom` event, as the cached path refuses them.
template <Hook H>
struct Admit {
  template <class... A>
  static bool admits(std::uint16_t, A...) noexcept {
    return true;
  }
};

#define VT_ADMIT(name, ...)                                        \
  template <>                                                      \
  struct Admit<Hook::name> {                                       \
    static bool admits(std::uint16_t entry, __VA_ARGS__) noexcept; \
  };
VT_ADMIT(cuMemCreate, CUmemGenericAllocationHandle*, size_t, const CUmemAllocationProp*, unsigned long long)
VT_ADMIT(cuMemAllocPitch_v2, CUdeviceptr*, size_t*, size_t, size_t, unsigned int)
VT_ADMIT(cuMemAllocFromPoolAsync, CUdeviceptr*, size_t, CUmemoryPool, CUstream)
VT_ADMIT(cuMemAllocFromPoolAsync_ptsz, CUdeviceptr*, size_t, CUmemoryPool, CUstream)
#undef VT_ADMIT

/// What a generated TRACE wrapper does right before forwarding a call it admitted:
/// Before<Hook::name>::call. The primary template does nothing; the forwarded frees
/// (cuMemFreeHost, cuArrayDestroy, cuMipmappedArrayDestroy, cuMemRelease) record their
/// segment_free here, before the driver can give the address or handle to another thread
/// (Note [a free is recorded before it happens], passthrough.h); their Tracer::after finishes it.
/// A stream's destruction hands its unfinished work to the next GPU-side barrier here (Note
/// [GPU-side barrier], stream_work.cpp), while the handle is still valid.
template <Hook H>
struct Before {
  template <class... A>
  static void call(std::uint16_t, A...) noexcept {}
};

#define VT_BEFORE(name, ...)                                     \
  template <>                                                    \
  struct Before<Hook::name> {                                    \
    static void call(std::uint16_t entry, __VA_ARGS__) noexcept; \
  };
VT_BEFORE(cuMemFreeHost, void*)
VT_BEFORE(cuArrayDestroy, CUarray)
VT_BEFORE(cuMipmappedArrayDestroy, CUmipmappedArray)
VT_BEFORE(cuMemRelease, CUmemGenericAllocationHandle)
VT_BEFORE(cuStreamDestroy, CUstream)
VT_BEFORE(cuStreamDestroy_v2, CUstream)
#undef VT_BEFORE

#define VT_TRACER(name, ...)                                                  \
  template <>                                                                 \
  struct Tracer<Hook::name> {                                                 \
    static void after(std::uint16_t entry, CUresult r, __VA_ARGS__) noexcept; \
  };

VT_TRACER(cuStreamBeginCapture_v2, CUstream, CUstreamCaptureMode)
VT_TRACER(cuStreamBeginCapture_v2_ptsz, CUstream, CUstreamCaptureMode)
VT_TRACER(cuStreamBeginCapture, CUstream)
VT_TRACER(cuStreamBeginCapture_ptsz, CUstream)
VT_TRACER(cuStreamBeginCaptureToGraph, CUstream, CUgraph, const CUgraphNode*, const CUgraphEdgeData*, size_t,
          CUstreamCaptureMode)
VT_TRACER(cuStreamBeginCaptureToGraph_ptsz, CUstream, CUgraph, const CUgraphNode*, const CUgraphEdgeData*, size_t,
          CUstreamCaptureMode)
VT_TRACER(cuStreamEndCapture, CUstream, CUgraph*)
VT_TRACER(cuStreamEndCapture_ptsz, CUstream, CUgraph*)
VT_TRACER(cuMemAllocManaged, CUdeviceptr*, size_t, unsigned int)
VT_TRACER(cuMemAllocPitch_v2, CUdeviceptr*, size_t*, size_t, size_t, unsigned int)
VT_TRACER(cuMemAllocFromPoolAsync, CUdeviceptr*, size_t, CUmemoryPool, CUstream)
VT_TRACER(cuMemAllocFromPoolAsync_ptsz, CUdeviceptr*, size_t, CUmemoryPool, CUstream)
VT_TRACER(cuDeviceSetMemPool, CUdevice, CUmemoryPool)
VT_TRACER(cuMemHostAlloc, void**, size_t, unsigned int)
VT_TRACER(cuMemAllocHost_v2, void**, size_t)
VT_TRACER(cuMemFreeHost, void*)
VT_TRACER(cuArrayCreate_v2, CUarray*, const CUDA_ARRAY_DESCRIPTOR*)
VT_TRACER(cuArray3DCreate_v2, CUarray*, const CUDA_ARRAY3D_DESCRIPTOR*)
VT_TRACER(cuArrayDestroy, CUarray)
VT_TRACER(cuMipmappedArrayCreate, CUmipmappedArray*, const CUDA_ARRAY3D_DESCRIPTOR*, unsigned int)
VT_TRACER(cuMipmappedArrayDestroy, CUmipmappedArray)
VT_TRACER(cuMemCreate, CUmemGenericAllocationHandle*, size_t, const CUmemAllocationProp*, unsigned long long)
VT_TRACER(cuMemRelease, CUmemGenericAllocationHandle)
VT_TRACER(cuMemMap, CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle, unsigned long long)
VT_TRACER(cuMemUnmap, CUdeviceptr, size_t)
#undef VT_TRACER

}  // namespace vramtrace::shim
