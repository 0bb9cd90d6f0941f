// Helpers shared by the road programs (tests/shim): checks that fail the program, queries of the
// fake driver, and "program.<name> N" lines that the harness compares with the shim's counts.
#pragma once

#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>

#define CHECK(cond)                                                                 \
  do {                                                                              \
    if (!(cond)) {                                                                  \
      std::fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
      std::exit(1);                                                                 \
    }                                                                               \
  } while (0)

#define CHECK_EQ(a, b)                                                                                            \
  do {                                                                                                            \
    long long a_ = (long long)(a), b_ = (long long)(b);                                                           \
    if (a_ != b_) {                                                                                               \
      std::fprintf(stderr, "%s:%d: CHECK failed: %s == %s (%lld vs %lld)\n", __FILE__, __LINE__, #a, #b, a_, b_); \
      std::exit(1);                                                                                               \
    }                                                                                                             \
  } while (0)

/// True when libvramtrace.so is loaded (its C API is visible).
inline bool under_shim() { return dlsym(RTLD_DEFAULT, "vramtrace_version") != nullptr; }

inline void* fake_driver() {
  static void* h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  return h;
}
/// Calls the fake driver received for an exact ABI name.
inline long fake_calls(const char* name) {
  auto fn = reinterpret_cast<long (*)(const char*)>(dlsym(fake_driver(), "fakecuda_calls"));
  return fn ? fn(name) : -1;
}
/// The fake driver's own function for an ABI name (never a wrapper).
inline void* fake_real(const char* name) {
  auto fn = reinterpret_cast<void* (*)(const char*)>(dlsym(fake_driver(), "fakecuda_real"));
  return fn ? fn(name) : nullptr;
}
inline long fake_live_allocations() {
  auto fn = reinterpret_cast<long (*)()>(dlsym(fake_driver(), "fakecuda_live_allocations"));
  return fn ? fn() : -1;
}

/// What the program did, printed at the end for the harness.
struct Tally {
  std::map<std::string, long> n;
  void add(const char* k, long v = 1) { n[k] += v; }
  void print() {
    for (auto& [k, v] : n) std::printf("program.%s %ld\n", k.c_str(), v);
    std::fflush(stdout);
  }
};
