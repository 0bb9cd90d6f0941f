// Context lifetime (policy INVAL: Note [context reset drops the cache] in context_pool.cpp) and
// device synchronisation (policy SYNC: a program's own cuCtxSynchronize also ends a lazy-sync
// epoch, Note [lazy sync before reuse] in context_pool.h).
#include "base/config.h"
#include "base/counters.h"
#include "base/entry.h"
#include "base/real.h"
#include "policies/context_pool.h"
#include "policies/stream_work.h"

using namespace vramtrace;
using namespace vramtrace::shim;

namespace {

template <Hook H>
CUresult reset_primary(CUdevice dev) noexcept {
  EntryScope e(H);
  auto real = real_driver<CUresult (*)(CUdevice)>(H);
  if (!real) return CUDA_ERROR_NOT_INITIALIZED;
  if (enabled() && !EntryScope::internal()) pools().drop_primary(dev);
  return real(dev);
}

template <Hook H>
CUresult release_primary(CUdevice dev) noexcept {
  EntryScope e(H);
  auto real = real_driver<CUresult (*)(CUdevice)>(H);
  if (!real) return CUDA_ERROR_NOT_INITIALIZED;
  CUresult r = real(dev);
  // The last release destroys the primary context. Nothing of ours can be in flight in it (the
  // program released it), so dropping after the call is safe.
  const DriverTable* d = driver();
  unsigned flags = 0;
  int active = 1;
  if (r == CUDA_SUCCESS && enabled() && !EntryScope::internal() && d->cuDevicePrimaryCtxGetState &&
      d->cuDevicePrimaryCtxGetState(dev, &flags, &active) == CUDA_SUCCESS && !active)
    pools().drop_primary(dev);
  return r;
}

}  // namespace

extern "C" CUresult cuDevicePrimaryCtxReset(CUdevice dev) { return reset_primary<Hook::cuDevicePrimaryCtxReset>(dev); }
extern "C" CUresult cuDevicePrimaryCtxReset_v2(CUdevice dev) {
  return reset_primary<Hook::cuDevicePrimaryCtxReset_v2>(dev);
}
extern "C" CUresult cuDevicePrimaryCtxRelease(CUdevice dev) {
  return release_primary<Hook::cuDevicePrimaryCtxRelease>(dev);
}
extern "C" CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev) {
  return release_primary<Hook::cuDevicePrimaryCtxRelease_v2>(dev);
}

extern "C" CUresult cuCtxDestroy_v2(CUcontext ctx) {
  EntryScope e(Hook::cuCtxDestroy_v2);
  auto real = real_driver<CUresult (*)(CUcontext)>(Hook::cuCtxDestroy_v2);
  if (!real) return CUDA_ERROR_NOT_INITIALIZED;
  if (enabled() && !EntryScope::internal()) pools().drop_context(ctx);
  return real(ctx);
}

extern "C" CUresult cuCtxSynchronize() {
  EntryScope e(Hook::cuCtxSynchronize);
  auto real = real_driver<CUresult (*)()>(Hook::cuCtxSynchronize);
  if (!real) return CUDA_ERROR_NOT_INITIALIZED;
  if (!enabled() || EntryScope::internal()) return real();
  const DriverTable* d = driver();
  CUcontext ctx = nullptr;
  ContextPool* pool = nullptr;
  if (d->cuCtxGetCurrent && d->cuCtxGetCurrent(&ctx) == CUDA_SUCCESS && ctx) pool = pools().find(ctx);
  std::uint64_t epoch = pool ? pool->begin_sync() : 0;
  const SyncToken token = side_work_before_sync();
  CUresult r = real();
  if (r == CUDA_SUCCESS) {
    bump(g_counters.program_syncs);
    if (pool) pool->end_sync(epoch);
    side_work_after_sync(ctx, token);  // Note [return to one stream]
  }
  return r;
}

extern "C" CUresult cuCtxSynchronize_v2(CUcontext ctx) {
  EntryScope e(Hook::cuCtxSynchronize_v2);
  auto real = real_driver<CUresult (*)(CUcontext)>(Hook::cuCtxSynchronize_v2);
  if (!real) return CUDA_ERROR_NOT_INITIALIZED;
  if (!enabled() || EntryScope::internal()) return real(ctx);
  ContextPool* pool = pools().find(ctx);
  std::uint64_t epoch = pool ? pool->begin_sync() : 0;
  const SyncToken token = side_work_before_sync();
  CUresult r = real(ctx);
  if (r == CUDA_SUCCESS) {
    bump(g_counters.program_syncs);
    if (pool) pool->end_sync(epoch);
    side_work_after_sync(ctx, token);  // Note [return to one stream]
  }
  return r;
}
