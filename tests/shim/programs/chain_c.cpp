// Loaded with dlopen(RTLD_LOCAL); depends on libchain_d. Its RTLD_DEFAULT lookup must search its
// own local scope (which holds libchain_d), which only works if dlsym keeps the caller.
#include <dlfcn.h>
extern "C" int chain_local_symbol();
extern "C" __attribute__((visibility("default"))) void* chain_default_lookup() {
  (void)&chain_local_symbol;
  void* r = dlsym(RTLD_DEFAULT, "chain_local_symbol");
  __asm__ volatile("" ::: "memory");  // no tail call: the caller of dlsym must be this library
  return r;
}
