/* An independent count of the allocation calls a program makes at the CUDA runtime level, for the
 * GPU compatibility rows where the program keeps no count of its own (PyTorch in tensor mode and
 * with backend:cudaMallocAsync report num_device_alloc = 0).
 *
 * Preloaded in front of the shim: LD_PRELOAD=count_probe.so:libvramtrace.so. Each wrapper counts
 * and calls the next definition, dlsym(RTLD_NEXT, name) -- the shim's, which also checks that the
 * shim's dlsym keeps RTLD_NEXT meaning "after the caller". At exit it writes "probe.<name> N"
 * lines to $COUNT_PROBE_FILE (%p: pid). Plain C, glibc only. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef int cudaError_t;
typedef void* cudaStream_t;
typedef cudaError_t (*malloc_fn)(void**, size_t);
typedef cudaError_t (*free_fn)(void*);
typedef cudaError_t (*malloc_async_fn)(void**, size_t, cudaStream_t);
typedef cudaError_t (*free_async_fn)(void*, cudaStream_t);

static atomic_ulong n_malloc, n_free, n_malloc_async, n_free_async;

#define NEXT(type, name)                            \
  static type next_ = NULL;                         \
  if (!next_) next_ = (type)dlsym(RTLD_NEXT, name); \
  if (!next_) return 34; /* cudaErrorStubLibrary */

cudaError_t cudaMalloc(void** p, size_t n) {
  NEXT(malloc_fn, "cudaMalloc");
  atomic_fetch_add(&n_malloc, 1);
  return next_(p, n);
}
cudaError_t cudaFree(void* p) {
  NEXT(free_fn, "cudaFree");
  atomic_fetch_add(&n_free, 1);
  return next_(p);
}
cudaError_t cudaMallocAsync(void** p, size_t n, cudaStream_t s) {
  NEXT(malloc_async_fn, "cudaMallocAsync");
  atomic_fetch_add(&n_malloc_async, 1);
  return next_(p, n, s);
}
cudaError_t cudaFreeAsync(void* p, cudaStream_t s) {
  NEXT(free_async_fn, "cudaFreeAsync");
  atomic_fetch_add(&n_free_async, 1);
  return next_(p, s);
}

__attribute__((destructor)) static void probe_dump(void) {
  const char* pattern = getenv("COUNT_PROBE_FILE");
  if (!pattern || (!atomic_load(&n_malloc) && !atomic_load(&n_malloc_async))) return;
  char path[4096];
  size_t o = 0;
  for (const char* c = pattern; *c && o + 24 < sizeof path; ++c) {
    if (c[0] == '%' && c[1] == 'p') {
      o += (size_t)snprintf(path + o, sizeof path - o, "%d", (int)getpid());
      ++c;
    } else {
      path[o++] = *c;
    }
  }
  path[o] = 0;
  FILE* f = fopen(path, "w");
  if (!f) return;
  fprintf(f, "probe.cudaMalloc %lu\nprobe.cudaFree %lu\nprobe.cudaMallocAsync %lu\nprobe.cudaFreeAsync %lu\n",
          atomic_load(&n_malloc), atomic_load(&n_free), atomic_load(&n_malloc_async), atomic_load(&n_free_async));
  fclose(f);
}
