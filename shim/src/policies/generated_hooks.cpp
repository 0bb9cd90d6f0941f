// Wrappers generated from hooks.def: runtime ENTER hooks and driver TRACE/PASS hooks. The other
// policies are written by hand (driver_memory.cpp, driver_context.cpp, resolver.cpp,
// memory_queries.cpp, nvml_hooks.cpp).
#include "base/config.h"
#include "base/entry.h"
#include "base/real.h"
#include "policies/stream_work.h"
#include "policies/tracers.h"

using namespace vramtrace::shim;

// Runtime: note the entry point, call the cudart the program would have called. The allocation
// itself is handled by the driver hook that cudart reaches (Note [count once] in entry.h).
#define VT_GEN_runtime_ENTER(name, ret, params, args)                       \
  extern "C" ret name params {                                              \
    EntryScope e_(Hook::name);                                              \
    auto real_ = reinterpret_cast<ret(*) params>(real_runtime(Hook::name)); \
    if (!real_) return cudaErrorSharedObjectSymbolNotFound;                 \
    return real_ args;                                                      \
  }
#define VT_GEN_runtime_WRAP(name, ret, params, args)
#define VT_GEN_runtime_REPORT(name, ret, params, args)
#define VT_GEN_nvml_REPORT(name, ret, params, args)
#define VT_GEN_runtime_FAST(name, ret, params, args)

// Driver: ask the cap (Admit<Hook::name>, tracers.h), note what must be recorded before the call
// (Before<Hook::name>), forward to the real function, then trace (Tracer<Hook::name>).
#define VT_GEN_DRIVER_FORWARD(name, ret, params, args)                                                       \
  extern "C" ret name params {                                                                               \
    EntryScope e_(Hook::name);                                                                               \
    auto real_ = real_driver<ret(*) params>(Hook::name);                                                     \
    if (!real_) return CUDA_ERROR_NOT_INITIALIZED;                                                           \
    const bool traced_ = !EntryScope::internal() && enabled();                                               \
    if (traced_ && !Admit<Hook::name>::admits(e_.entry(), VT_UNPAREN args)) return CUDA_ERROR_OUT_OF_MEMORY; \
    if (traced_) Before<Hook::name>::call(e_.entry(), VT_UNPAREN args);                                      \
    ret r_ = real_ args;                                                                                     \
    if (traced_) Tracer<Hook::name>::after(e_.entry(), r_, VT_UNPAREN args);                                 \
    return r_;                                                                                               \
  }
// Work submission: the stream is reported before the work reaches the driver (Note [work on
// another stream] in policies/stream_work.h), so that nothing the work uses is reused too early.
#define VT_GEN_driver_SUBMIT(name, ret, params, args)                                                   \
  extern "C" ret name params {                                                                          \
    EntryScope e_(Hook::name);                                                                          \
    auto real_ = real_driver<ret(*) params>(Hook::name);                                                \
    if (!real_) return CUDA_ERROR_NOT_INITIALIZED;                                                      \
    note_stream_work(Hook::name, per_thread_name(#name), stream_work_detail::ends_with(#name, "_ptds"), \
                     VT_UNPAREN args);                                                                  \
    return real_ args;                                                                                  \
  }
#define VT_GEN_driver_TRACE VT_GEN_DRIVER_FORWARD
#define VT_GEN_driver_PASS VT_GEN_DRIVER_FORWARD
#define VT_GEN_driver_CACHE(name, ret, params, args)
#define VT_GEN_driver_REPORT(name, ret, params, args)
#define VT_GEN_driver_INVAL(name, ret, params, args)
#define VT_GEN_driver_SYNC(name, ret, params, args)
#define VT_GEN_driver_WRAP(name, ret, params, args)

#define VT_HOOK(level, policy, name, ret, params, args) VT_GEN_##level##_##policy(name, ret, params, args)
#include "base/hooks.def"
#undef VT_HOOK
