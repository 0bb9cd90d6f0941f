// RTLD_NEXT chain, library A (docs/interposition.md, "dlsym rules"; HAMi #2903): defines
// chain_foo and looks up the *next* chain_foo, which must be library B's even when dlsym is
// interposed.
#include <dlfcn.h>
extern "C" __attribute__((visibility("default"))) int chain_foo() { return 1; }
extern "C" __attribute__((visibility("default"))) void* chain_next_foo() {
  void* r = dlsym(RTLD_NEXT, "chain_foo");
  __asm__ volatile("" ::: "memory");  // no tail call: the caller of dlsym must be this library
  return r;
}
