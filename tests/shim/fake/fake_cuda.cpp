// A fake libcuda.so.1 for GPU-less tests of libvramtrace.so.
//
// Host memory behind fake device addresses, contexts whose handles and addresses are reused after
// a reset (the trap of docs/interposition.md, "Context reset and destruction"), a
// cuGetProcAddress(_v2) that picks the ABI variant by cudaVersion and flags like the real
// driver, call counters and fault injection.
//
// Environment:
//   FAKECUDA_TOTAL_MB     device memory per device (default 1024)
//   FAKECUDA_DEVICES      number of devices (default 2)
//   FAKECUDA_FAIL_ALLOC   fail the Nth cuMemAlloc_v2 with CUDA_ERROR_OUT_OF_MEMORY (1-based)
//   FAKECUDA_FAIL_ALLOC_EVERY  fail every Nth device allocation call (cuMemAlloc_v2,
//                         cuMemAllocAsync(_ptsz), cuMemAllocFromPoolAsync(_ptsz), cuMemCreate; one
//                         counter for all, all threads) with CUDA_ERROR_OUT_OF_MEMORY
//   FAKECUDA_FAIL_SYNC_EVERY   fail every Nth synchronisation call (cuCtxSynchronize(_v2),
//                         cuStreamSynchronize, cuEventSynchronize, cuEventQuery; one counter) with
//                         CUDA_ERROR_LAUNCH_FAILED. Transient here: the next call succeeds (a real
//                         launch failure is sticky; what is tested is that the error reaches the
//                         program unchanged and nothing else breaks)
//   FAKECUDA_DELAY_US     every call sleeps this many microseconds before taking the driver lock
//                         (a slow driver: a loaded GPU, MPS, a remote or virtualised device)
//   FAKECUDA_REUSE_ADDRESSES  when 1, a device allocation (cuMemAlloc_v2, cuMemAllocAsync) takes the
//                         most recently freed address of its rounded size before new address space,
//                         as the real driver hands freed addresses out again at once
//   FAKECUDA_FREE_RETURN_US   a successful cuMemFree_v2/cuMemFreeAsync sleeps this many
//                         microseconds after the memory is free, outside the driver lock (the real
//                         cuMemFree synchronises first): another thread can meanwhile allocate it
//   FAKECUDA_EVENTS_PENDING  the first N cuEventQuery calls answer CUDA_ERROR_NOT_READY (work
//                         still running on the GPU), later ones CUDA_SUCCESS
//   FAKECUDA_CONTEXT_MB   device memory each live context takes (default 0): counted as used from
//                         its creation (cuCtxCreate_v2, a primary context's first retain) to its
//                         destruction, as the driver's own allocations are, never through an
//                         allocation call
//
// Device queries: cuDeviceTotalMem_v2 (= FAKECUDA_TOTAL_MB), cuDeviceGetUuid_v2 (fa ce 00 <dev>
// 00..., matched by the fake NVML), cuDeviceGetName, both cuMemGetInfo ABIs.
//
// Test-only exports (not CUDA): fakecuda_calls(name), fakecuda_used_bytes(dev),
// fakecuda_live_allocations(), fakecuda_real(name), fakecuda_injected_faults(kind) with kind
// "alloc" or "sync", fakecuda_last_work() and fakecuda_ordered_after(work, stream) (the order model
// below).
//
// The order model: what the GPU would order, for tests of reuse safety without a GPU. Each piece
// of work (cuLaunchKernel, cuLaunchKernelEx, cuMemsetD8Async) gets an id; each stream keeps the ids
// its next operation is ordered after: its own earlier work, what it waited for
// (cuStreamWaitEvent of an event: the ids before that event's latest cuEventRecord), and the
// legacy default stream's implicit synchronisation (an operation on the legacy stream is ordered
// after earlier work of every blocking stream, one on a blocking stream after earlier work of the
// legacy stream; streams created with CU_STREAM_NON_BLOCKING take no part; a per-thread default
// stream is blocking). Finished work: everything at cuCtxSynchronize, a stream's at
// cuStreamSynchronize, an event's at cuEventSynchronize or a cuEventQuery that answers success.
// One context's order (the tests that read it use one).
#define __CUDA_API_VERSION_INTERNAL 1
#include <cuda.h>
#include <dlfcn.h>

#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#define FAKE_EXPORT extern "C" __attribute__((visibility("default")))

namespace {

constexpr int kMaxDevices = 8;
constexpr CUdeviceptr kBase = 0x7f0000000000ull;
constexpr CUdeviceptr kDeviceSpan = 1ull << 36;  // 64 GiB of fake address space per device

enum class Kind { device, async, managed, pitch, vmm_reserved };

struct Allocation {
  size_t size = 0;
  char* host = nullptr;  // backing store
  CUcontext ctx = nullptr;
  Kind kind = Kind::device;
  unsigned long long buffer_id = 0;  // CU_POINTER_ATTRIBUTE_BUFFER_ID: a counter from 1
};

struct Context {
  int device = 0;
  bool primary = false;
  bool alive = false;
  int retains = 0;
  CUdeviceptr next = 0;                      // bump pointer; restarts after a reset so addresses are reused
  std::multimap<size_t, CUdeviceptr> freed;  // FAKECUDA_REUSE_ADDRESSES: by rounded size, oldest first
};

struct State {
  std::mutex mu;
  int devices = 2;
  size_t total_bytes = 1024ull << 20;
  size_t used[kMaxDevices] = {};
  Context primary[kMaxDevices];
  std::vector<Context*> created;
  std::map<CUdeviceptr, Allocation> allocs;
  std::set<void*> host_allocs;
  struct Handle {
    size_t size = 0;
    int device = 0;
    Context* ctx = nullptr;
  };
  std::map<CUmemGenericAllocationHandle, Handle> handles;  // cuMemCreate
  std::set<CUstream> capturing;
  std::map<std::string, long> calls;
  long alloc_attempts = 0;
  long fail_alloc_at = 0;
  long fail_alloc_every = 0;  // FAKECUDA_FAIL_ALLOC_EVERY
  long device_alloc_calls = 0;
  long injected_alloc_faults = 0;
  long fail_sync_every = 0;  // FAKECUDA_FAIL_SYNC_EVERY
  long sync_calls = 0;
  long injected_sync_faults = 0;
  long delay_us = 0;             // FAKECUDA_DELAY_US
  bool reuse_addresses = false;  // FAKECUDA_REUSE_ADDRESSES
  long free_return_us = 0;       // FAKECUDA_FREE_RETURN_US
  size_t context_bytes = 0;      // FAKECUDA_CONTEXT_MB
  long events_pending = 0;       // FAKECUDA_EVENTS_PENDING
  bool initialized = false;
  bool finished = false;  // destructor ran
  unsigned long long next_handle = 0x1000;
  // The order model (above): stream key -> ids its next operation is ordered after; event ->
  // ids before its latest record; finished ids; non-blocking streams; the last id handed out.
  std::map<std::uintptr_t, std::set<long>> prior;
  std::map<CUevent, std::set<long>> recorded;
  std::set<long> finished_work;
  std::set<std::uintptr_t> nonblocking;
  long last_work = 0;
};

State& st() {
  static State* s = [] {
    auto* s = new State;
    if (const char* v = getenv("FAKECUDA_TOTAL_MB")) s->total_bytes = strtoull(v, nullptr, 10) << 20;
    if (const char* v = getenv("FAKECUDA_DEVICES")) s->devices = atoi(v);
    if (const char* v = getenv("FAKECUDA_FAIL_ALLOC")) s->fail_alloc_at = atol(v);
    if (const char* v = getenv("FAKECUDA_FAIL_ALLOC_EVERY")) s->fail_alloc_every = atol(v);
    if (const char* v = getenv("FAKECUDA_FAIL_SYNC_EVERY")) s->fail_sync_every = atol(v);
    if (const char* v = getenv("FAKECUDA_DELAY_US")) s->delay_us = atol(v);
    if (const char* v = getenv("FAKECUDA_REUSE_ADDRESSES")) s->reuse_addresses = atoi(v) == 1;
    if (const char* v = getenv("FAKECUDA_FREE_RETURN_US")) s->free_return_us = atol(v);
    if (const char* v = getenv("FAKECUDA_CONTEXT_MB")) s->context_bytes = strtoull(v, nullptr, 10) << 20;
    if (const char* v = getenv("FAKECUDA_EVENTS_PENDING")) s->events_pending = atol(v);
    for (int d = 0; d < kMaxDevices; ++d) {
      s->primary[d].device = d;
      s->primary[d].primary = true;
      s->primary[d].next = kBase + d * kDeviceSpan;
    }
    return s;
  }();
  return *s;
}

// ---------------------------------------------------------------- the order model (see the top)
// The runtime may name the legacy stream by a handle of its own (the real cudart does for some
// calls); the fake runtime passes this one for stream 0 in cudaMemsetAsync, and the stream id
// says what it is.
constexpr std::uintptr_t kLegacyAlias = 0x7000;
constexpr std::uintptr_t kLegacyKey = 1;

std::uintptr_t order_key(CUstream s) {
  const auto v = reinterpret_cast<std::uintptr_t>(s);
  if (v == 0 || s == CU_STREAM_LEGACY || v == kLegacyAlias) return kLegacyKey;
  if (s == CU_STREAM_PER_THREAD) return (static_cast<std::uintptr_t>(gettid()) << 4) | 2;
  return v;
}
bool blocking_key(std::uintptr_t k) { return k != kLegacyKey && !st().nonblocking.count(k); }
// The ids an operation on stream `k` would be ordered after, with the legacy stream's implicit
// synchronisation applied. Under the driver lock.
std::set<long> ordered_before(std::uintptr_t k) {
  State& s = st();
  std::set<long> out = s.prior[k];
  if (k == kLegacyKey) {
    for (auto& [other, ids] : s.prior)
      if (blocking_key(other)) out.insert(ids.begin(), ids.end());
  } else if (blocking_key(k)) {
    const std::set<long>& legacy = s.prior[kLegacyKey];
    out.insert(legacy.begin(), legacy.end());
  }
  return out;
}
// A piece of work on `stream`. Under the driver lock.
void order_work(CUstream stream) {
  State& s = st();
  const std::uintptr_t k = order_key(stream);
  std::set<long> before = ordered_before(k);
  before.insert(++s.last_work);
  s.prior[k] = std::move(before);
}
void order_finish(const std::set<long>& ids) { st().finished_work.insert(ids.begin(), ids.end()); }
void order_finish_all() {
  for (long i = 1; i <= st().last_work; ++i) st().finished_work.insert(i);
}

thread_local CUcontext tl_current = nullptr;

// One counter per exported function, found once (function-local static) and bumped under the
// driver lock, so that counting costs little in benchmarks.
long* counter_slot(const char* name) {
  std::lock_guard<std::mutex> lock(st().mu);
  return &st().calls[name];  // std::map nodes never move
}
void count(const char* name, long* slot) {
  State& s = st();
  if (s.finished) fprintf(stderr, "FAKECUDA: call after exit began: %s\n", name);
  ++*slot;
}
#define COUNT()                                \
  static long* slot_ = counter_slot(__func__); \
  slow_down();                                 \
  std::lock_guard<std::mutex> lock_(st().mu);  \
  count(__func__, slot_)

// FAKECUDA_DELAY_US: outside the lock, so that slow calls of several threads overlap as on a GPU.
void slow_down() {
  if (long us = st().delay_us; us > 0) usleep(static_cast<useconds_t>(us));
}

// Fault injection, called under the driver lock. True when this call must fail.
bool inject_alloc_fault() {
  State& s = st();
  if (s.fail_alloc_every <= 0 || ++s.device_alloc_calls % s.fail_alloc_every != 0) return false;
  ++s.injected_alloc_faults;
  return true;
}
bool inject_sync_fault() {
  State& s = st();
  if (s.fail_sync_every <= 0 || ++s.sync_calls % s.fail_sync_every != 0) return false;
  ++s.injected_sync_faults;
  return true;
}

Context* ctx_of(CUcontext c) { return reinterpret_cast<Context*>(c); }

CUresult current(Context** out) {
  if (!tl_current) return CUDA_ERROR_INVALID_CONTEXT;
  Context* c = ctx_of(tl_current);
  if (!c->alive) return CUDA_ERROR_CONTEXT_IS_DESTROYED;
  *out = c;
  return CUDA_SUCCESS;
}

size_t round_up(size_t v, size_t a) { return (v + a - 1) / a * a; }

CUresult do_alloc(CUdeviceptr* out, size_t bytes, Kind kind) {
  State& s = st();
  if (!out || bytes == 0) return CUDA_ERROR_INVALID_VALUE;
  Context* c = nullptr;
  if (CUresult r = current(&c)) return r;
  size_t charged = round_up(bytes, 512);
  if (s.used[c->device] + charged > s.total_bytes) return CUDA_ERROR_OUT_OF_MEMORY;
  Allocation a;
  a.size = bytes;
  a.host = static_cast<char*>(calloc(1, charged));
  a.ctx = reinterpret_cast<CUcontext>(c);
  a.kind = kind;
  static unsigned long long next_buffer_id = 1;
  a.buffer_id = next_buffer_id++;
  CUdeviceptr p = c->next;
  const size_t span = round_up(bytes, 4096);
  if (auto [lo, hi] = c->freed.equal_range(span); s.reuse_addresses && lo != hi) {
    auto last = std::prev(hi);  // the most recently freed
    p = last->second;
    c->freed.erase(last);
  } else {
    c->next += span;
  }
  s.used[c->device] += charged;
  s.allocs[p] = a;
  *out = p;
  return CUDA_SUCCESS;
}

CUresult do_free(CUdeviceptr p, bool async_only) {
  State& s = st();
  auto it = s.allocs.find(p);
  if (it == s.allocs.end() || it->second.kind == Kind::vmm_reserved) return CUDA_ERROR_INVALID_VALUE;
  Context* c = ctx_of(it->second.ctx);
  s.used[c->device] -= round_up(it->second.size, 512);
  if (s.reuse_addresses && (it->second.kind == Kind::device || it->second.kind == Kind::async))
    c->freed.emplace(round_up(it->second.size, 4096), p);
  free(it->second.host);
  s.allocs.erase(it);
  return CUDA_SUCCESS;
}

// FAKECUDA_FREE_RETURN_US: called after the driver lock is released.
CUresult slow_return(CUresult r) {
  if (long us = st().free_return_us; us > 0 && r == CUDA_SUCCESS) usleep(static_cast<useconds_t>(us));
  return r;
}

// Destroys every allocation of a context except stream-ordered ones (documented for
// cudaDeviceReset) and rewinds its bump pointer so that the same addresses come back.
void destroy_context(Context* c) {
  State& s = st();
  for (auto it = s.allocs.begin(); it != s.allocs.end();) {
    if (ctx_of(it->second.ctx) == c && it->second.kind != Kind::async) {
      if (it->second.kind != Kind::vmm_reserved) s.used[c->device] -= round_up(it->second.size, 512);
      free(it->second.host);
      it = s.allocs.erase(it);
    } else {
      ++it;
    }
  }
  for (auto it = s.handles.begin(); it != s.handles.end();) {  // physical memory dies too
    if (it->second.ctx == c) {
      s.used[it->second.device] -= it->second.size;
      it = s.handles.erase(it);
    } else {
      ++it;
    }
  }
  if (c->alive) s.used[c->device] -= s.context_bytes;
  c->alive = false;
  c->retains = 0;
  c->freed.clear();
  if (c->primary) c->next = kBase + c->device * kDeviceSpan;
}

char* host_of(CUdeviceptr p, size_t bytes) {
  State& s = st();
  auto it = s.allocs.upper_bound(p);
  if (it == s.allocs.begin()) return nullptr;
  --it;
  if (p + bytes > it->first + it->second.size || !it->second.host) return nullptr;
  return it->second.host + (p - it->first);
}

bool any_global_capture() { return !st().capturing.empty(); }

__attribute__((destructor)) void fake_fini() { st().finished = true; }

}  // namespace

// ---------------------------------------------------------------- init, devices, contexts
FAKE_EXPORT CUresult cuInit(unsigned int flags) {
  {
    COUNT();
    st().initialized = true;
  }
  // Like the WSL2 driver (research 6, #11): look up one of our own symbols through our own handle
  // and call it. Under the shim this returns the shim's wrapper, which must not recurse.
  void* self = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  if (self) {
    auto fn = reinterpret_cast<CUresult (*)(size_t*, size_t*)>(dlsym(self, "cuMemGetInfo_v2"));
    dlclose(self);
    if (!fn) return CUDA_ERROR_NOT_INITIALIZED;
    size_t f = 0, t = 0;
    fn(&f, &t);  // no current context yet: returns an error, must not crash or loop
  }
  return CUDA_SUCCESS;
}
FAKE_EXPORT CUresult cuDriverGetVersion(int* v) {
  COUNT();
  *v = 13000;
  return CUDA_SUCCESS;
}
FAKE_EXPORT CUresult cuDeviceGetCount(int* n) {
  COUNT();
  *n = st().devices;
  return CUDA_SUCCESS;
}
FAKE_EXPORT CUresult cuDeviceGet(CUdevice* d, int ordinal) {
  COUNT();
  if (ordinal < 0 || ordinal >= st().devices) return CUDA_ERROR_INVALID_DEVICE;
  *d = ordinal;
  return CUDA_SUCCESS;
}
FAKE_EXPORT CUresult cuDevicePrimaryCtxRetain(CUcontext* pctx, CUdevice dev) {
  COUNT();
  if (dev < 0 || dev >= st().devices) return CUDA_ERROR_INVALID_DEVICE;
  Context& c = st().primary[dev];
  if (!c.alive) st().used[dev] += st().context_bytes;
  c.alive = true;
  c.retains++;
  *pctx = reinterpret_cast<CUcontext>(&c);
  return CUDA_SUCCESS;
}
static CUresult primary_release(CUdevice dev) {
  if (dev < 0 || dev >= st().devices) return CUDA_ERROR_INVALID_DEVICE;
  Context& c = st().primary[dev];
  if (c.retains <= 0) return CUDA_ERROR_INVALID_CONTEXT;
  if (--c.retains == 0) destroy_context(&c);
  return CUDA_SUCCESS;
}
FAKE_EXPORT CUresult cuDevicePrimaryCtxRelease(CUdevice dev) {
  COUNT();
  return primary_release(dev);
}
FAKE_EXPORT CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev) {
  COUNT();
  return primary_release(dev);
}
static CUresult primary_reset(CUdevice dev) {
  if (dev < 0 || dev >= st().devices) return CUDA_ERROR_INVALID_DEVICE;
  Context& c = st().primary[dev];
  destroy_context(&c);
  return CUDA_SUCCESS;
}
FAKE_EXPORT CUresult cuDevicePrimaryCtxReset(CUdevice dev) {
  COUNT();
  return primary_reset(dev);
}
FAKE_EXPORT CUresult cuDevicePrimaryCtxReset_v2(CUdevice dev) {
  COUNT();
  return primary_reset(dev);
}
FAKE_EXPORT CUresult cuDevicePrimaryCtxGetState(CUdevice dev, unsigned int* flags, int* active) {
  COUNT();
  if (dev < 0 || dev >= st().devices) return CUDA_ERROR_INVALID_DEVICE;
  if (flags) *flags = 0;
  if (active) *active = st().primary[dev].alive ? 1 : 0;
  return CUDA_SUCCESS;
}
FAKE_EXPORT CUresult cuCtxCreate_v2(CUcontext* pctx, unsigned int flags, CUdevice dev) {
  COUNT();
  if (dev < 0 || dev >= st().devices) return CUDA_ERROR_INVALID_DEVICE;
  auto* c = new Context;
  c->device = dev;
  c->alive = true;
  st().used[dev] += st().context_bytes;
  c->next = kBase + dev * kDeviceSpan + (1ull << 35) + st().created.size() * (1ull << 32);
  st().created.push_back(c);
  *pctx = reinterpret_cast<CUcontext>(c);
  tl_current = *pctx;
  return CUDA_SUCCESS;
}
FAKE_EXPORT CUresult cuCtxDestroy_v2(CUcontext ctx) {
  COUNT();
  if (!ctx || !ctx_of(ctx)->alive) return CUDA_ERROR_INVALID_CONTEXT;
  destroy_context(ctx_of(ctx));
  if (tl_current == ctx) tl_current = nullptr;
  return CUDA_SUCCESS;
}
FAKE_EXPORT CUresult cuCtxSetCurrent(CUcontext ctx) {
  COUNT();
  tl_current = ctx;
  return CUDA_SUCCESS;
}
FAKE_EXPORT CUresult cuCtxGetCurrent(CUcontext* ctx) {
  COUNT();
  *ctx = tl_current;
  return CUDA_SUCCESS;
}
FAKE_EXPORT CUresult cuCtxGetDevice(CUdevice* dev) {
  COUNT();
  Context* c = nullptr;
  if (CUresult r = current(&c)) return r;
  *dev = c->device;
  return CUDA_SUCCESS;
}
FAKE_EXPORT CUresult cuCtxSynchronize() {
  COUNT();
  Context* c = nullptr;
  if (CUresult r = current(&c)) return r;
  if (inject_sync_fault()) return CUDA_ERROR_LAUNCH_FAILED;
  order_finish_all();
  return CUDA_SUCCESS;
}
FAKE_EXPORT CUresult cuCtxSynchronize_v2(CUcontext ctx) {
  COUNT();
  if (!ctx) return CUDA_ERROR_INVALID_CONTEXT;
  if (inject_sync_fault()) return CUDA_ERROR_LAUNCH_FAILED;
  order_finish_all();
  return CUDA_SUCCESS;
}

// ---------------------------------------------------------------- plain device memory
FAKE_EXPORT CUresult cuMemAlloc_v2(CUdeviceptr* p, size_t bytes) {
  COUNT();
  State& s = st();
  if (any_global_capture()) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  if (++s.alloc_attempts == s.fail_alloc_at) return CUDA_ERROR_OUT_OF_MEMORY;
  if (inject_alloc_fault()) return CUDA_ERROR_OUT_OF_MEMORY;
  return do_alloc(p, bytes, Kind::device);
}
// The 32-bit ABI: a distinct function so that a wrong-ABI substitution is detectable.
FAKE_EXPORT CUresult cuMemAlloc(unsigned int* p, unsigned int bytes) {
  COUNT();
  return CUDA_ERROR_NOT_SUPPORTED;
}
FAKE_EXPORT CUresult cuMemFree_v2(CUdeviceptr p) {
  CUresult r;
  {
    COUNT();
    r = any_global_capture() ? CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED : do_free(p, false);
  }
  return slow_return(r);
}
FAKE_EXPORT CUresult cuMemFree(unsigned int p) {
  COUNT();
  return CUDA_ERROR_NOT_SUPPORTED;
}
FAKE_EXPORT CUresult cuMemGetInfo_v2(size_t* free_b, size_t* total_b) {
  COUNT();
  Context* c = nullptr;
  if (CUresult r = current(&c)) return r;
  if (!free_b || !total_b) return CUDA_ERROR_INVALID_VALUE;
  *total_b = st().total_bytes;
  *free_b = st().total_bytes - st().used[c->device];
  return CUDA_SUCCESS;
}
// The 32-bit ABI, saturated at 4 GiB - 1 (the fake's devices are small enough not to need it).
FAKE_EXPORT CUresult cuMemGetInfo(unsigned int* f, unsigned int* t) {
  COUNT();
  Context* c = nullptr;
  if (CUresult r = current(&c)) return r;
  if (!f || !t) return CUDA_ERROR_INVALID_VALUE;
  size_t total = st().total_bytes, free_b = total - st().used[c->device];
  *t = static_cast<unsigned int>(total > 0xffffffffull ? 0xffffffffull : total);
  *f = static_cast<unsigned int>(free_b > 0xffffffffull ? 0xffffffffull : free_b);
  return CUDA_SUCCESS;
}
FAKE_EXPORT CUresult cuDeviceTotalMem_v2(size_t* bytes, CUdevice dev) {
  COUNT();
  if (!bytes) return CUDA_ERROR_INVALID_VALUE;
  if (dev < 0 || dev >= st().devices) return CUDA_ERROR_INVALID_DEVICE;
  *bytes = st().total_bytes;
  return CUDA_SUCCESS;
}
// UUID of device d: fa ce 00 d 00 ... (tests/shim/fake/fake_nvml.cpp prints the same).
FAKE_EXPORT CUresult cuDeviceGetUuid_v2(CUuuid* uuid, CUdevice dev) {
  COUNT();
  if (!uuid) return CUDA_ERROR_INVALID_VALUE;
  if (dev < 0 || dev >= st().devices) return CUDA_ERROR_INVALID_DEVICE;
  memset(uuid->bytes, 0, sizeof uuid->bytes);
  uuid->bytes[0] = static_cast<char>(0xfa);
  uuid->bytes[1] = static_cast<char>(0xce);
  uuid->bytes[3] = static_cast<char>(dev);
  return CUDA_SUCCESS;
}
FAKE_EXPORT CUresult cuDeviceGetName(char* name, int len, CUdevice dev) {
  COUNT();
  if (!name || len <= 0) return CUDA_ERROR_INVALID_VALUE;
  snprintf(name, static_cast<size_t>(len), "Fake CUDA device %d", dev);
  return CUDA_SUCCESS;
}
FAKE_EXPORT CUresult cuMemAllocPitch_v2(CUdeviceptr* p, size_t* pitch, size_t width, size_t height, unsigned int elem) {
  COUNT();
  if (!pitch) return CUDA_ERROR_INVALID_VALUE;
  *pitch = round_up(width, 512);
  return do_alloc(p, *pitch * height, Kind::pitch);
}
FAKE_EXPORT CUresult cuMemAllocManaged(CUdeviceptr* p, size_t bytes, unsigned int flags) {
  COUNT();
  return do_alloc(p, bytes, Kind::managed);
}
FAKE_EXPORT CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void* src, size_t n) {
  COUNT();
  char* h = host_of(dst, n);
  if (!h) return CUDA_ERROR_INVALID_VALUE;
  memcpy(h, src, n);
  return CUDA_SUCCESS;
}
FAKE_EXPORT CUresult cuMemcpyDtoH_v2(void* dst, CUdeviceptr src, size_t n) {
  COUNT();
  char* h = host_of(src, n);
  if (!h) return CUDA_ERROR_INVALID_VALUE;
  memcpy(dst, h, n);
  return CUDA_SUCCESS;
}
static CUresult fake_memset(CUdeviceptr dst, unsigned char v, size_t n) {
  if (n == 0) return CUDA_SUCCESS;
  char* h = host_of(dst, n);
  if (!h) return CUDA_ERROR_INVALID_VALUE;
  memset(h, v, n);
  return CUDA_SUCCESS;
}
FAKE_EXPORT CUresult cuMemsetD8Async(CUdeviceptr dst, unsigned char v, size_t n, CUstream stream) {
  COUNT();
  order_work(stream);
  return fake_memset(dst, v, n);
}
FAKE_EXPORT CUresult cuMemsetD8Async_ptsz(CUdeviceptr dst, unsigned char v, size_t n, CUstream) {
  COUNT();
  return fake_memset(dst, v, n);
}
FAKE_EXPORT CUresult cuMemGetAddressRange_v2(CUdeviceptr* base, size_t* size, CUdeviceptr p) {
  COUNT();
  auto& a = st().allocs;
  auto it = a.upper_bound(p);
  if (it == a.begin()) return CUDA_ERROR_NOT_FOUND;
  --it;
  if (p >= it->first + it->second.size) return CUDA_ERROR_NOT_FOUND;
  if (base) *base = it->first;
  if (size) *size = it->second.size;
  return CUDA_SUCCESS;
}

// The allocation holding p (any byte of it), or null.
static const std::pair<const CUdeviceptr, Allocation>* allocation_holding(CUdeviceptr p) {
  auto& a = st().allocs;
  auto it = a.upper_bound(p);
  if (it == a.begin()) return nullptr;
  --it;
  return p < it->first + it->second.size ? &*it : nullptr;
}
// The attributes the tests ask for; `known` false gives the defaults cuPointerGetAttributes
// writes for a pointer the driver does not know.
static bool pointer_attribute(void* data, CUpointer_attribute attr, CUdeviceptr p, bool known) {
  const auto* a = known ? allocation_holding(p) : nullptr;
  switch (attr) {
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
      *static_cast<CUdeviceptr*>(data) = a ? a->first : 0;
      return true;
    case CU_POINTER_ATTRIBUTE_RANGE_SIZE:
      *static_cast<size_t*>(data) = a ? a->second.size : 0;
      return true;
    case CU_POINTER_ATTRIBUTE_BUFFER_ID:
      *static_cast<unsigned long long*>(data) = a ? a->second.buffer_id : 0;
      return true;
    case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
      *static_cast<unsigned int*>(data) = a ? CU_MEMORYTYPE_DEVICE : 0;
      return true;
    default:
      return false;
  }
}
FAKE_EXPORT CUresult cuPointerGetAttribute(void* data, CUpointer_attribute attr, CUdeviceptr p) {
  COUNT();
  if (!data || !allocation_holding(p)) return CUDA_ERROR_INVALID_VALUE;
  return pointer_attribute(data, attr, p, true) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}
FAKE_EXPORT CUresult cuPointerGetAttributes(unsigned n, CUpointer_attribute* attrs, void** data, CUdeviceptr p) {
  COUNT();
  if (!attrs || !data) return CUDA_ERROR_INVALID_VALUE;
  const bool known = allocation_holding(p) != nullptr;
  for (unsigned i = 0; i < n; ++i)
    if (!pointer_attribute(data[i], attrs[i], p, known)) return CUDA_ERROR_INVALID_VALUE;
  return CUDA_SUCCESS;
}

// ---------------------------------------------------------------- stream-ordered memory
static CUresult alloc_async(CUdeviceptr* p, size_t bytes, CUstream s) {
  if (inject_alloc_fault()) return CUDA_ERROR_OUT_OF_MEMORY;
  return do_alloc(p, bytes, Kind::async);
}
FAKE_EXPORT CUresult cuMemAllocAsync(CUdeviceptr* p, size_t b, CUstream s) {
  COUNT();
  return alloc_async(p, b, s);
}
FAKE_EXPORT CUresult cuMemAllocAsync_ptsz(CUdeviceptr* p, size_t b, CUstream s) {
  COUNT();
  return alloc_async(p, b, s);
}
// The two stream-ordered frees: counted under their own names (COUNT uses __func__), the free
// itself under the lock, the return delay outside it.
#define FAKE_FREE_ASYNC_BODY(p) \
  CUresult r;                   \
  {                             \
    COUNT();                    \
    r = do_free(p, true);       \
  }                             \
  return slow_return(r)
FAKE_EXPORT CUresult cuMemFreeAsync(CUdeviceptr p, CUstream) { FAKE_FREE_ASYNC_BODY(p); }
FAKE_EXPORT CUresult cuMemFreeAsync_ptsz(CUdeviceptr p, CUstream) { FAKE_FREE_ASYNC_BODY(p); }
#undef FAKE_FREE_ASYNC_BODY
FAKE_EXPORT CUresult cuMemAllocFromPoolAsync(CUdeviceptr* p, size_t b, CUmemoryPool pool, CUstream s) {
  COUNT();
  return alloc_async(p, b, s);
}
FAKE_EXPORT CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr* p, size_t b, CUmemoryPool pool, CUstream s) {
  COUNT();
  return alloc_async(p, b, s);
}
FAKE_EXPORT CUresult cuDeviceSetMemPool(CUdevice dev, CUmemoryPool pool) {
  COUNT();
  return CUDA_SUCCESS;
}

// ---------------------------------------------------------------- host memory
FAKE_EXPORT CUresult cuMemHostAlloc(void** p, size_t bytes, unsigned int flags) {
  COUNT();
  *p = malloc(bytes ? bytes : 1);
  st().host_allocs.insert(*p);
  return CUDA_SUCCESS;
}
FAKE_EXPORT CUresult cuMemAllocHost_v2(void** p, size_t bytes) {
  COUNT();
  *p = malloc(bytes ? bytes : 1);
  st().host_allocs.insert(*p);
  return CUDA_SUCCESS;
}
FAKE_EXPORT CUresult cuMemFreeHost(void* p) {
  COUNT();
  if (!st().host_allocs.erase(p)) return CUDA_ERROR_INVALID_VALUE;
  free(p);
  return CUDA_SUCCESS;
}

// ---------------------------------------------------------------- virtual memory management
FAKE_EXPORT CUresult cuMemGetAllocationGranularity(size_t* g, const CUmemAllocationProp* prop,
                                                   CUmemAllocationGranularity_flags flags) {
  COUNT();
  *g = 2u << 20;
  return CUDA_SUCCESS;
}
FAKE_EXPORT CUresult cuMemAddressReserve(CUdeviceptr* p, size_t size, size_t align, CUdeviceptr addr,
                                         unsigned long long flags) {
  COUNT();
  Context* c = nullptr;
  if (CUresult r = current(&c)) return r;
  if (size == 0 || size % (2u << 20)) return CUDA_ERROR_INVALID_VALUE;
  *p = round_up(c->next, 2u << 20);
  c->next = *p + size;
  Allocation a;
  a.size = size;
  a.host = static_cast<char*>(calloc(1, size));  // lazily committed by the OS; lets tests copy into mapped pages
  a.ctx = reinterpret_cast<CUcontext>(c);
  a.kind = Kind::vmm_reserved;
  st().allocs[*p] = a;
  return CUDA_SUCCESS;
}
FAKE_EXPORT CUresult cuMemAddressFree(CUdeviceptr p, size_t size) {
  COUNT();
  auto it = st().allocs.find(p);
  if (it == st().allocs.end() || it->second.kind != Kind::vmm_reserved) return CUDA_ERROR_INVALID_VALUE;
  free(it->second.host);
  st().allocs.erase(it);
  return CUDA_SUCCESS;
}
FAKE_EXPORT CUresult cuMemCreate(CUmemGenericAllocationHandle* h, size_t size, const CUmemAllocationProp* prop,
                                 unsigned long long flags) {
  COUNT();
  int dev = prop ? prop->location.id : 0;
  if (dev < 0 || dev >= st().devices) return CUDA_ERROR_INVALID_DEVICE;
  if (inject_alloc_fault()) return CUDA_ERROR_OUT_OF_MEMORY;
  if (st().used[dev] + size > st().total_bytes) return CUDA_ERROR_OUT_OF_MEMORY;
  st().used[dev] += size;
  *h = (st().next_handle++ << 8) | static_cast<unsigned>(dev);
  st().handles[*h] = {size, dev, reinterpret_cast<Context*>(tl_current)};
  return CUDA_SUCCESS;
}
FAKE_EXPORT CUresult cuMemRelease(CUmemGenericAllocationHandle h) {
  COUNT();
  auto it = st().handles.find(h);
  if (it == st().handles.end()) return CUDA_ERROR_INVALID_VALUE;
  st().used[it->second.device] -= it->second.size;
  st().handles.erase(it);
  return CUDA_SUCCESS;
}
FAKE_EXPORT CUresult cuMemMap(CUdeviceptr p, size_t size, size_t offset, CUmemGenericAllocationHandle h,
                              unsigned long long flags) {
  COUNT();
  return CUDA_SUCCESS;
}
FAKE_EXPORT CUresult cuMemUnmap(CUdeviceptr p, size_t size) {
  COUNT();
  return CUDA_SUCCESS;
}
FAKE_EXPORT CUresult cuMemSetAccess(CUdeviceptr p, size_t size, const CUmemAccessDesc* d, size_t n) {
  COUNT();
  return CUDA_SUCCESS;
}

// ---------------------------------------------------------------- arrays, IPC
FAKE_EXPORT CUresult cuArrayCreate_v2(CUarray* a, const CUDA_ARRAY_DESCRIPTOR* d) {
  COUNT();
  *a = reinterpret_cast<CUarray>(st().next_handle++ << 4);
  return CUDA_SUCCESS;
}
FAKE_EXPORT CUresult cuArrayDestroy(CUarray a) {
  COUNT();
  return CUDA_SUCCESS;
}
FAKE_EXPORT CUresult cuIpcGetMemHandle(CUipcMemHandle* h, CUdeviceptr p) {
  COUNT();
  memset(h, 0, sizeof(*h));
  memcpy(h->reserved, &p, sizeof(p));
  return CUDA_SUCCESS;
}

// ---------------------------------------------------------------- streams, events, capture
FAKE_EXPORT CUresult cuStreamCreate(CUstream* s, unsigned int flags) {
  COUNT();
  *s = reinterpret_cast<CUstream>(st().next_handle++ << 4);
  if (flags & CU_STREAM_NON_BLOCKING) st().nonblocking.insert(reinterpret_cast<std::uintptr_t>(*s));
  return CUDA_SUCCESS;
}
FAKE_EXPORT CUresult cuStreamGetFlags(CUstream s, unsigned int* flags) {
  COUNT();
  if (!flags) return CUDA_ERROR_INVALID_VALUE;
  *flags = st().nonblocking.count(reinterpret_cast<std::uintptr_t>(s)) ? CU_STREAM_NON_BLOCKING : 0;
  return CUDA_SUCCESS;
}
FAKE_EXPORT CUresult cuStreamGetCtx(CUstream, CUcontext* ctx) {
  COUNT();
  if (!ctx) return CUDA_ERROR_INVALID_VALUE;
  *ctx = tl_current;  // the tests that ask use one context
  return CUDA_SUCCESS;
}
// Work still queued on a destroyed stream runs to its end (as the real driver's does) and keeps
// the order it had: the model keeps the stream's entry (handles are never handed out twice here).
FAKE_EXPORT CUresult cuStreamDestroy_v2(CUstream s) {
  COUNT();
  return CUDA_SUCCESS;
}
FAKE_EXPORT CUresult cuStreamSynchronize(CUstream s) {
  COUNT();
  if (inject_sync_fault()) return CUDA_ERROR_LAUNCH_FAILED;
  order_finish(ordered_before(order_key(s)));
  return CUDA_SUCCESS;
}
FAKE_EXPORT CUresult cuStreamBeginCapture_v2(CUstream s, CUstreamCaptureMode m) {
  COUNT();
  st().capturing.insert(s);
  return CUDA_SUCCESS;
}
FAKE_EXPORT CUresult cuStreamBeginCapture_v2_ptsz(CUstream s, CUstreamCaptureMode m) {
  COUNT();
  st().capturing.insert(s);
  return CUDA_SUCCESS;
}
FAKE_EXPORT CUresult cuStreamBeginCapture(CUstream s) {  // v1 (CUDA 10.0), global mode
  COUNT();
  st().capturing.insert(s);
  return CUDA_SUCCESS;
}
FAKE_EXPORT CUresult cuStreamBeginCaptureToGraph(CUstream s, CUgraph, const CUgraphNode*, const CUgraphEdgeData*,
                                                 size_t, CUstreamCaptureMode) {
  COUNT();
  st().capturing.insert(s);
  return CUDA_SUCCESS;
}
// Work that no test reads the result of: counted, nothing done.
FAKE_EXPORT CUresult cuMemcpyPeerAsync(CUdeviceptr, CUcontext, CUdeviceptr, CUcontext, size_t, CUstream) {
  COUNT();
  return CUDA_SUCCESS;
}
FAKE_EXPORT CUresult cuLaunchKernel(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                                    CUstream stream, void**, void**) {
  COUNT();
  order_work(stream);
  return CUDA_SUCCESS;
}
FAKE_EXPORT CUresult cuLaunchKernelEx(const CUlaunchConfig* config, CUfunction, void**, void**) {
  COUNT();
  order_work(config ? config->hStream : nullptr);
  return CUDA_SUCCESS;
}
FAKE_EXPORT CUresult cuStreamEndCapture(CUstream s, CUgraph* g) {
  COUNT();
  if (!st().capturing.erase(s)) return CUDA_ERROR_ILLEGAL_STATE;
  if (g) *g = nullptr;
  return CUDA_SUCCESS;
}
FAKE_EXPORT CUresult cuStreamEndCapture_ptsz(CUstream s, CUgraph* g) {
  COUNT();
  if (!st().capturing.erase(s)) return CUDA_ERROR_ILLEGAL_STATE;
  if (g) *g = nullptr;
  return CUDA_SUCCESS;
}
FAKE_EXPORT CUresult cuStreamIsCapturing(CUstream s, CUstreamCaptureStatus* out) {
  COUNT();
  *out = st().capturing.count(s) ? CU_STREAM_CAPTURE_STATUS_ACTIVE : CU_STREAM_CAPTURE_STATUS_NONE;
  return CUDA_SUCCESS;
}
FAKE_EXPORT CUresult cuEventCreate(CUevent* e, unsigned int flags) {
  COUNT();
  *e = reinterpret_cast<CUevent>(st().next_handle++ << 4);
  return CUDA_SUCCESS;
}
FAKE_EXPORT CUresult cuEventRecord(CUevent e, CUstream s) {
  COUNT();
  st().recorded[e] = ordered_before(order_key(s));
  return CUDA_SUCCESS;
}
FAKE_EXPORT CUresult cuEventQuery(CUevent e) {
  COUNT();
  if (st().events_pending > 0) {
    --st().events_pending;
    return CUDA_ERROR_NOT_READY;
  }
  if (inject_sync_fault()) return CUDA_ERROR_LAUNCH_FAILED;
  order_finish(st().recorded[e]);
  return CUDA_SUCCESS;
}
FAKE_EXPORT CUresult cuStreamGetId(CUstream s, unsigned long long* id) {
  COUNT();
  if (!id) return CUDA_ERROR_INVALID_VALUE;
  const auto v = reinterpret_cast<std::uintptr_t>(s);
  *id = v == 0 || s == CU_STREAM_LEGACY || v == kLegacyAlias ? 1 : s == CU_STREAM_PER_THREAD ? 2 : v;
  return CUDA_SUCCESS;
}
FAKE_EXPORT CUresult cuStreamWaitEvent(CUstream s, CUevent e, unsigned int flags) {
  COUNT();
  if (!e) return CUDA_ERROR_INVALID_HANDLE;
  const std::set<long>& ids = st().recorded[e];
  st().prior[order_key(s)].insert(ids.begin(), ids.end());
  return CUDA_SUCCESS;
}
FAKE_EXPORT CUresult cuEventSynchronize(CUevent e) {
  COUNT();
  if (inject_sync_fault()) return CUDA_ERROR_LAUNCH_FAILED;
  order_finish(st().recorded[e]);
  return CUDA_SUCCESS;
}
FAKE_EXPORT CUresult cuEventDestroy_v2(CUevent e) {
  COUNT();
  return CUDA_SUCCESS;
}

// ---------------------------------------------------------------- entry-point resolver
FAKE_EXPORT CUresult cuGetProcAddress_v2(const char*, void**, int, cuuint64_t, CUdriverProcAddressQueryResult*);
FAKE_EXPORT CUresult cuGetProcAddress(const char*, void**, int, cuuint64_t);
namespace {
struct ProcEntry {
  const char* symbol;  // base name asked for
  int version;         // first cudaVersion at which `abi` is returned
  const char* abi;     // exported name of the legacy-stream variant
  const char* ptsz;    // per-thread variant, or nullptr
};
// Newest versions last within a symbol.
const ProcEntry kProcs[] = {
    {"cuInit", 2000, "cuInit", nullptr},
    {"cuDriverGetVersion", 2020, "cuDriverGetVersion", nullptr},
    {"cuDeviceGet", 2000, "cuDeviceGet", nullptr},
    {"cuDeviceGetCount", 2000, "cuDeviceGetCount", nullptr},
    {"cuDevicePrimaryCtxRetain", 7000, "cuDevicePrimaryCtxRetain", nullptr},
    {"cuDevicePrimaryCtxRelease", 7000, "cuDevicePrimaryCtxRelease", nullptr},
    {"cuDevicePrimaryCtxRelease", 11000, "cuDevicePrimaryCtxRelease_v2", nullptr},
    {"cuDevicePrimaryCtxReset", 7000, "cuDevicePrimaryCtxReset", nullptr},
    {"cuDevicePrimaryCtxReset", 11000, "cuDevicePrimaryCtxReset_v2", nullptr},
    {"cuDevicePrimaryCtxGetState", 7000, "cuDevicePrimaryCtxGetState", nullptr},
    {"cuCtxSetCurrent", 4000, "cuCtxSetCurrent", nullptr},
    {"cuCtxGetCurrent", 4000, "cuCtxGetCurrent", nullptr},
    {"cuCtxGetDevice", 2000, "cuCtxGetDevice", nullptr},
    {"cuCtxSynchronize", 2000, "cuCtxSynchronize", nullptr},
    {"cuCtxSynchronize", 13000, "cuCtxSynchronize_v2", nullptr},
    {"cuCtxDestroy", 4000, "cuCtxDestroy_v2", nullptr},
    {"cuMemAlloc", 2000, "cuMemAlloc", nullptr},
    {"cuMemAlloc", 3020, "cuMemAlloc_v2", nullptr},
    {"cuMemFree", 2000, "cuMemFree", nullptr},
    {"cuMemFree", 3020, "cuMemFree_v2", nullptr},
    {"cuMemGetInfo", 2000, "cuMemGetInfo", nullptr},
    {"cuMemGetInfo", 3020, "cuMemGetInfo_v2", nullptr},
    {"cuDeviceTotalMem", 3020, "cuDeviceTotalMem_v2", nullptr},
    {"cuDeviceGetUuid", 11040, "cuDeviceGetUuid_v2", nullptr},
    {"cuDeviceGetName", 2000, "cuDeviceGetName", nullptr},
    {"cuMemAllocPitch", 3020, "cuMemAllocPitch_v2", nullptr},
    {"cuMemAllocManaged", 6000, "cuMemAllocManaged", nullptr},
    {"cuMemcpyHtoD", 3020, "cuMemcpyHtoD_v2", nullptr},
    {"cuMemcpyDtoH", 3020, "cuMemcpyDtoH_v2", nullptr},
    {"cuMemGetAddressRange", 3020, "cuMemGetAddressRange_v2", nullptr},
    {"cuPointerGetAttribute", 4000, "cuPointerGetAttribute", nullptr},
    {"cuPointerGetAttributes", 7000, "cuPointerGetAttributes", nullptr},
    {"cuMemAllocAsync", 11020, "cuMemAllocAsync", "cuMemAllocAsync_ptsz"},
    {"cuMemFreeAsync", 11020, "cuMemFreeAsync", "cuMemFreeAsync_ptsz"},
    {"cuMemAllocFromPoolAsync", 11020, "cuMemAllocFromPoolAsync", "cuMemAllocFromPoolAsync_ptsz"},
    {"cuDeviceSetMemPool", 11020, "cuDeviceSetMemPool", nullptr},
    {"cuMemHostAlloc", 2020, "cuMemHostAlloc", nullptr},
    {"cuMemAllocHost", 3020, "cuMemAllocHost_v2", nullptr},
    {"cuMemFreeHost", 2000, "cuMemFreeHost", nullptr},
    {"cuMemGetAllocationGranularity", 10020, "cuMemGetAllocationGranularity", nullptr},
    {"cuMemAddressReserve", 10020, "cuMemAddressReserve", nullptr},
    {"cuMemAddressFree", 10020, "cuMemAddressFree", nullptr},
    {"cuMemCreate", 10020, "cuMemCreate", nullptr},
    {"cuMemRelease", 10020, "cuMemRelease", nullptr},
    {"cuMemMap", 10020, "cuMemMap", nullptr},
    {"cuMemUnmap", 10020, "cuMemUnmap", nullptr},
    {"cuMemSetAccess", 10020, "cuMemSetAccess", nullptr},
    {"cuArrayCreate", 3020, "cuArrayCreate_v2", nullptr},
    {"cuArrayDestroy", 2000, "cuArrayDestroy", nullptr},
    {"cuIpcGetMemHandle", 4010, "cuIpcGetMemHandle", nullptr},
    {"cuStreamCreate", 2000, "cuStreamCreate", nullptr},
    {"cuStreamGetFlags", 2000, "cuStreamGetFlags", nullptr},
    {"cuStreamGetCtx", 9020, "cuStreamGetCtx", nullptr},
    {"cuStreamDestroy", 4000, "cuStreamDestroy_v2", nullptr},
    {"cuStreamSynchronize", 2000, "cuStreamSynchronize", nullptr},
    {"cuStreamBeginCapture", 10010, "cuStreamBeginCapture_v2", "cuStreamBeginCapture_v2_ptsz"},
    {"cuStreamEndCapture", 10000, "cuStreamEndCapture", "cuStreamEndCapture_ptsz"},
    {"cuStreamIsCapturing", 10000, "cuStreamIsCapturing", nullptr},
    {"cuMemsetD8Async", 3020, "cuMemsetD8Async", "cuMemsetD8Async_ptsz"},
    {"cuStreamWaitEvent", 3020, "cuStreamWaitEvent", nullptr},
    {"cuStreamGetId", 12000, "cuStreamGetId", "cuStreamGetId_ptsz"},
    {"cuEventCreate", 2000, "cuEventCreate", nullptr},
    {"cuEventRecord", 2000, "cuEventRecord", nullptr},
    {"cuEventQuery", 2000, "cuEventQuery", nullptr},
    {"cuEventSynchronize", 2000, "cuEventSynchronize", nullptr},
    {"cuEventDestroy", 4000, "cuEventDestroy_v2", nullptr},
    {"cuGetProcAddress", 11030, "cuGetProcAddress", nullptr},
    {"cuGetProcAddress", 12000, "cuGetProcAddress_v2", nullptr},
};

const struct {
  const char* name;
  void* fn;
} kOwn[] = {
    {"cuArrayCreate_v2", reinterpret_cast<void*>(&cuArrayCreate_v2)},
    {"cuArrayDestroy", reinterpret_cast<void*>(&cuArrayDestroy)},
    {"cuCtxDestroy_v2", reinterpret_cast<void*>(&cuCtxDestroy_v2)},
    {"cuCtxGetCurrent", reinterpret_cast<void*>(&cuCtxGetCurrent)},
    {"cuCtxGetDevice", reinterpret_cast<void*>(&cuCtxGetDevice)},
    {"cuCtxSetCurrent", reinterpret_cast<void*>(&cuCtxSetCurrent)},
    {"cuCtxSynchronize", reinterpret_cast<void*>(&cuCtxSynchronize)},
    {"cuCtxSynchronize_v2", reinterpret_cast<void*>(&cuCtxSynchronize_v2)},
    {"cuDeviceGet", reinterpret_cast<void*>(&cuDeviceGet)},
    {"cuDeviceGetCount", reinterpret_cast<void*>(&cuDeviceGetCount)},
    {"cuDevicePrimaryCtxGetState", reinterpret_cast<void*>(&cuDevicePrimaryCtxGetState)},
    {"cuDevicePrimaryCtxRelease", reinterpret_cast<void*>(&cuDevicePrimaryCtxRelease)},
    {"cuDevicePrimaryCtxRelease_v2", reinterpret_cast<void*>(&cuDevicePrimaryCtxRelease_v2)},
    {"cuDevicePrimaryCtxReset", reinterpret_cast<void*>(&cuDevicePrimaryCtxReset)},
    {"cuDevicePrimaryCtxReset_v2", reinterpret_cast<void*>(&cuDevicePrimaryCtxReset_v2)},
    {"cuDevicePrimaryCtxRetain", reinterpret_cast<void*>(&cuDevicePrimaryCtxRetain)},
    {"cuDeviceSetMemPool", reinterpret_cast<void*>(&cuDeviceSetMemPool)},
    {"cuDriverGetVersion", reinterpret_cast<void*>(&cuDriverGetVersion)},
    {"cuEventCreate", reinterpret_cast<void*>(&cuEventCreate)},
    {"cuMemsetD8Async", reinterpret_cast<void*>(&cuMemsetD8Async)},
    {"cuMemsetD8Async_ptsz", reinterpret_cast<void*>(&cuMemsetD8Async_ptsz)},
    {"cuStreamWaitEvent", reinterpret_cast<void*>(&cuStreamWaitEvent)},
    {"cuStreamGetId", reinterpret_cast<void*>(&cuStreamGetId)},
    {"cuEventDestroy_v2", reinterpret_cast<void*>(&cuEventDestroy_v2)},
    {"cuEventQuery", reinterpret_cast<void*>(&cuEventQuery)},
    {"cuEventRecord", reinterpret_cast<void*>(&cuEventRecord)},
    {"cuEventSynchronize", reinterpret_cast<void*>(&cuEventSynchronize)},
    {"cuGetProcAddress", reinterpret_cast<void*>(&cuGetProcAddress)},
    {"cuGetProcAddress_v2", reinterpret_cast<void*>(&cuGetProcAddress_v2)},
    {"cuInit", reinterpret_cast<void*>(&cuInit)},
    {"cuIpcGetMemHandle", reinterpret_cast<void*>(&cuIpcGetMemHandle)},
    {"cuMemAddressFree", reinterpret_cast<void*>(&cuMemAddressFree)},
    {"cuMemAddressReserve", reinterpret_cast<void*>(&cuMemAddressReserve)},
    {"cuMemAlloc", reinterpret_cast<void*>(&cuMemAlloc)},
    {"cuMemAllocAsync", reinterpret_cast<void*>(&cuMemAllocAsync)},
    {"cuMemAllocAsync_ptsz", reinterpret_cast<void*>(&cuMemAllocAsync_ptsz)},
    {"cuMemAllocFromPoolAsync", reinterpret_cast<void*>(&cuMemAllocFromPoolAsync)},
    {"cuMemAllocFromPoolAsync_ptsz", reinterpret_cast<void*>(&cuMemAllocFromPoolAsync_ptsz)},
    {"cuMemAllocHost_v2", reinterpret_cast<void*>(&cuMemAllocHost_v2)},
    {"cuMemAllocManaged", reinterpret_cast<void*>(&cuMemAllocManaged)},
    {"cuMemAllocPitch_v2", reinterpret_cast<void*>(&cuMemAllocPitch_v2)},
    {"cuMemAlloc_v2", reinterpret_cast<void*>(&cuMemAlloc_v2)},
    {"cuMemCreate", reinterpret_cast<void*>(&cuMemCreate)},
    {"cuMemFree", reinterpret_cast<void*>(&cuMemFree)},
    {"cuMemFreeAsync", reinterpret_cast<void*>(&cuMemFreeAsync)},
    {"cuMemFreeAsync_ptsz", reinterpret_cast<void*>(&cuMemFreeAsync_ptsz)},
    {"cuMemFreeHost", reinterpret_cast<void*>(&cuMemFreeHost)},
    {"cuMemFree_v2", reinterpret_cast<void*>(&cuMemFree_v2)},
    {"cuMemGetAddressRange_v2", reinterpret_cast<void*>(&cuMemGetAddressRange_v2)},
    {"cuPointerGetAttribute", reinterpret_cast<void*>(&cuPointerGetAttribute)},
    {"cuPointerGetAttributes", reinterpret_cast<void*>(&cuPointerGetAttributes)},
    {"cuMemGetAllocationGranularity", reinterpret_cast<void*>(&cuMemGetAllocationGranularity)},
    {"cuMemGetInfo", reinterpret_cast<void*>(&cuMemGetInfo)},
    {"cuMemGetInfo_v2", reinterpret_cast<void*>(&cuMemGetInfo_v2)},
    {"cuDeviceTotalMem_v2", reinterpret_cast<void*>(&cuDeviceTotalMem_v2)},
    {"cuDeviceGetUuid_v2", reinterpret_cast<void*>(&cuDeviceGetUuid_v2)},
    {"cuDeviceGetName", reinterpret_cast<void*>(&cuDeviceGetName)},
    {"cuMemHostAlloc", reinterpret_cast<void*>(&cuMemHostAlloc)},
    {"cuMemMap", reinterpret_cast<void*>(&cuMemMap)},
    {"cuMemRelease", reinterpret_cast<void*>(&cuMemRelease)},
    {"cuMemSetAccess", reinterpret_cast<void*>(&cuMemSetAccess)},
    {"cuMemUnmap", reinterpret_cast<void*>(&cuMemUnmap)},
    {"cuMemcpyDtoH_v2", reinterpret_cast<void*>(&cuMemcpyDtoH_v2)},
    {"cuMemcpyHtoD_v2", reinterpret_cast<void*>(&cuMemcpyHtoD_v2)},
    {"cuStreamBeginCapture_v2", reinterpret_cast<void*>(&cuStreamBeginCapture_v2)},
    {"cuStreamBeginCapture_v2_ptsz", reinterpret_cast<void*>(&cuStreamBeginCapture_v2_ptsz)},
    {"cuStreamCreate", reinterpret_cast<void*>(&cuStreamCreate)},
    {"cuStreamGetFlags", reinterpret_cast<void*>(&cuStreamGetFlags)},
    {"cuStreamGetCtx", reinterpret_cast<void*>(&cuStreamGetCtx)},
    {"cuStreamDestroy_v2", reinterpret_cast<void*>(&cuStreamDestroy_v2)},
    {"cuStreamEndCapture", reinterpret_cast<void*>(&cuStreamEndCapture)},
    {"cuStreamEndCapture_ptsz", reinterpret_cast<void*>(&cuStreamEndCapture_ptsz)},
    {"cuStreamIsCapturing", reinterpret_cast<void*>(&cuStreamIsCapturing)},
    {"cuStreamSynchronize", reinterpret_cast<void*>(&cuStreamSynchronize)},
};

// The driver's own table: a real driver never consults the global scope here.
void* own_symbol(const char* abi) {
  for (const auto& e : kOwn)
    if (strcmp(e.name, abi) == 0) return e.fn;
  return nullptr;
}

CUresult resolve(const char* symbol, void** pfn, int version, cuuint64_t flags,
                 CUdriverProcAddressQueryResult* status) {
  if (!pfn) return CUDA_ERROR_INVALID_VALUE;
  *pfn = nullptr;
  if (version > 13000) return CUDA_ERROR_INVALID_VALUE;
  const ProcEntry* best = nullptr;
  bool known = false;
  for (const ProcEntry& e : kProcs) {
    if (!symbol || strcmp(e.symbol, symbol) != 0) continue;
    known = true;
    if (e.version <= version) best = &e;
  }
  if (!best) {
    if (status) *status = known ? CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT : CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    return CUDA_SUCCESS;
  }
  const char* abi = (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) && best->ptsz ? best->ptsz : best->abi;
  *pfn = own_symbol(abi);
  if (status) *status = *pfn ? CU_GET_PROC_ADDRESS_SUCCESS : CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
  return CUDA_SUCCESS;
}
}  // namespace

FAKE_EXPORT CUresult cuGetProcAddress_v2(const char* symbol, void** pfn, int version, cuuint64_t flags,
                                         CUdriverProcAddressQueryResult* status) {
  { COUNT(); }
  return resolve(symbol, pfn, version, flags, status);
}
FAKE_EXPORT CUresult cuGetProcAddress(const char* symbol, void** pfn, int version, cuuint64_t flags) {
  { COUNT(); }
  return resolve(symbol, pfn, version, flags, nullptr);
}
FAKE_EXPORT CUresult cuGetExportTable(const void** table, const CUuuid* id) {
  COUNT();
  return CUDA_ERROR_NOT_SUPPORTED;
}

// ---------------------------------------------------------------- test-only queries
FAKE_EXPORT long fakecuda_calls(const char* name) {
  std::lock_guard<std::mutex> lock(st().mu);
  auto it = st().calls.find(name);
  return it == st().calls.end() ? 0 : it->second;
}
FAKE_EXPORT size_t fakecuda_used_bytes(int dev) {
  std::lock_guard<std::mutex> lock(st().mu);
  return st().used[dev];
}
FAKE_EXPORT long fakecuda_live_allocations() {
  std::lock_guard<std::mutex> lock(st().mu);
  long n = 0;
  for (auto& [p, a] : st().allocs) n += a.kind != Kind::vmm_reserved;
  return n;
}
FAKE_EXPORT void* fakecuda_real(const char* abi) { return own_symbol(abi); }
FAKE_EXPORT long fakecuda_injected_faults(const char* kind) {
  std::lock_guard<std::mutex> lock(st().mu);
  if (strcmp(kind, "alloc") == 0) return st().injected_alloc_faults;
  if (strcmp(kind, "sync") == 0) return st().injected_sync_faults;
  return -1;
}
/// The order model: the id of the latest piece of work submitted (0 before any).
FAKE_EXPORT long fakecuda_last_work() {
  std::lock_guard<std::mutex> lock(st().mu);
  return st().last_work;
}
/// The order model: 1 when work `id` has finished or the next operation on `stream` would be
/// ordered after it, else 0.
FAKE_EXPORT int fakecuda_ordered_after(long id, CUstream stream) {
  std::lock_guard<std::mutex> lock(st().mu);
  return st().finished_work.count(id) || ordered_before(order_key(stream)).count(id) ? 1 : 0;
}
