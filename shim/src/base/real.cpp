#include "base/real.h"

#include <dlfcn.h>
#include <link.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "base/log.h"

namespace vramtrace::shim {
namespace {

std::atomic<DlsymFn> g_real_dlsym{nullptr};
std::atomic<const DriverTable*> g_driver{nullptr};
std::atomic<void*> g_driver_hint{nullptr};
std::atomic<void*> g_runtime[kHookCount];

// Note [no lock across dlopen]: a thread inside dlopen holds the loader lock and may run a
// constructor that calls dlsym -> our hook; if we held a lock of ours around dlopen, two threads
// could deadlock (loader lock vs ours). So the tables are built without locks, and the first
// complete table published with compare_exchange wins; the loser's copy is discarded.
const DriverTable* build_driver_table() noexcept {
  DlsymFn sym = real_dlsym();
  void* h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NODELETE);
  if (!h) h = g_driver_hint.load(std::memory_order_acquire);
  if (!h) {
    if (log_enabled(LogLevel::debug)) {
      static std::atomic<bool> said{false};
      const char* why = dlerror();
      if (!said.exchange(true))
        log_line(LogLevel::debug, "cannot load libcuda.so.1 ({}): driver hooks answer CUDA_ERROR_NOT_INITIALIZED",
                 why ? why : "no error text");
    }
    return nullptr;
  }
  auto* t = new (std::nothrow) DriverTable;
  if (!t) return nullptr;
  t->handle = h;
  for (std::size_t i = 1; i < kHookCount; ++i) {
    Hook hk = static_cast<Hook>(i);
    if (hook_level(hk) != Level::driver) continue;
    t->real[i] = sym(h, hook_name(static_cast<std::uint16_t>(i)));
    // A driver that returns our own export would make us call ourselves: never accept it.
    if (t->real[i] == hook_wrapper(hk)) t->real[i] = nullptr;
    if (t->real[i]) t->by_real[t->pairs++] = {t->real[i], hk};
  }
  std::sort(t->by_real, t->by_real + t->pairs, [](const auto& a, const auto& b) { return a.real < b.real; });
#define VT_REAL(field) t->api.field = reinterpret_cast<decltype(t->api.field)>(sym(h, #field))
  VT_REAL(cuMemAlloc_v2);
  VT_REAL(cuMemFree_v2);
  VT_REAL(cuMemGetInfo_v2);
  VT_REAL(cuMemAddressReserve);
  VT_REAL(cuMemAddressFree);
  VT_REAL(cuMemCreate);
  VT_REAL(cuMemRelease);
  VT_REAL(cuMemMap);
  VT_REAL(cuMemUnmap);
  VT_REAL(cuMemSetAccess);
  VT_REAL(cuMemGetAllocationGranularity);
  VT_REAL(cuEventCreate);
  VT_REAL(cuEventRecord);
  VT_REAL(cuEventQuery);
  VT_REAL(cuEventSynchronize);
  VT_REAL(cuEventDestroy_v2);
  VT_REAL(cuCtxSynchronize);
#undef VT_REAL
#define VT_REAL(field) t->field = reinterpret_cast<decltype(t->field)>(sym(h, #field))
  VT_REAL(cuCtxGetCurrent);
  VT_REAL(cuCtxGetDevice);
  VT_REAL(cuCtxSetCurrent);
  VT_REAL(cuDevicePrimaryCtxGetState);
  VT_REAL(cuDevicePrimaryCtxRetain);
  VT_REAL(cuStreamIsCapturing);
  VT_REAL(cuStreamWaitEvent);
  VT_REAL(cuStreamGetId);
  VT_REAL(cuStreamGetCtx);
  VT_REAL(cuStreamGetFlags);
  VT_REAL(cuDriverGetVersion);
  VT_REAL(cuDeviceGetName);
  VT_REAL(cuDeviceTotalMem_v2);
#undef VT_REAL
  return t;
}

// Paths of loaded objects named libcudart.so*, collected under dl_iterate_phdr's lock and
// opened only after it returns (dlopen inside the callback could deadlock on the loader lock).
struct CudartPaths {
  static constexpr int kMax = 4;
  char path[kMax][512] = {};
  int n = 0;
};

int collect_cudart(struct dl_phdr_info* info, size_t, void* data) {
  auto* s = static_cast<CudartPaths*>(data);
  const char* path = info->dlpi_name;
  if (!path || !*path || s->n == CudartPaths::kMax) return 0;
  const char* base = std::strrchr(path, '/');
  base = base ? base + 1 : path;
  if (std::strncmp(base, "libcudart.so", 12) != 0 || std::strlen(path) >= sizeof(s->path[0])) return 0;
  std::strcpy(s->path[s->n++], path);
  return 0;
}

void* find_in_loaded_cudart(const char* name) noexcept {
  CudartPaths paths;
  dl_iterate_phdr(collect_cudart, &paths);
  for (int i = 0; i < paths.n; ++i) {
    void* h = dlopen(paths.path[i], RTLD_LAZY | RTLD_NOLOAD);
    if (!h) continue;
    void* f = real_dlsym()(h, name);
    dlclose(h);
    if (f) return f;
  }
  return nullptr;
}

}  // namespace

DlsymFn real_dlsym() noexcept {
  DlsymFn f = g_real_dlsym.load(std::memory_order_acquire);
  if (f) return f;
  static const char* const kVersions[] = {"GLIBC_2.34", "GLIBC_2.2.5", "GLIBC_2.17"};
  for (const char* v : kVersions) {
    f = reinterpret_cast<DlsymFn>(dlvsym(RTLD_NEXT, "dlsym", v));
    if (f) break;
  }
  if (!f) {
    // Last resort: glibc by name (still never the private _dl_sym).
    void* libc = dlopen("libc.so.6", RTLD_NOW | RTLD_NOLOAD);
    for (const char* v : kVersions) {
      if (!libc || f) break;
      f = reinterpret_cast<DlsymFn>(dlvsym(libc, "dlsym", v));
    }
  }
  if (!f) {
    log_line(LogLevel::error, "cannot find glibc's dlsym; aborting");
    abort();
  }
  g_real_dlsym.store(f, std::memory_order_release);
  return f;
}

const DriverTable* driver() noexcept {
  const DriverTable* t = g_driver.load(std::memory_order_acquire);
  if (t) return t;
  const DriverTable* mine = build_driver_table();
  if (!mine) return nullptr;
  const DriverTable* expected = nullptr;
  if (g_driver.compare_exchange_strong(expected, mine, std::memory_order_acq_rel)) {
    std::size_t wanted = 0;
    for (std::size_t i = 1; i < kHookCount; ++i) wanted += hook_level(static_cast<Hook>(i)) == Level::driver;
    log_line(LogLevel::debug, "driver: libcuda.so.1 found, {} of {} hooked driver functions defined", mine->pairs,
             wanted);
    return mine;
  }
  delete mine;
  return expected;
}

void* DriverTable::wrapper_for(void* real_fn) const noexcept {
  auto it = std::lower_bound(by_real, by_real + pairs, real_fn, [](const Pair& p, void* r) { return p.real < r; });
  if (it != by_real + pairs && it->real == real_fn) return hook_wrapper(it->hook);
  return nullptr;
}

void* real_runtime(Hook h) noexcept {
  std::size_t i = static_cast<std::size_t>(h);
  void* f = g_runtime[i].load(std::memory_order_acquire);
  if (f) return f;
  const char* name = hook_name(static_cast<std::uint16_t>(i));
  f = real_dlsym()(RTLD_NEXT, name);
  if (!f || f == hook_wrapper(h)) {
    f = find_in_loaded_cudart(name);
    if (f == hook_wrapper(h)) f = nullptr;
  }
  if (f)
    g_runtime[i].store(f, std::memory_order_release);
  else
    log_decision(Decision::no_real_function, h,
                 " (not after us in the search order, nor in a loaded libcudart.so*): "
                 "cudaErrorSharedObjectSymbolNotFound");
  return f;
}

void note_driver_handle(void* handle) noexcept {
  void* expected = nullptr;
  g_driver_hint.compare_exchange_strong(expected, handle, std::memory_order_acq_rel);
}

void real_after_fork_child() noexcept {}

}  // namespace vramtrace::shim
