// Finding the real functions behind our hooks: the real dlsym (through dlvsym), the driver
// (dlopen("libcuda.so.1") + the real dlsym by exact ABI name), the runtime (the cudart the
// program would have bound to), and the map from a real driver pointer to our wrapper of exactly
// that variant (docs/interposition.md: "Finding the real functions", "cuGetProcAddress").
//
// Everything here is lazy, lock-free and idempotent: it may run first from dlsym, from a
// resolver before cuInit, or inside a dlopen constructor. No shim lock is ever held across
// dlopen (Note [no lock across dlopen]).
#pragma once

#include <cstdint>

#include "base/hooks.h"
#include "vramtrace/cuda_driver_device.h"

namespace vramtrace::shim {

using DlsymFn = void* (*)(void*, const char*);

/// glibc's dlsym: dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34"), then "GLIBC_2.2.5" (x86-64) or
/// "GLIBC_2.17" (aarch64). Never the private _dl_sym/__libc_dlsym. Never null after the first
/// call on a glibc system (aborts with one message otherwise: nothing can work without it).
DlsymFn real_dlsym() noexcept;

/// The real driver, resolved once.
struct DriverTable {
  void* handle = nullptr;       ///< libcuda handle (never closed)
  void* real[kHookCount] = {};  ///< real function per driver hook, null if absent
  CudaDriverApi api;            ///< what CudaDriverDevice needs
  CUresult (*cuCtxGetCurrent)(CUcontext*) = nullptr;
  CUresult (*cuCtxGetDevice)(CUdevice*) = nullptr;
  CUresult (*cuCtxSetCurrent)(CUcontext) = nullptr;
  CUresult (*cuDevicePrimaryCtxGetState)(CUdevice, unsigned int*, int*) = nullptr;
  CUresult (*cuDevicePrimaryCtxRetain)(CUcontext*, CUdevice) = nullptr;
  CUresult (*cuStreamIsCapturing)(CUstream, CUstreamCaptureStatus*) = nullptr;
  CUresult (*cuStreamWaitEvent)(CUstream, CUevent, unsigned int) = nullptr;
  CUresult (*cuStreamGetId)(CUstream, unsigned long long*) = nullptr;
  CUresult (*cuStreamGetCtx)(CUstream, CUcontext*) = nullptr;
  CUresult (*cuStreamGetFlags)(CUstream, unsigned int*) = nullptr;
  CUresult (*cuDriverGetVersion)(int*) = nullptr;
  CUresult (*cuDeviceGetName)(char*, int, CUdevice) = nullptr;
  CUresult (*cuDeviceTotalMem_v2)(size_t*, CUdevice) = nullptr;
  /// Wrapper for a real pointer (cuGetProcAddress substitution); null if not one of ours.
  void* wrapper_for(void* real_fn) const noexcept;
  /// Sorted (real pointer, hook) pairs, `pairs` of them.
  struct Pair {
    void* real;
    Hook hook;
  };
  Pair by_real[kHookCount] = {};
  std::size_t pairs = 0;
};

/// The driver table, loading libcuda.so.1 on first use. Null when no libcuda can be found
/// (then every driver hook returns CUDA_ERROR_NOT_INITIALIZED... only reachable by a program
/// that calls our exports without any driver installed).
const DriverTable* driver() noexcept;

/// Real driver function of a hook, typed; null if absent.
template <class Fn>
inline Fn real_driver(Hook h) noexcept {
  const DriverTable* d = driver();
  return d ? reinterpret_cast<Fn>(d->real[static_cast<std::size_t>(h)]) : nullptr;
}

/// Real cudart function of a runtime hook: dlsym(RTLD_NEXT) from the shim, else the first
/// loaded object named libcudart.so* that defines it (PyTorch loads cudart into a local scope).
/// Cached. Null if none.
void* real_runtime(Hook h) noexcept;

/// Remembers a handle through which a hooked driver name was found (used only when
/// dlopen("libcuda.so.1") fails, e.g. a driver loaded by full path under another name).
void note_driver_handle(void* handle) noexcept;

/// Forget cached state in a forked child (nothing to do today: every table stays valid, as the
/// child has the same mappings). Kept so the lifecycle code names every piece of state.
void real_after_fork_child() noexcept;

}  // namespace vramtrace::shim
