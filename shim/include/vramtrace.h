/* vramtrace public C API: annotate a program running under libvramtrace.so.
 *
 * Call these from C, C++ or Python (ctypes.CDLL(None).vramtrace_mark). When the program runs
 * without the shim, look them up with dlsym(RTLD_DEFAULT, "vramtrace_mark") and skip the calls if
 * absent, or link weakly (`#pragma weak vramtrace_mark`).
 *
 * Thread safety: every function may be called from any thread at any time, including before
 * CUDA is initialised and during exit. None of them calls CUDA or allocates device memory. */
#ifndef VRAMTRACE_H
#define VRAMTRACE_H

#ifdef __cplusplus
extern "C" {
#endif

#define VRAMTRACE_VERSION_MAJOR 0
#define VRAMTRACE_VERSION_MINOR 1
#define VRAMTRACE_VERSION_PATCH 0

#if defined(__GNUC__)
#define VT_PUBLIC __attribute__((visibility("default")))
#else
#define VT_PUBLIC
#endif

/* Records a `mark` event named `name` (a UTF-8 string, copied; NULL is treated as "") in the
 * trace, stamped with the time and thread, e.g. "step 12" or "eval begins". Reports show marks on
 * the timeline. No-op when tracing is off or VRAMTRACE_CONF was invalid. */
VT_PUBLIC void vramtrace_mark(const char* name);

/* Writes out the trace events buffered so far (e.g. before a crash-prone section). Blocks until
 * they reached the trace file. No-op when tracing is off. */
VT_PUBLIC void vramtrace_flush(void);

/* From now on, every device allocation of the process goes to the driver as the program asked for
 * it, instead of through the shim's caching allocator: for a program whose own caching allocator
 * is in charge (PyTorch's native allocator; the tensor-level recorder of `vramtrace run` calls it
 * when PyTorch initialises CUDA), so that there is one cache, as without vramtrace. The memory cap
 * still applies and every allocation is still traced; blocks the shim already handed out are
 * freed through it as before. Cannot be undone. */
VT_PUBLIC void vramtrace_forward_allocations(void);

/* The shim's version as "MAJOR.MINOR.PATCH" (static storage, never NULL). */
VT_PUBLIC const char* vramtrace_version(void);

#ifdef __cplusplus
}
#endif

#endif /* VRAMTRACE_H */
