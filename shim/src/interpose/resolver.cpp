// Entry-point resolvers (policy WRAP): cuGetProcAddress (4 arguments, CUDA 11.3-11.8 ABI),
// cuGetProcAddress_v2 (5 arguments, 12.0+), and the runtime's cudaGetDriverEntryPoint*.
//
// Rule (docs/interposition.md, "cuGetProcAddress"): call the real resolver with the same arguments;
// only on success with a non-null pointer, replace the pointer by our wrapper of exactly the
// function the driver returned (pointer identity, so the cudaVersion/flags choice of ABI variant is
// the driver's). This also covers the runtime's self-lookup of "cuGetProcAddress" at 11030 and at
// 12000: the real resolver returns the real cuGetProcAddress / cuGetProcAddress_v2, which map to
// our two wrappers, so every later lookup of that cudart goes through us (without this a static
// cudart escapes: seen on the H200). Empty names (the runtime's probe), unknown names, NULL
// results, statuses and errors are passed back untouched.
#include <dlfcn.h>

#include <string_view>

#include "base/config.h"
#include "base/counters.h"
#include "base/entry.h"
#include "base/log.h"
#include "base/real.h"

using namespace vramtrace::shim;

namespace {
// Resolver lookups are counted on their own even inside another hooked call (cudart resolves
// its entry points inside the program's first cudaMalloc): they are not allocations, and the
// count shows whether a cudart resolved through us at all. They do not set the entry point.
void count_resolver_call(Hook h) noexcept {
  g_calls[static_cast<std::size_t>(h)].fetch_add(1, std::memory_order_relaxed);
  log_hook_entered(h, t_entry.entry != 0 ? t_entry.entry : static_cast<std::uint16_t>(h));
}

// Base name of an ABI name: "cuMemAllocAsync_ptsz" -> "cuMemAllocAsync", "cuMemAlloc_v2" ->
// "cuMemAlloc" (what a resolver is asked for).
std::string_view base_name(std::string_view n) noexcept {
  if (n.size() > 5 && n.substr(n.size() - 5) == "_ptsz") n.remove_suffix(5);
  std::size_t u = n.rfind("_v");
  if (u != std::string_view::npos && u + 2 < n.size() &&
      n.substr(u + 2).find_first_not_of("0123456789") == std::string_view::npos)
    n = n.substr(0, u);
  return n;
}

// The first driver hook of the family `symbol` names (Hook::none: not a family we hook).
Hook hooked_family(const char* symbol) noexcept {
  if (!symbol || !*symbol) return Hook::none;
  for (std::size_t i = 1; i < kHookCount; ++i) {
    Hook h = static_cast<Hook>(i);
    if (hook_level(h) == Level::driver && base_name(hook_name(static_cast<std::uint16_t>(i))) == symbol) return h;
  }
  return Hook::none;
}

// The hook whose wrapper `w` is (debug log only: a linear search).
Hook hook_of_wrapper(void* w) noexcept {
  for (std::size_t i = 1; i < kHookCount; ++i)
    if (hook_wrapper(static_cast<Hook>(i)) == w) return static_cast<Hook>(i);
  return Hook::none;
}

// `resolver` is the hook the lookup came in by (for the debug log).
void substitute(Hook resolver, const char* symbol, void** pfn) noexcept {
  if (!pfn || !*pfn || !enabled()) return;
  const DriverTable* d = driver();
  if (!d) return;
  void* w = d->wrapper_for(*pfn);
  bool exactly_named = false;
  const char* exported_name = nullptr;
  if (!w) {
    // Second chance: dladdr names the pointer exactly when it is an exported symbol (e.g. a driver
    // whose resolver returns addresses that dlsym on our handle did not). An exported variant we
    // do not hook (cuMemAlloc's 32-bit ABI) is left alone.
    Dl_info info{};
    if (dladdr(*pfn, &info) && info.dli_saddr == *pfn && info.dli_sname) {
      exactly_named = true;
      exported_name = info.dli_sname;
      Hook h = hook_by_name(info.dli_sname);
      if (h != Hook::none && hook_level(h) == Level::driver) w = hook_wrapper(h);
    }
  }
  if (w) {
    *pfn = w;
    bump(g_counters.resolver_substitutions);
    if (log_enabled(LogLevel::debug)) {
      const Hook target = hook_of_wrapper(w);
      log_note_road(target, Road::resolver);
      log_decision(Decision::resolver_substituted, target, " (asked {}(\"{}\"))",
                   hook_name(static_cast<std::uint16_t>(resolver)), symbol ? symbol : "");
    }
  } else if (Hook family = !exactly_named || log_enabled(LogLevel::debug) ? hooked_family(symbol) : Hook::none;
             family != Hook::none) {
    if (exactly_named) {
      log_decision(Decision::resolver_unhooked, family, " (asked {}(\"{}\"), got {})",
                   hook_name(static_cast<std::uint16_t>(resolver)), symbol, exported_name);
    } else {
      // A family we hook came back as an internal pointer we cannot map to a variant: the program
      // bypasses us for it. Counted so that the GPU run shows it (shim.resolver_unmapped).
      bump(g_counters.resolver_unmapped);
      log_decision(Decision::resolver_unmapped, family, " (asked {}(\"{}\"))",
                   hook_name(static_cast<std::uint16_t>(resolver)), symbol);
    }
  }
}
}  // namespace

extern "C" CUresult cuGetProcAddress(const char* symbol, void** pfn, int cudaVersion, cuuint64_t flags) {
  count_resolver_call(Hook::cuGetProcAddress);
  auto real = real_driver<CUresult (*)(const char*, void**, int, cuuint64_t)>(Hook::cuGetProcAddress);
  if (!real) return CUDA_ERROR_NOT_INITIALIZED;
  CUresult r = real(symbol, pfn, cudaVersion, flags);
  if (r == CUDA_SUCCESS) substitute(Hook::cuGetProcAddress, symbol, pfn);
  return r;
}

extern "C" CUresult cuGetProcAddress_v2(const char* symbol, void** pfn, int cudaVersion, cuuint64_t flags,
                                        CUdriverProcAddressQueryResult* status) {
  count_resolver_call(Hook::cuGetProcAddress_v2);
  auto real = real_driver<CUresult (*)(const char*, void**, int, cuuint64_t, CUdriverProcAddressQueryResult*)>(
      Hook::cuGetProcAddress_v2);
  if (!real) return CUDA_ERROR_NOT_INITIALIZED;
  CUresult r = real(symbol, pfn, cudaVersion, flags, status);
  if (r == CUDA_SUCCESS) substitute(Hook::cuGetProcAddress_v2, symbol, pfn);
  return r;
}

// cudart's own implementation asks the resolver pointer it obtained at init, which is already our
// wrapper, so this is a second line of defence (e.g. a cudart initialised before we were).
extern "C" cudaError_t cudaGetDriverEntryPoint(const char* symbol, void** funcPtr, unsigned long long flags,
                                               enum cudaDriverEntryPointQueryResult* status) {
  count_resolver_call(Hook::cudaGetDriverEntryPoint);
  auto real =
      reinterpret_cast<cudaError_t (*)(const char*, void**, unsigned long long, cudaDriverEntryPointQueryResult*)>(
          real_runtime(Hook::cudaGetDriverEntryPoint));
  if (!real) return cudaErrorSharedObjectSymbolNotFound;
  cudaError_t r = real(symbol, funcPtr, flags, status);
  if (r == cudaSuccess) substitute(Hook::cudaGetDriverEntryPoint, symbol, funcPtr);
  return r;
}

extern "C" cudaError_t cudaGetDriverEntryPointByVersion(const char* symbol, void** funcPtr, unsigned int cudaVersion,
                                                        unsigned long long flags,
                                                        enum cudaDriverEntryPointQueryResult* status) {
  count_resolver_call(Hook::cudaGetDriverEntryPointByVersion);
  auto real = reinterpret_cast<cudaError_t (*)(const char*, void**, unsigned int, unsigned long long,
                                               cudaDriverEntryPointQueryResult*)>(
      real_runtime(Hook::cudaGetDriverEntryPointByVersion));
  if (!real) return cudaErrorSharedObjectSymbolNotFound;
  cudaError_t r = real(symbol, funcPtr, cudaVersion, flags, status);
  if (r == cudaSuccess) substitute(Hook::cudaGetDriverEntryPointByVersion, symbol, funcPtr);
  return r;
}
