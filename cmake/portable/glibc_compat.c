/* Definitions, private to each portable binary, of the glibc symbols newer than the baseline
 * (glibc 2.31, Debian 11) that GCC 12's static libstdc++ and libgcc_eh reference. Linking
 * those archives against an old glibc leaves exactly these three undefined; each is defined
 * here with hidden visibility, so nothing is exported and a newer glibc's own copy is never
 * interposed on by ours.
 *
 * Thread safety: every function here is safe to call from any thread, as glibc's are. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <link.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

#define VT_HIDDEN __attribute__((visibility("hidden")))

/* glibc 2.32. libstdc++ reads it to skip atomic reference counts in a process that never
 * started a thread. Zero means "assume threads", which is always correct, only not the fastest. */
VT_HIDDEN char __libc_single_threaded = 0;

/* glibc 2.36. std::random_device's default source in libstdc++ 12. getentropy (glibc 2.25)
 * draws from the same kernel generator; /dev/urandom covers kernels without getrandom. Like
 * glibc's, it cannot fail: without any source of randomness the process is aborted rather
 * than handed a predictable number. */
static void vt_fill_random(void* buf, size_t len) {
  unsigned char* p = buf;
  while (len > 0) {
    size_t n = len > 256 ? 256 : len; /* getentropy's limit per call */
    if (getentropy(p, n) != 0) {
      int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
      if (fd < 0) abort();
      while (len > 0) {
        ssize_t r = read(fd, p, len);
        if (r <= 0) {
          if (r < 0 && errno == EINTR) continue;
          abort();
        }
        p += r;
        len -= (size_t)r;
      }
      close(fd);
      return;
    }
    p += n;
    len -= n;
  }
}

VT_HIDDEN uint32_t arc4random(void) {
  uint32_t v;
  vt_fill_random(&v, sizeof v);
  return v;
}

/* glibc 2.35. libgcc's unwinder finds the .eh_frame_hdr of the object holding a program counter
 * with it; when the call fails it gives up (there is no second lookup), so a wrong answer here
 * would turn every C++ exception into std::terminate. The layout is glibc's for x86_64 (neither
 * dlfo_eh_dbase nor dlfo_eh_count exists there). */
struct vt_dl_find_object {
  unsigned long long dlfo_flags;
  void* dlfo_map_start;
  void* dlfo_map_end;
  struct link_map* dlfo_link_map;
  void* dlfo_eh_frame;
  unsigned long long reserved[7];
};

typedef int (*vt_find_object_fn)(void*, struct vt_dl_find_object*);
static vt_find_object_fn vt_glibc_find_object;

/* Resolved once before any exception can be thrown: glibc's own lookup is lock-free and knows
 * objects loaded later, so a glibc that has it (2.35 and newer) is always asked first. */
__attribute__((constructor)) static void vt_resolve_find_object(void) {
  vt_glibc_find_object = (vt_find_object_fn)dlvsym(RTLD_DEFAULT, "_dl_find_object", "GLIBC_2.35");
}

struct vt_find_state {
  uintptr_t pc;
  struct vt_dl_find_object* out;
  int found;
};

static int vt_find_callback(struct dl_phdr_info* info, size_t size, void* data) {
  struct vt_find_state* st = data;
  (void)size;
  uintptr_t lo = UINTPTR_MAX, hi = 0;
  int contains = 0;
  const ElfW(Phdr)* eh = NULL;
  for (ElfW(Half) i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)* ph = &info->dlpi_phdr[i];
    if (ph->p_type == PT_LOAD) {
      uintptr_t start = info->dlpi_addr + ph->p_vaddr;
      uintptr_t end = start + ph->p_memsz;
      if (start < lo) lo = start;
      if (end > hi) hi = end;
      if (st->pc >= start && st->pc < end) contains = 1;
    } else if (ph->p_type == PT_GNU_EH_FRAME) {
      eh = ph;
    }
  }
  if (!contains) return 0;
  st->out->dlfo_flags = 0;
  st->out->dlfo_map_start = (void*)lo;
  st->out->dlfo_map_end = (void*)hi;
  st->out->dlfo_link_map = NULL;
  st->out->dlfo_eh_frame = eh ? (void*)(info->dlpi_addr + eh->p_vaddr) : NULL;
  st->found = 1;
  return 1;
}

VT_HIDDEN int _dl_find_object(void* pc, struct vt_dl_find_object* result) {
  if (vt_glibc_find_object) return vt_glibc_find_object(pc, result);
  struct vt_find_state st = {(uintptr_t)pc, result, 0};
  dl_iterate_phdr(vt_find_callback, &st);
  return st.found ? 0 : -1;
}
