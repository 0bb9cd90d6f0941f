// The library half of road_stacks: the innermost frame of the known chain lies in a shared
// object, so that the test sees a second module (its own load bias and build-id).
#include <cuda_runtime_api.h>

extern "C" __attribute__((visibility("default"), noinline)) int stack_lib_alloc(void** p, unsigned long bytes) {
  int r = cudaMalloc(p, bytes);
  __asm__ volatile("" ::: "memory");  // no tail call: this frame must stay on the stack
  return r;
}

// For the Python test: allocates with a Python exception pending, as a C extension that set an
// error and then allocates would; called through ctypes.PyDLL (the GIL held). The Python C API is
// found at run time, as the shim finds it. Returns 0 when the exception is still pending, exactly
// as it was, after the allocation (the stack walk saved and restored it), and clears it.
#include <dlfcn.h>

extern "C" __attribute__((visibility("default"), noinline)) int stack_lib_alloc_with_pending_error(
    void** p, unsigned long bytes) {
  using SetString = void (*)(void*, const char*);
  using Occurred = void* (*)();
  using Clear = void (*)();
  auto set = reinterpret_cast<SetString>(dlsym(RTLD_DEFAULT, "PyErr_SetString"));
  auto occurred = reinterpret_cast<Occurred>(dlsym(RTLD_DEFAULT, "PyErr_Occurred"));
  auto clear = reinterpret_cast<Clear>(dlsym(RTLD_DEFAULT, "PyErr_Clear"));
  auto type = static_cast<void**>(dlsym(RTLD_DEFAULT, "PyExc_RuntimeError"));
  if (!set || !occurred || !clear || !type) return 2;
  set(*type, "pending while allocating");
  const int r = cudaMalloc(p, bytes);
  void* still = occurred();
  clear();
  if (r != 0) return 3;
  return still == *type ? 0 : 1;
}
