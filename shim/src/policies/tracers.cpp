// Tracing of forwarded calls (policy TRACE of hooks.def). Memory that bypasses the cache is
// recorded as segment_alloc/segment_free (or segment_map/segment_unmap for virtual memory) with
// Event::aux = MemoryKind (vramtrace/event.h), so that reports count all of the program's device memory.
#include "policies/tracers.h"

#include "base/counters.h"
#include "base/log.h"
#include "base/process.h"
#include "base/sink.h"
#include "base/streams.h"
#include "policies/capture.h"
#include "policies/context_pool.h"
#include "policies/memory_cap.h"
#include "policies/passthrough.h"
#include "policies/stream_work.h"

namespace vramtrace::shim {

void note_custom_mem_pool() noexcept;  // driver_memory.cpp

namespace {
std::uint64_t handle_value(const void* h) noexcept { return reinterpret_cast<std::uintptr_t>(h); }
}  // namespace

// Note [capture passes through] (capture.h): track which streams are capturing.
void Tracer<Hook::cuStreamBeginCapture_v2>::after(std::uint16_t, CUresult r, CUstream s, CUstreamCaptureMode) noexcept {
  if (r == CUDA_SUCCESS) capture_begin(stream_key(s, false));
}
void Tracer<Hook::cuStreamBeginCapture_v2_ptsz>::after(std::uint16_t, CUresult r, CUstream s,
                                                       CUstreamCaptureMode) noexcept {
  if (r == CUDA_SUCCESS) capture_begin(stream_key(s, true));
}
void Tracer<Hook::cuStreamBeginCapture>::after(std::uint16_t, CUresult r, CUstream s) noexcept {
  if (r == CUDA_SUCCESS) capture_begin(stream_key(s, false));
}
void Tracer<Hook::cuStreamBeginCapture_ptsz>::after(std::uint16_t, CUresult r, CUstream s) noexcept {
  if (r == CUDA_SUCCESS) capture_begin(stream_key(s, true));
}
void Tracer<Hook::cuStreamBeginCaptureToGraph>::after(std::uint16_t, CUresult r, CUstream s, CUgraph,
                                                      const CUgraphNode*, const CUgraphEdgeData*, size_t,
                                                      CUstreamCaptureMode) noexcept {
  if (r == CUDA_SUCCESS) capture_begin(stream_key(s, false));
}
void Tracer<Hook::cuStreamBeginCaptureToGraph_ptsz>::after(std::uint16_t, CUresult r, CUstream s, CUgraph,
                                                           const CUgraphNode*, const CUgraphEdgeData*, size_t,
                                                           CUstreamCaptureMode) noexcept {
  if (r == CUDA_SUCCESS) capture_begin(stream_key(s, true));
}
void Tracer<Hook::cuStreamEndCapture>::after(std::uint16_t, CUresult, CUstream s, CUgraph*) noexcept {
  capture_end(stream_key(s, false));
}
void Tracer<Hook::cuStreamEndCapture_ptsz>::after(std::uint16_t, CUresult, CUstream s, CUgraph*) noexcept {
  capture_end(stream_key(s, true));
}

void Tracer<Hook::cuMemAllocManaged>::after(std::uint16_t entry, CUresult r, CUdeviceptr* p, size_t bytes,
                                            unsigned int) noexcept {
  if (r == CUDA_SUCCESS && p) passthrough_alloc(*p, bytes, MemoryKind::managed, entry);
}
void Tracer<Hook::cuMemAllocPitch_v2>::after(std::uint16_t entry, CUresult r, CUdeviceptr* p, size_t* pitch, size_t,
                                             size_t height, unsigned int) noexcept {
  if (r == CUDA_SUCCESS && p && pitch) passthrough_alloc(*p, *pitch * height, MemoryKind::pitched, entry);
}
void Tracer<Hook::cuMemAllocFromPoolAsync>::after(std::uint16_t entry, CUresult r, CUdeviceptr* p, size_t bytes,
                                                  CUmemoryPool, CUstream s) noexcept {
  if (r == CUDA_SUCCESS && p) passthrough_alloc(*p, bytes, MemoryKind::pool, entry, stream_key(s, false).value);
}
void Tracer<Hook::cuMemAllocFromPoolAsync_ptsz>::after(std::uint16_t entry, CUresult r, CUdeviceptr* p, size_t bytes,
                                                       CUmemoryPool, CUstream s) noexcept {
  if (r == CUDA_SUCCESS && p) passthrough_alloc(*p, bytes, MemoryKind::pool, entry, stream_key(s, true).value);
}
void Tracer<Hook::cuDeviceSetMemPool>::after(std::uint16_t, CUresult r, CUdevice, CUmemoryPool) noexcept {
  if (r == CUDA_SUCCESS) note_custom_mem_pool();
}

void Tracer<Hook::cuMemHostAlloc>::after(std::uint16_t entry, CUresult r, void** p, size_t bytes,
                                         unsigned int) noexcept {
  if (r == CUDA_SUCCESS && p) passthrough_alloc(handle_value(*p), bytes, MemoryKind::pinned_host, entry);
}
void Tracer<Hook::cuMemAllocHost_v2>::after(std::uint16_t entry, CUresult r, void** p, size_t bytes) noexcept {
  if (r == CUDA_SUCCESS && p) passthrough_alloc(handle_value(*p), bytes, MemoryKind::pinned_host, entry);
}
// Note [a free is recorded before it happens] (passthrough.h): each forwarded free in two halves.
void Before<Hook::cuMemFreeHost>::call(std::uint16_t entry, void* p) noexcept {
  passthrough_free_begin(handle_value(p), entry);
}
void Tracer<Hook::cuMemFreeHost>::after(std::uint16_t entry, CUresult r, void* p) noexcept {
  passthrough_free_end(handle_value(p), r == CUDA_SUCCESS, entry);
}

void Tracer<Hook::cuArrayCreate_v2>::after(std::uint16_t entry, CUresult r, CUarray* a,
                                           const CUDA_ARRAY_DESCRIPTOR*) noexcept {
  if (r == CUDA_SUCCESS && a) passthrough_alloc(handle_value(*a), 0, MemoryKind::array, entry);
}
void Tracer<Hook::cuArray3DCreate_v2>::after(std::uint16_t entry, CUresult r, CUarray* a,
                                             const CUDA_ARRAY3D_DESCRIPTOR*) noexcept {
  if (r == CUDA_SUCCESS && a) passthrough_alloc(handle_value(*a), 0, MemoryKind::array, entry);
}
void Before<Hook::cuArrayDestroy>::call(std::uint16_t entry, CUarray a) noexcept {
  passthrough_free_begin(handle_value(a), entry);
}
void Tracer<Hook::cuArrayDestroy>::after(std::uint16_t entry, CUresult r, CUarray a) noexcept {
  passthrough_free_end(handle_value(a), r == CUDA_SUCCESS, entry);
}
void Tracer<Hook::cuMipmappedArrayCreate>::after(std::uint16_t entry, CUresult r, CUmipmappedArray* a,
                                                 const CUDA_ARRAY3D_DESCRIPTOR*, unsigned int) noexcept {
  if (r == CUDA_SUCCESS && a) passthrough_alloc(handle_value(*a), 0, MemoryKind::array, entry);
}
void Before<Hook::cuMipmappedArrayDestroy>::call(std::uint16_t entry, CUmipmappedArray a) noexcept {
  passthrough_free_begin(handle_value(a), entry);
}
void Tracer<Hook::cuMipmappedArrayDestroy>::after(std::uint16_t entry, CUresult r, CUmipmappedArray a) noexcept {
  passthrough_free_end(handle_value(a), r == CUDA_SUCCESS, entry);
}

// Note [forwarded memory under the cap]: device memory the shim forwards to the driver (virtual
// memory, pitched memory, explicit pools) counts against the cap like the cache's segments, so it
// must be refused before the driver gives it: PyTorch's expandable segments take all their memory
// through cuMemCreate, and without this check a capped run with them ran past the cap (21.18 GiB
// reserved under a 14.58 GiB cap on the H200). The refusal is CUDA_ERROR_OUT_OF_MEMORY, what the
// driver returns on a full device, and PyTorch handles it as an OOM (it frees its cache and
// retries, then raises torch.OutOfMemoryError). A check, not a reservation: two threads at once
// may pass together.
namespace {
bool forwarded_admits(int device, std::uint64_t bytes, std::uint16_t entry, std::uint64_t stream) noexcept {
  if (forwarded_fits(device, bytes)) return true;
  passthrough_oom(bytes, entry, stream);
  return false;
}
}  // namespace

bool Admit<Hook::cuMemCreate>::admits(std::uint16_t entry, CUmemGenericAllocationHandle*, size_t size,
                                      const CUmemAllocationProp* prop, unsigned long long) noexcept {
  if (!prop || prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE) return true;  // host memory: not capped
  // A program whose memory is all virtual (PyTorch's expandable segments) may never make a
  // cached allocation: the context's pool record is what puts the device in the trace header.
  if (!exiting()) (void)pools().current();
  return forwarded_admits(prop->location.id, size, entry, 0);
}
bool Admit<Hook::cuMemAllocPitch_v2>::admits(std::uint16_t entry, CUdeviceptr*, size_t*, size_t width, size_t height,
                                             unsigned int) noexcept {
  // The pitch is the driver's choice, at least the width: the width decides before the call.
  std::uint64_t bytes = 0;
  if (__builtin_mul_overflow(static_cast<std::uint64_t>(width), static_cast<std::uint64_t>(height), &bytes))
    return true;  // the driver refuses it itself
  return forwarded_admits(current_device(), bytes, entry, 0);
}
bool Admit<Hook::cuMemAllocFromPoolAsync>::admits(std::uint16_t entry, CUdeviceptr*, size_t bytes, CUmemoryPool,
                                                  CUstream s) noexcept {
  return forwarded_admits(current_device(), bytes, entry, stream_key(s, false).value);
}
bool Admit<Hook::cuMemAllocFromPoolAsync_ptsz>::admits(std::uint16_t entry, CUdeviceptr*, size_t bytes, CUmemoryPool,
                                                       CUstream s) noexcept {
  return forwarded_admits(current_device(), bytes, entry, stream_key(s, true).value);
}

// Virtual memory (PyTorch expandable segments, NCCL): physical memory lives from cuMemCreate to
// cuMemRelease (and the last unmap); host-located cuMemCreate is not device memory and is not
// counted (HAMi-core #187).
void Tracer<Hook::cuMemCreate>::after(std::uint16_t entry, CUresult r, CUmemGenericAllocationHandle* h, size_t size,
                                      const CUmemAllocationProp* prop, unsigned long long) noexcept {
  if (r != CUDA_SUCCESS || !h || !prop || prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE) return;
  passthrough_alloc(*h, size, MemoryKind::vmm, entry);
}
void Before<Hook::cuMemRelease>::call(std::uint16_t entry, CUmemGenericAllocationHandle h) noexcept {
  passthrough_free_begin(h, entry);
}
void Tracer<Hook::cuMemRelease>::after(std::uint16_t entry, CUresult r, CUmemGenericAllocationHandle h) noexcept {
  passthrough_free_end(h, r == CUDA_SUCCESS, entry);
}
// Note [GPU-side barrier] (stream_work.cpp): work still queued on a stream outlives its handle.
void Before<Hook::cuStreamDestroy>::call(std::uint16_t, CUstream s) noexcept { note_stream_destroy(s); }
void Before<Hook::cuStreamDestroy_v2>::call(std::uint16_t, CUstream s) noexcept { note_stream_destroy(s); }
void Tracer<Hook::cuMemMap>::after(std::uint16_t entry, CUresult r, CUdeviceptr p, size_t size, size_t,
                                   CUmemGenericAllocationHandle, unsigned long long) noexcept {
  if (r == CUDA_SUCCESS) emit(Action::segment_map, p, size, 0, entry, MemoryKind::vmm, current_device());
}
void Tracer<Hook::cuMemUnmap>::after(std::uint16_t entry, CUresult r, CUdeviceptr p, size_t size) noexcept {
  if (r == CUDA_SUCCESS) emit(Action::segment_unmap, p, size, 0, entry, MemoryKind::vmm, current_device());
}

}  // namespace vramtrace::shim
