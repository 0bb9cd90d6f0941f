// A fake libnvidia-ml.so.1 for GPU-less tests of the shim's NVML hooks (nvml_hooks.cpp).
//
// Devices are those of the fake driver (FAKECUDA_DEVICES, FAKECUDA_TOTAL_MB), numbered in
// reverse: NVML index i is CUDA ordinal (count - 1 - i), as NVML's PCI order can differ from
// CUDA's, so that a shim mapping by index instead of UUID is caught. UUIDs match the fake driver's
// cuDeviceGetUuid_v2 (fa ce 00 <ordinal> 00...). Memory: total = FAKECUDA_TOTAL_MB MiB, 8 MiB
// reserved by the "driver", used = the fake driver's used bytes of that device (0 if libcuda is
// not loaded); v1 counts reserved as used (as real NVML), v2 reports it apart. v1 calls v2 through
// its export (see there).
#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#define NVML_EXPORT extern "C" __attribute__((visibility("default")))

typedef int nvmlReturn_t;
struct FakeDevice {
  int ordinal;
};
typedef FakeDevice* nvmlDevice_t;
struct nvmlMemory_t {
  unsigned long long total, free, used;
};
struct nvmlMemory_v2_t {
  unsigned int version;
  unsigned long long total, reserved, free, used;
};

namespace {
constexpr nvmlReturn_t kSuccess = 0, kUninitialized = 1, kInvalidArgument = 2, kInsufficientSize = 7;
constexpr unsigned long long kReserved = 8ull << 20;
FakeDevice g_devices[8];
bool g_init = false;

int device_count() {
  const char* v = getenv("FAKECUDA_DEVICES");
  int n = v ? atoi(v) : 2;
  return n < 0 ? 0 : (n > 8 ? 8 : n);
}
unsigned long long total_bytes() {
  const char* v = getenv("FAKECUDA_TOTAL_MB");
  return (v ? strtoull(v, nullptr, 10) : 1024ull) << 20;
}
unsigned long long driver_used(int ordinal) {
  void* h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  if (!h) return 0;
  auto fn = reinterpret_cast<size_t (*)(int)>(dlsym(h, "fakecuda_used_bytes"));
  unsigned long long used = fn ? fn(ordinal) : 0;
  dlclose(h);
  return used;
}
bool valid(nvmlDevice_t d) { return d >= g_devices && d < g_devices + device_count(); }
}  // namespace

NVML_EXPORT nvmlReturn_t nvmlInit_v2() {
  for (int i = 0; i < device_count(); ++i) g_devices[i].ordinal = device_count() - 1 - i;
  g_init = true;
  return kSuccess;
}
NVML_EXPORT nvmlReturn_t nvmlShutdown() {
  g_init = false;
  return kSuccess;
}
NVML_EXPORT nvmlReturn_t nvmlDeviceGetCount_v2(unsigned* n) {
  if (!g_init) return kUninitialized;
  if (!n) return kInvalidArgument;
  *n = static_cast<unsigned>(device_count());
  return kSuccess;
}
NVML_EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned i, nvmlDevice_t* d) {
  if (!g_init) return kUninitialized;
  if (!d || i >= static_cast<unsigned>(device_count())) return kInvalidArgument;
  *d = &g_devices[i];
  return kSuccess;
}
NVML_EXPORT nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t d, unsigned* i) {
  if (!g_init) return kUninitialized;
  if (!valid(d) || !i) return kInvalidArgument;
  *i = static_cast<unsigned>(d - g_devices);
  return kSuccess;
}
NVML_EXPORT nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t d, char* uuid, unsigned len) {
  if (!g_init) return kUninitialized;
  if (!valid(d) || !uuid) return kInvalidArgument;
  if (len < 41) return kInsufficientSize;
  snprintf(uuid, len, "GPU-face00%02x-0000-0000-0000-000000000000", d->ordinal);
  return kSuccess;
}
NVML_EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t d, nvmlMemory_v2_t* m) {
  if (!g_init) return kUninitialized;
  if (!valid(d) || !m) return kInvalidArgument;
  m->total = total_bytes();
  m->reserved = kReserved;
  m->free = m->total - kReserved - driver_used(d->ordinal);
  m->used = m->total - m->reserved - m->free;
  return kSuccess;
}
// v1 is implemented with the exported v2, called through the PLT (no -Bsymbolic), so that under
// the shim the inner call reaches the shim's v2 hook: the shim must not cap twice.
NVML_EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t d, nvmlMemory_t* m) {
  if (!m) return kInvalidArgument;
  nvmlMemory_v2_t m2{};
  m2.version = static_cast<unsigned>(sizeof m2) | (2u << 24);
  nvmlReturn_t r = nvmlDeviceGetMemoryInfo_v2(d, &m2);
  if (r != kSuccess) return r;
  m->total = m2.total;
  m->free = m2.free;
  m->used = m2.total - m2.free;
  return kSuccess;
}
