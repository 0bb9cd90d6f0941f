// Entry-point resolvers (policy WRAP): cuGetProcAddress (4 arguments, CUDA 11.3-11.8 ABI),
// cuGetProcAddress_v2 (5 arguments, 12.0+), and the runtime's cudaGetDriverEntryPoint*.
//
// Rule (research/interposition.md 4.3): call the real resolver with the same arguments; only on
// success with a non-null pointer, replace the pointer by our wrapper of exactly the function the
// driver returned (pointer identity, so the cudaVersion/flags choice of ABI variant is the
// driver's). This also covers the runtime's self-lookup of "cuGetProcAddress" at 11030 and at
// 12000: the real resolver returns the real cuGetProcAddress / cuGetProcAddress_v2, which map to
// our two wrappers, so every later lookup of that cudart goes through us (without this a static
// cudart escapes: seen on the H200). Empty names (the runtime's probe), unknown names, NULL
// results, statuses and errors are passed back untouched.
#include "config.h"
#include "counters.h"
#include "entry.h"
#include "real.h"

using namespace vramtrace::shim;

namespace {
// Resolver lookups are counted on their own even inside another hooked call (cudart resolves
// its entry points inside the program's first cudaMalloc): they are not allocations, and the
// count shows whether a cudart resolved through us at all. They do not set the entry point.
void count_resolver_call(Hook h) noexcept { g_calls[static_cast<std::size_t>(h)].fetch_add(1, std::memory_order_relaxed); }

void substitute(void** pfn) noexcept {
  if (!pfn || !*pfn || !enabled()) return;
  const DriverTable* d = driver();
  if (!d) return;
  if (void* w = d->wrapper_for(*pfn)) {
    *pfn = w;
    bump(g_counters.resolver_substitutions);
  }
}
}  // namespace

extern "C" CUresult cuGetProcAddress(const char* symbol, void** pfn, int cudaVersion, cuuint64_t flags) {
  count_resolver_call(Hook::cuGetProcAddress);
  auto real = real_driver<CUresult (*)(const char*, void**, int, cuuint64_t)>(Hook::cuGetProcAddress);
  if (!real) return CUDA_ERROR_NOT_INITIALIZED;
  CUresult r = real(symbol, pfn, cudaVersion, flags);
  if (r == CUDA_SUCCESS) substitute(pfn);
  return r;
}

extern "C" CUresult cuGetProcAddress_v2(const char* symbol, void** pfn, int cudaVersion, cuuint64_t flags,
                                        CUdriverProcAddressQueryResult* status) {
  count_resolver_call(Hook::cuGetProcAddress_v2);
  auto real = real_driver<CUresult (*)(const char*, void**, int, cuuint64_t, CUdriverProcAddressQueryResult*)>(
      Hook::cuGetProcAddress_v2);
  if (!real) return CUDA_ERROR_NOT_INITIALIZED;
  CUresult r = real(symbol, pfn, cudaVersion, flags, status);
  if (r == CUDA_SUCCESS) substitute(pfn);
  return r;
}

// cudart's own implementation asks the resolver pointer it obtained at init, which is already our
// wrapper, so this is a second line of defence (e.g. a cudart initialised before we were).
extern "C" cudaError_t cudaGetDriverEntryPoint(const char* symbol, void** funcPtr, unsigned long long flags,
                                               enum cudaDriverEntryPointQueryResult* status) {
  count_resolver_call(Hook::cudaGetDriverEntryPoint);
  auto real = reinterpret_cast<cudaError_t (*)(const char*, void**, unsigned long long, cudaDriverEntryPointQueryResult*)>(
      real_runtime(Hook::cudaGetDriverEntryPoint));
  if (!real) return cudaErrorSharedObjectSymbolNotFound;
  cudaError_t r = real(symbol, funcPtr, flags, status);
  if (r == cudaSuccess) substitute(funcPtr);
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
  if (r == cudaSuccess) substitute(funcPtr);
  return r;
}
