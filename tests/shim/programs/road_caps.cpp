// Every memory figure a program can query, per device, printed as "program.<dev>.<api>.<field> N"
// lines for the harness (tests/shim/test_shim.cpp, "memory cap: ..."), which knows the cap it set.
// Runtime (fake shared cudart), driver (dlopen + dlsym of libcuda.so.1, as TF/XLA stubs do), and
// NVML (dlopen of libnvidia-ml.so.1, as pynvml and PyTorch do). Before querying, each device holds
// a live 30 MiB block and a freed 6 MiB block (cached in a 20 MiB segment under the shim).
// NULL output pointers: the return code is printed (the shim accepts NULL where HAMi-core #234
// says programs pass it; the real answer is kept where the real function refuses it).
#include <cuda.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

#include "road.h"

extern "C" cudaError_t cudaGetDeviceProperties_v2(cudaDeviceProp* prop, int device);  // CUDA 12's export

struct NvmlMem {
  unsigned long long total, free, used;
};
struct NvmlMem2 {
  unsigned int version;
  unsigned long long total, reserved, free, used;
};

int main() {
  const int devices = std::getenv("FAKECUDA_DEVICES") ? std::atoi(std::getenv("FAKECUDA_DEVICES")) : 2;
  Tally t;
  auto put = [&](int dev, const std::string& k, long long v) { t.add((std::to_string(dev) + "." + k).c_str(), v); };

  void* cu = dlopen("libcuda.so.1", RTLD_NOW);
  CHECK(cu != nullptr);
  auto mem_info = reinterpret_cast<CUresult (*)(size_t*, size_t*)>(dlsym(cu, "cuMemGetInfo_v2"));
  auto mem_info32 = reinterpret_cast<CUresult (*)(unsigned*, unsigned*)>(dlsym(cu, "cuMemGetInfo"));
  auto total_mem = reinterpret_cast<CUresult (*)(size_t*, CUdevice)>(dlsym(cu, "cuDeviceTotalMem_v2"));
  CHECK(mem_info && mem_info32 && total_mem);

  void* blocks[8] = {};
  for (int d = 0; d < devices; ++d) {
    CHECK_EQ(cudaSetDevice(d), cudaSuccess);
    void* freed = nullptr;
    CHECK_EQ(cudaMalloc(&blocks[d], 30 << 20), cudaSuccess);
    CHECK_EQ(cudaMalloc(&freed, 6 << 20), cudaSuccess);
    CHECK_EQ(cudaFree(freed), cudaSuccess);

    size_t f = 0, tot = 0;
    CHECK_EQ(cudaMemGetInfo(&f, &tot), cudaSuccess);
    put(d, "rt.free", f);
    put(d, "rt.total", tot);
    f = tot = 0;
    CHECK_EQ(mem_info(&f, &tot), CUDA_SUCCESS);
    put(d, "cu.free", f);
    put(d, "cu.total", tot);
    unsigned f32 = 0, t32 = 0;
    CHECK_EQ(mem_info32(&f32, &t32), CUDA_SUCCESS);
    put(d, "cu32.free", f32);
    put(d, "cu32.total", t32);
    size_t total = 0;
    CHECK_EQ(total_mem(&total, d), CUDA_SUCCESS);
    put(d, "totalmem", total);
    cudaDeviceProp prop{};
    CHECK_EQ(cudaGetDeviceProperties(&prop, d), cudaSuccess);
    put(d, "props", prop.totalGlobalMem);
    std::memset(&prop, 0, sizeof prop);
    CHECK_EQ(cudaGetDeviceProperties_v2(&prop, d), cudaSuccess);
    put(d, "props_v2", prop.totalGlobalMem);

    // NULL output pointers.
    tot = 0;
    put(d, "null.rt.rc", cudaMemGetInfo(nullptr, &tot));
    put(d, "null.rt.total", tot);
    f = 0;
    put(d, "null.cu.rc", mem_info(&f, nullptr));
    put(d, "null.cu.free", f);
    put(d, "null.totalmem.rc", total_mem(nullptr, d));
    put(d, "null.props.rc", cudaGetDeviceProperties(nullptr, d));
  }

  void* nv = dlopen("libnvidia-ml.so.1", RTLD_NOW);
  CHECK(nv != nullptr);
  using Dev = void*;
  auto init = reinterpret_cast<int (*)()>(dlsym(nv, "nvmlInit_v2"));
  auto handle = reinterpret_cast<int (*)(unsigned, Dev*)>(dlsym(nv, "nvmlDeviceGetHandleByIndex_v2"));
  auto info = reinterpret_cast<int (*)(Dev, NvmlMem*)>(dlsym(nv, "nvmlDeviceGetMemoryInfo"));
  auto info2 = reinterpret_cast<int (*)(Dev, NvmlMem2*)>(dlsym(nv, "nvmlDeviceGetMemoryInfo_v2"));
  CHECK(init && handle && info && info2);
  // Under the shim the two memory queries must be its exports (our dlsym substituted them).
  t.add("nvml.hooked", dlsym(RTLD_DEFAULT, "vramtrace_version") != nullptr &&
                           reinterpret_cast<void*>(info) == dlsym(RTLD_DEFAULT, "nvmlDeviceGetMemoryInfo"));
  CHECK_EQ(init(), 0);
  for (int i = 0; i < devices; ++i) {
    Dev h = nullptr;
    CHECK_EQ(handle(static_cast<unsigned>(i), &h), 0);
    NvmlMem m{};
    CHECK_EQ(info(h, &m), 0);
    std::string k = "nvml" + std::to_string(i);
    t.add((k + ".total").c_str(), m.total);
    t.add((k + ".free").c_str(), m.free);
    t.add((k + ".used").c_str(), m.used);
    NvmlMem2 m2{};
    m2.version = static_cast<unsigned>(sizeof m2) | (2u << 24);
    CHECK_EQ(info2(h, &m2), 0);
    t.add((k + ".v2.total").c_str(), m2.total);
    t.add((k + ".v2.free").c_str(), m2.free);
    t.add((k + ".v2.used").c_str(), m2.used);
    t.add((k + ".v2.reserved").c_str(), m2.reserved);
    t.add((k + ".null.rc").c_str(), info(h, nullptr));
  }
  for (int d = 0; d < devices; ++d) {
    CHECK_EQ(cudaSetDevice(d), cudaSuccess);
    CHECK_EQ(cudaFree(blocks[d]), cudaSuccess);
  }
  t.print();
  return 0;
}
