#include "vramtrace/cuda_driver_device.h"

namespace vramtrace {

CUstream to_cu_stream(StreamId s) noexcept {
  if (s.value == 0) return nullptr;                     // legacy default stream
  if ((s.value & 7) == 2) return CU_STREAM_PER_THREAD;  // this thread's default stream
  return reinterpret_cast<CUstream>(static_cast<std::uintptr_t>(s.value));
}

CudaDriverDevice::CudaDriverDevice(const CudaDriverApi& api, int device) noexcept : api_(api), device_(device) {
  if (api_.cuMemGetAllocationGranularity) {
    CUmemAllocationProp prop{};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = device_;
    size_t g = 0;
    if (api_.cuMemGetAllocationGranularity(&g, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM) == CUDA_SUCCESS && g)
      page_bytes_ = g;
  }
}

Status CudaDriverDevice::fail(CUresult r) noexcept {
  last_error_.store(r, std::memory_order_relaxed);
  return r == CUDA_ERROR_OUT_OF_MEMORY ? Status::out_of_memory : Status::device_error;
}

Status CudaDriverDevice::allocate(std::uint64_t bytes, DevicePtr* out) noexcept {
  if (abandoned() || !api_.cuMemAlloc_v2) return Status::device_error;
  if (bytes == 0) return Status::invalid_value;
  CUdeviceptr p = 0;
  if (CUresult r = api_.cuMemAlloc_v2(&p, bytes)) return fail(r);
  std::lock_guard<std::mutex> lock(mu_);
  ranges_[p] = bytes;
  held_bytes_ += bytes;
  *out = p;
  return Status::ok;
}

Status CudaDriverDevice::deallocate(DevicePtr ptr, std::uint64_t bytes) noexcept {
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = ranges_.find(ptr);
    if (it == ranges_.end()) return Status::invalid_value;
    held_bytes_ -= it->second;
    ranges_.erase(it);
  }
  if (abandoned()) return Status::ok;  // the context (and its memory) is already gone
  if (CUresult r = api_.cuMemFree_v2(ptr)) return fail(r);
  return Status::ok;
}

MemInfo CudaDriverDevice::mem_info() noexcept {
  MemInfo m;
  if (abandoned() || !api_.cuMemGetInfo_v2) return m;
  size_t f = 0, t = 0;
  if (api_.cuMemGetInfo_v2(&f, &t) == CUDA_SUCCESS) {
    m.free_bytes = f;
    m.total_bytes = t;
  }
  return m;
}

bool CudaDriverDevice::supports_virtual_memory() const noexcept {
  return api_.cuMemAddressReserve && api_.cuMemAddressFree && api_.cuMemCreate && api_.cuMemRelease && api_.cuMemMap &&
         api_.cuMemUnmap && api_.cuMemSetAccess;
}

Status CudaDriverDevice::reserve_address(std::uint64_t bytes, DevicePtr* out) noexcept {
  if (abandoned() || !supports_virtual_memory()) return Status::not_supported;
  CUdeviceptr p = 0;
  if (CUresult r = api_.cuMemAddressReserve(&p, bytes, page_bytes_, 0, 0)) return fail(r);
  std::lock_guard<std::mutex> lock(mu_);
  ranges_[p] = bytes;
  *out = p;
  return Status::ok;
}

Status CudaDriverDevice::release_address(DevicePtr base, std::uint64_t bytes) noexcept {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!ranges_.erase(base)) return Status::invalid_value;
  }
  if (abandoned()) return Status::ok;
  if (CUresult r = api_.cuMemAddressFree(base, bytes)) return fail(r);
  return Status::ok;
}

// One physical allocation per page, as PyTorch's expandable segments do, so that any page range
// can later be unmapped and released on its own.
Status CudaDriverDevice::map(DevicePtr at, std::uint64_t bytes) noexcept {
  if (abandoned() || !supports_virtual_memory()) return Status::not_supported;
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = device_;
  CUmemAccessDesc access{};
  access.location = prop.location;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  for (std::uint64_t off = 0; off < bytes; off += page_bytes_) {
    CUmemGenericAllocationHandle h = 0;
    CUresult r = api_.cuMemCreate(&h, page_bytes_, &prop, 0);
    if (r == CUDA_SUCCESS) {
      r = api_.cuMemMap(at + off, page_bytes_, 0, h, 0);
      if (r != CUDA_SUCCESS) api_.cuMemRelease(h);
    }
    if (r == CUDA_SUCCESS) r = api_.cuMemSetAccess(at + off, page_bytes_, &access, 1);
    if (r != CUDA_SUCCESS) {
      if (off) unmap(at, off);  // out_of_memory leaves nothing mapped
      return fail(r);
    }
    std::lock_guard<std::mutex> lock(mu_);
    pages_[at + off] = h;
    held_bytes_ += page_bytes_;
  }
  return Status::ok;
}

Status CudaDriverDevice::unmap(DevicePtr at, std::uint64_t bytes) noexcept {
  Status result = Status::ok;
  for (std::uint64_t off = 0; off < bytes; off += page_bytes_) {
    CUmemGenericAllocationHandle h = 0;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = pages_.find(at + off);
      if (it == pages_.end()) {
        result = Status::invalid_value;
        continue;
      }
      h = it->second;
      pages_.erase(it);
      held_bytes_ -= page_bytes_;
    }
    if (abandoned()) continue;
    CUresult r = api_.cuMemUnmap(at + off, page_bytes_);
    if (r == CUDA_SUCCESS) r = api_.cuMemRelease(h);
    if (r != CUDA_SUCCESS) result = fail(r);
  }
  return result;
}

EventHandle CudaDriverDevice::record_event(StreamId stream) noexcept {
  if (abandoned() || !api_.cuEventCreate || !api_.cuEventRecord) return 0;
  CUevent ev = nullptr;
  if (api_.cuEventCreate(&ev, CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS) return 0;
  if (api_.cuEventRecord(ev, to_cu_stream(stream)) != CUDA_SUCCESS) {
    api_.cuEventDestroy_v2(ev);
    return 0;
  }
  return reinterpret_cast<EventHandle>(ev);
}

bool CudaDriverDevice::event_done(EventHandle ev) noexcept {
  if (abandoned() || !ev) return true;
  return api_.cuEventQuery(reinterpret_cast<CUevent>(ev)) != CUDA_ERROR_NOT_READY;
}

void CudaDriverDevice::wait_event(EventHandle ev) noexcept {
  if (abandoned() || !ev) return;
  api_.cuEventSynchronize(reinterpret_cast<CUevent>(ev));
}

void CudaDriverDevice::destroy_event(EventHandle ev) noexcept {
  if (abandoned() || !ev) return;
  api_.cuEventDestroy_v2(reinterpret_cast<CUevent>(ev));
}

void CudaDriverDevice::synchronize() noexcept { (void)synchronize_context(); }

bool CudaDriverDevice::synchronize_context() noexcept {
  if (abandoned() || !api_.cuCtxSynchronize) return false;
  return api_.cuCtxSynchronize() == CUDA_SUCCESS;
}

bool CudaDriverDevice::contains(DevicePtr ptr) const noexcept { return range_start(ptr) != 0; }

DevicePtr CudaDriverDevice::range_start(DevicePtr ptr) const noexcept {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = ranges_.upper_bound(ptr);
  if (it == ranges_.begin()) return 0;
  --it;
  return ptr - it->first < it->second ? it->first : 0;
}

std::uint64_t CudaDriverDevice::held_bytes() const noexcept {
  std::lock_guard<std::mutex> lock(mu_);
  return held_bytes_;
}

}  // namespace vramtrace
