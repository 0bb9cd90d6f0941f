// What the driver says about a pointer into vramtrace's cache (policy REPORT):
// cuMemGetAddressRange_v2, cuPointerGetAttribute, cuPointerGetAttributes and the IPC export
// cuIpcGetMemHandle. cudaPointerGetAttributes and cudaIpcGetMemHandle reach them through
// cudart's driver table, and every other road through the resolver, like any hook.
//
// Note [a block answers as an allocation] (context_pool.h): a live block answers as the driver
// allocation it stands for (its start, its requested size, a buffer id of its own); memory in
// the cache that no live block holds answers as memory no allocation holds. Pointers that are
// not ours, and calls made while the shim does its own work, go to the driver untouched.
#include "base/config.h"
#include "base/entry.h"
#include "base/log.h"
#include "base/real.h"
#include "policies/context_pool.h"

using namespace vramtrace;
using namespace vramtrace::shim;

namespace {

bool adjust() noexcept { return enabled() && !EntryScope::internal(); }

/// Rewrites one attribute's value for the live block `b` of `pool`; other attributes (memory
/// type, device, context, flags) are the segment's, which are the block's too.
void block_attribute(ContextPool& pool, const BlockInfo& b, CUpointer_attribute attribute, void* data) noexcept {
  if (!data) return;
  switch (attribute) {
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
      *static_cast<CUdeviceptr*>(data) = b.address;
      break;
    case CU_POINTER_ATTRIBUTE_RANGE_SIZE:
      *static_cast<size_t*>(data) = b.requested_size;
      break;
    case CU_POINTER_ATTRIBUTE_BUFFER_ID:
      *static_cast<unsigned long long*>(data) = pool.buffer_id(b.address);
      break;
    default:
      break;
  }
}

}  // namespace

// The requested size, not the rounded block: the bytes the program asked for are what the driver
// reports of an allocation it made, and clearing them never reaches a neighbouring block.
extern "C" CUresult cuMemGetAddressRange_v2(CUdeviceptr* pbase, size_t* psize, CUdeviceptr dptr) {
  EntryScope e(Hook::cuMemGetAddressRange_v2);
  using Fn = CUresult (*)(CUdeviceptr*, size_t*, CUdeviceptr);
  Fn real = real_driver<Fn>(Hook::cuMemGetAddressRange_v2);
  if (!real) return CUDA_ERROR_NOT_INITIALIZED;
  if (!adjust() || dptr == 0) return real(pbase, psize, dptr);
  Owner o = pools().owner_containing(dptr);
  if (!o.pool) return real(pbase, psize, dptr);
  log_decision(Decision::query_block, e.entry());
  if (!o.live) return CUDA_ERROR_NOT_FOUND;
  CUdeviceptr base = 0;
  size_t size = 0;
  CUresult r = real(&base, &size, dptr);  // the driver's own checks (context, initialisation)
  if (r != CUDA_SUCCESS) return r;
  if (pbase) *pbase = o.block.address;
  if (psize) *psize = o.block.requested_size;
  return CUDA_SUCCESS;
}

extern "C" CUresult cuPointerGetAttribute(void* data, CUpointer_attribute attribute, CUdeviceptr ptr) {
  EntryScope e(Hook::cuPointerGetAttribute);
  using Fn = CUresult (*)(void*, CUpointer_attribute, CUdeviceptr);
  Fn real = real_driver<Fn>(Hook::cuPointerGetAttribute);
  if (!real) return CUDA_ERROR_NOT_INITIALIZED;
  if (!adjust() || ptr == 0) return real(data, attribute, ptr);
  Owner o = pools().owner_containing(ptr);
  if (!o.pool) return real(data, attribute, ptr);
  log_decision(Decision::query_block, e.entry());
  // The driver's answer for an address no allocation holds.
  if (!o.live) return CUDA_ERROR_INVALID_VALUE;
  CUresult r = real(data, attribute, ptr);
  if (r == CUDA_SUCCESS) block_attribute(*o.pool, o.block, attribute, data);
  return r;
}

// Never an error for a pointer the driver does not know: every attribute then gets its default,
// which is what the driver gives for the null pointer.
extern "C" CUresult cuPointerGetAttributes(unsigned int count, CUpointer_attribute* attributes, void** data,
                                           CUdeviceptr ptr) {
  EntryScope e(Hook::cuPointerGetAttributes);
  using Fn = CUresult (*)(unsigned int, CUpointer_attribute*, void**, CUdeviceptr);
  Fn real = real_driver<Fn>(Hook::cuPointerGetAttributes);
  if (!real) return CUDA_ERROR_NOT_INITIALIZED;
  if (!adjust() || ptr == 0 || !attributes || !data) return real(count, attributes, data, ptr);
  Owner o = pools().owner_containing(ptr);
  if (!o.pool) return real(count, attributes, data, ptr);
  log_decision(Decision::query_block, e.entry());
  if (!o.live) return real(count, attributes, data, 0);
  CUresult r = real(count, attributes, data, ptr);
  if (r == CUDA_SUCCESS)
    for (unsigned int i = 0; i < count; ++i) block_attribute(*o.pool, o.block, attributes[i], data[i]);
  return r;
}

// An importer of an IPC handle maps the whole driver allocation and gets its start, so a handle
// is right only for a block that starts its segment; such a block is quarantined at its free
// (never reused while an importer may map it; docs/interposition.md, "IPC handles"). A block
// further into a segment cannot be exported correctly, and a wrong mapping would corrupt data
// silently: it is refused with the driver's error for memory it cannot export.
extern "C" CUresult cuIpcGetMemHandle(CUipcMemHandle* h, CUdeviceptr p) {
  EntryScope e(Hook::cuIpcGetMemHandle);
  using Fn = CUresult (*)(CUipcMemHandle*, CUdeviceptr);
  Fn real = real_driver<Fn>(Hook::cuIpcGetMemHandle);
  if (!real) return CUDA_ERROR_NOT_INITIALIZED;
  if (!adjust() || p == 0) return real(h, p);
  Owner o = pools().owner_containing(p);
  if (!o.pool) return real(h, p);
  if (!o.live) return CUDA_ERROR_INVALID_VALUE;
  if (o.pool->backend.range_start(p) != o.block.address) {
    static std::atomic<bool> warned{false};
    if (!warned.exchange(true, std::memory_order_relaxed))
      log_line(LogLevel::warn,
               "cuIpcGetMemHandle: the block at {:#x} shares a cached segment with other blocks, so an importer "
               "would map the wrong memory; refused with CUDA_ERROR_INVALID_VALUE. Run with "
               "VRAMTRACE_CONF=reuse:none to give IPC buffers driver allocations of their own",
               o.block.address);
    log_decision(Decision::ipc_refused, e.entry());
    return CUDA_ERROR_INVALID_VALUE;
  }
  CUresult r = real(h, p);
  if (r == CUDA_SUCCESS) {
    o.pool->mark_exported(o.block.address);
    log_decision(Decision::ipc_exported, e.entry());
  }
  return r;
}
