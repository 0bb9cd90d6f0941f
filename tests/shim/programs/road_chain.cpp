// dlsym forwarding keeps the caller: RTLD_NEXT from a library means "after that library", and
// RTLD_DEFAULT from a RTLD_LOCAL library searches its local scope. No CUDA involved.
#include "road.h"

extern "C" int chain_foo();
extern "C" void* chain_next_foo();

int main(int argc, char** argv) {
  CHECK(argc == 2);
  void* next = chain_next_foo();
  CHECK(next != nullptr);
  CHECK_EQ(reinterpret_cast<int (*)()>(next)(), 2);             // B's chain_foo, not A's own
  for (int i = 0; i < 3; ++i) CHECK(chain_next_foo() == next);  // repeated lookups keep working
  void* c = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  CHECK(c != nullptr);
  auto lookup = reinterpret_cast<void* (*)()>(dlsym(c, "chain_default_lookup"));
  CHECK(lookup != nullptr);
  void* local = lookup();
  CHECK(local != nullptr);
  CHECK_EQ(reinterpret_cast<int (*)()>(local)(), 42);
  std::printf("chain ok\n");
  return 0;
}
