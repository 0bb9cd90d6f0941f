// A training loop in miniature for the ctest example of docs/ci.md: per step, 20 activations of
// 5 MiB allocated with cudaMalloc and freed in reverse order, a mark per step through
// vramtrace_mark (looked up at run time, absent without the shim). Runs on the fake driver of
// tests/shim (or a real GPU).
//
//   train_steps [--steps N] [--leak BYTES]     --leak keeps BYTES per step, never freed
#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

extern "C" int cudaMalloc(void** ptr, std::size_t size);
extern "C" int cudaFree(void* ptr);

int main(int argc, char** argv) {
  int steps = 20;
  std::size_t leak = 0;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--steps"))
      steps = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--leak"))
      leak = std::strtoull(argv[i + 1], nullptr, 10);
  }
  using MarkFn = void (*)(const char*);
  auto mark = reinterpret_cast<MarkFn>(dlsym(RTLD_DEFAULT, "vramtrace_mark"));
  void* params = nullptr;
  if (cudaMalloc(&params, 64u << 20) != 0) return std::fprintf(stderr, "cudaMalloc failed\n"), 1;
  std::vector<void*> kept;
  for (int s = 0; s < steps; ++s) {
    std::string name = "step " + std::to_string(s);
    if (mark) mark(name.c_str());
    std::vector<void*> acts(20);
    for (auto& a : acts)
      if (cudaMalloc(&a, 5u << 20) != 0) return std::fprintf(stderr, "cudaMalloc failed\n"), 1;
    if (leak) {
      void* p = nullptr;
      if (cudaMalloc(&p, leak) != 0) return std::fprintf(stderr, "cudaMalloc failed\n"), 1;
      kept.push_back(p);
    }
    for (auto it = acts.rbegin(); it != acts.rend(); ++it) cudaFree(*it);
  }
  if (mark) mark("done");
  for (void* p : kept) cudaFree(p);
  cudaFree(params);
  return 0;
}
