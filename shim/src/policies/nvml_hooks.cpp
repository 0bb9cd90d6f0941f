// NVML's memory queries (policy REPORT): nvmlDeviceGetMemoryInfo and nvmlDeviceGetMemoryInfo_v2,
// what nvidia-smi, pynvml, PyTorch's and vLLM's probes read.
//
// Note [NVML stays optional]: the shim never links or loads NVML on its own. Frameworks
// dlopen("libnvidia-ml.so.1") and look the functions up through that handle, which our dlsym
// answers with our exports (dlsym_hook.cpp); a program linked with -lnvidia-ml binds to our
// exports directly. Only then, inside the program's own call, the real function is found:
// libnvidia-ml.so.1 is already loaded, so dlopen(RTLD_NOLOAD) returns it (a plain dlopen is the
// fallback), and the real dlsym looks the name up there. Without a cap the answer is passed
// through untouched.
//
// Note [NVML device to CUDA ordinal]: caps are per CUDA ordinal, and NVML numbers devices in PCI
// order regardless of CUDA_VISIBLE_DEVICES and CUDA_DEVICE_ORDER. The NVML device is matched to
// a CUDA ordinal by UUID (nvmlDeviceGetUUID "GPU-xxxxxxxx-..." against cuDeviceGetUuid_v2 of each
// CUDA device) when the program has initialised CUDA; otherwise nvmlDeviceGetIndex is taken as
// the ordinal (right with CUDA_DEVICE_ORDER=PCI_BUS_ID and no CUDA_VISIBLE_DEVICES); a device
// that matches neither (hidden from CUDA) gets the smallest cap in force.
#include <dlfcn.h>

#include <strings.h>
#include <atomic>
#include <cstdio>
#include <cstring>

#include "base/config.h"
#include "base/entry.h"
#include "base/real.h"
#include "policies/context_pool.h"
#include "policies/memory_cap.h"

using namespace vramtrace;
using namespace vramtrace::shim;

namespace {

std::atomic<void*> g_nvml_handle{nullptr};

void* nvml_handle() noexcept {
  void* h = g_nvml_handle.load(std::memory_order_acquire);
  if (h) return h;
  h = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_NOLOAD);
  if (!h) h = dlopen("libnvidia-ml.so.1", RTLD_NOW);
  if (h) g_nvml_handle.store(h, std::memory_order_release);
  return h;
}

// A real NVML function by name, never our own export.
void* real_nvml(const char* name, void* ours) noexcept {
  void* h = nvml_handle();
  void* f = h ? real_dlsym()(h, name) : nullptr;
  if (!f || f == ours) {
    f = real_dlsym()(RTLD_NEXT, name);
    if (f == ours) f = nullptr;
  }
  return f;
}

template <class Fn>
Fn cached_real(std::atomic<void*>& slot, const char* name, void* ours) noexcept {
  void* f = slot.load(std::memory_order_acquire);
  if (!f) {
    f = real_nvml(name, ours);
    if (f) slot.store(f, std::memory_order_release);
  }
  return reinterpret_cast<Fn>(f);
}

// Note [NVML device to CUDA ordinal].
int ordinal_by_uuid(nvmlDevice_t device) noexcept {
  static std::atomic<void*> get_uuid{nullptr};
  auto nvml_uuid = cached_real<nvmlReturn_t (*)(nvmlDevice_t, char*, unsigned)>(get_uuid, "nvmlDeviceGetUUID", nullptr);
  const DriverTable* d = driver();
  if (!nvml_uuid || !d || !d->handle) return -1;
  char want[96] = {};
  if (nvml_uuid(device, want, sizeof want - 1) != NVML_SUCCESS) return -1;
  auto count = reinterpret_cast<CUresult (*)(int*)>(real_dlsym()(d->handle, "cuDeviceGetCount"));
  auto get = reinterpret_cast<CUresult (*)(CUdevice*, int)>(real_dlsym()(d->handle, "cuDeviceGet"));
  auto uuid = reinterpret_cast<CUresult (*)(CUuuid*, CUdevice)>(real_dlsym()(d->handle, "cuDeviceGetUuid_v2"));
  int n = 0;
  if (!count || !get || !uuid || count(&n) != CUDA_SUCCESS) return -1;
  for (int i = 0; i < n; ++i) {
    CUdevice dev = 0;
    CUuuid u{};
    if (get(&dev, i) != CUDA_SUCCESS || uuid(&u, dev) != CUDA_SUCCESS) continue;
    const unsigned char* b = reinterpret_cast<const unsigned char*>(u.bytes);
    char text[64];
    std::snprintf(text, sizeof text, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0],
                  b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
    if (strcasecmp(text, want) == 0) return i;
  }
  return -1;
}

/// The cap for an NVML device (0 = none) and the CUDA ordinal whose pools count as idle cache.
std::uint64_t cap_for_nvml(nvmlDevice_t device, int& ordinal) noexcept {
  ordinal = -1;
  const DeviceLimits& limits = config().limits;
  if (!config().enabled || !limits.any()) return 0;
  ordinal = ordinal_by_uuid(device);
  if (ordinal < 0) {
    static std::atomic<void*> get_index{nullptr};
    auto index = cached_real<nvmlReturn_t (*)(nvmlDevice_t, unsigned*)>(get_index, "nvmlDeviceGetIndex", nullptr);
    unsigned i = 0;
    if (index && index(device, &i) == NVML_SUCCESS) ordinal = static_cast<int>(i);
  }
  return ordinal >= 0 ? limits.for_device(ordinal) : limits.smallest();
}

/// Capped (free, total) for an NVML device; false when there is no cap (answer untouched).
bool capped(nvmlDevice_t device, unsigned long long& free_b, unsigned long long& total_b) noexcept {
  int ordinal = -1;
  const std::uint64_t cap = cap_for_nvml(device, ordinal);
  if (cap == 0) return false;
  std::uint64_t f = free_b, t = total_b;
  if (ordinal >= 0) {
    capped_figures(ordinal, pools().cached_free_bytes(ordinal), f, t);
  } else {
    t = std::min<std::uint64_t>(t, cap);
    f = std::min(f, t);
  }
  free_b = f;
  total_b = t;
  return true;
}

// Note [nested NVML calls]: the real library may implement one query with another of its exports
// (v1 through v2) by a call that our preloaded export interposes. The real call runs as the
// shim's own work, so such a nested call is passed through untouched and the figures are capped
// once, by the outer hook (tests/shim/fake/fake_nvml.cpp does exactly this).
template <class Fn, class Mem>
nvmlReturn_t real_call(Fn real, nvmlDevice_t device, Mem* memory) noexcept {
  InternalScope internal;
  return real(device, memory);
}

}  // namespace

extern "C" nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t* memory) {
  EntryScope e(Hook::nvmlDeviceGetMemoryInfo);
  static std::atomic<void*> slot{nullptr};
  auto real = cached_real<nvmlReturn_t (*)(nvmlDevice_t, nvmlMemory_t*)>(slot, "nvmlDeviceGetMemoryInfo",
                                                                         hook_wrapper(Hook::nvmlDeviceGetMemoryInfo));
  if (!real) return NVML_ERROR_FUNCTION_NOT_FOUND;
  if (EntryScope::internal()) return real(device, memory);  // Note [nested NVML calls]
  nvmlReturn_t r = real_call(real, device, memory);
  if (r != NVML_SUCCESS || !memory) return r;
  if (capped(device, memory->free, memory->total)) memory->used = memory->total - memory->free;
  return r;
}

extern "C" nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t* memory) {
  EntryScope e(Hook::nvmlDeviceGetMemoryInfo_v2);
  static std::atomic<void*> slot{nullptr};
  auto real = cached_real<nvmlReturn_t (*)(nvmlDevice_t, nvmlMemory_v2_t*)>(
      slot, "nvmlDeviceGetMemoryInfo_v2", hook_wrapper(Hook::nvmlDeviceGetMemoryInfo_v2));
  if (!real) return NVML_ERROR_FUNCTION_NOT_FOUND;
  if (EntryScope::internal()) return real(device, memory);  // Note [nested NVML calls]
  nvmlReturn_t r = real_call(real, device, memory);
  if (r != NVML_SUCCESS || !memory) return r;
  if (capped(device, memory->free, memory->total)) {
    // total = reserved + used + free, as the real v2 answer: the driver's reserved memory stays
    // what it is, up to what the capped device has besides its free bytes.
    const unsigned long long rest = memory->total - memory->free;
    memory->reserved = std::min(memory->reserved, rest);
    memory->used = rest - memory->reserved;
  }
  return r;
}
