// The decision half of our dlsym (the trampoline is dlsym_hook.S).
//
// Rules (docs/interposition.md, "dlsym rules"):
//  - the caller's handle is respected: we look the name up with the caller's handle first and
//    substitute only if that lookup finds something (so a handle that does not define the name
//    still gets NULL and glibc's dlerror);
//  - names are matched exactly against the driver hooks of hooks.def (cuMemAlloc_v2, not a "cu"
//    prefix);
//  - RTLD_NEXT and RTLD_DEFAULT are always forwarded by tail call: RTLD_DEFAULT finds our
//    exports by itself (we are preloaded), RTLD_NEXT must keep meaning "after the caller";
//  - inside the shim only the real dlsym is ever called (real.h).
#include <dlfcn.h>

#include "base/config.h"
#include "base/hooks.h"
#include "base/log.h"
#include "base/real.h"

namespace {
// At debug: why a lookup of a hooked name was forwarded (only hooked names are looked up, so
// the cost stays off every other dlsym).
void log_forwarded(void* handle, const char* name) noexcept {
  using namespace vramtrace::shim;
  if (!name) return;
  const Hook h = hook_by_name(name);
  if (h == Hook::none) return;
  if (!enabled())
    log_decision(Decision::dlsym_disabled, h);
  else if (handle == RTLD_DEFAULT)
    log_decision(Decision::dlsym_default, h);
  else
    log_decision(Decision::dlsym_next, h);
}
}  // namespace

extern "C" {
/// Jump target of the trampoline: glibc's dlsym. Written before vt_dlsym_decide returns 0.
__attribute__((visibility("hidden"))) void* vt_dlsym_next = nullptr;

__attribute__((visibility("hidden"))) void* vt_dlsym_decide(void* handle, const char* name) noexcept {
  using namespace vramtrace::shim;
  DlsymFn real = real_dlsym();
  vt_dlsym_next = reinterpret_cast<void*>(real);
  if (!name || handle == RTLD_NEXT || handle == RTLD_DEFAULT || !enabled()) {
    if (log_enabled(LogLevel::debug)) log_forwarded(handle, name);
    return nullptr;
  }
  Hook h = hook_by_name(name);
  // Driver names only: a runtime wrapper calls "the" cudart it finds, which may not be the copy
  // behind this handle when a process holds several (PyTorch's and CuPy's); the driver hook that
  // copy reaches sees the allocation anyway.
  // NVML names too (nvml_hooks.cpp): frameworks dlopen libnvidia-ml.so.1 and look them up there.
  if (h == Hook::none) return nullptr;
  if (hook_level(h) == Level::runtime) {
    log_decision(Decision::dlsym_runtime, h);
    return nullptr;
  }
  void* found = real(handle, name);
  if (!found) {
    log_decision(Decision::dlsym_not_found, h);
    return nullptr;  // forward: glibc sets dlerror
  }
  if (hook_level(h) == Level::driver) note_driver_handle(handle);
  log_note_road(h, Road::dlsym);
  log_decision(Decision::dlsym_substituted, h);
  return hook_wrapper(h);
}
}
