// GPU check of the pointer queries (tests/gpu/reuse_check.sh): blocks at the start and in the
// middle of what is, under the shim, one cached segment. Each block must answer every pointer
// query as its own driver allocation would (Note [a block answers as an allocation] in
// shim/src/policies/context_pool.h), and a memset of the size the driver reports must leave the
// neighbouring blocks intact. The program checks what must hold with and without the shim and
// prints "answer ..." lines that the script compares between a native run and a shimmed one.
//
// Usage: pointer_check             the checks; exit 1 on a failed one
//        pointer_check import HEX  (internal) opens an IPC handle, prints the first word
#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

static int failures = 0;
#define CK(call)                                                                                  \
  do {                                                                                            \
    cudaError_t e_ = (call);                                                                      \
    if (e_ != cudaSuccess) {                                                                      \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); \
      std::exit(1);                                                                               \
    }                                                                                             \
  } while (0)
#define EXPECT(cond)                                              \
  do {                                                            \
    if (!(cond)) {                                                \
      std::printf("FAIL %s:%d: %s\n", __FILE__, __LINE__, #cond); \
      ++failures;                                                 \
    }                                                             \
  } while (0)

struct Block {
  const char* name;
  size_t size;
  unsigned char pattern;
  CUdeviceptr p = 0;
};

static bool all_bytes(CUdeviceptr p, size_t n, unsigned char v) {
  std::vector<unsigned char> h(n);
  CK(cudaMemcpy(h.data(), reinterpret_cast<void*>(p), n, cudaMemcpyDeviceToHost));
  for (unsigned char c : h)
    if (c != v) return false;
  return true;
}

static int import_main(const char* hex) {
  cudaIpcMemHandle_t h;
  for (size_t i = 0; i < sizeof h; ++i) std::sscanf(hex + 2 * i, "%2hhx", &reinterpret_cast<unsigned char*>(&h)[i]);
  void* p = nullptr;
  CK(cudaIpcOpenMemHandle(&p, h, cudaIpcMemLazyEnablePeerAccess));
  unsigned char first = 0;
  CK(cudaMemcpy(&first, p, 1, cudaMemcpyDeviceToHost));
  std::printf("%u\n", first);
  CK(cudaIpcCloseMemHandle(p));
  return 0;
}

int main(int argc, char** argv) {
  if (argc == 3 && std::strcmp(argv[1], "import") == 0) return import_main(argv[2]);
  CK(cudaFree(nullptr));
  // Small blocks share a 2 MiB segment under the shim (a at its start); two 8 MiB blocks share a
  // 20 MiB one (d at its start, e inside it).
  Block blocks[] = {
      {"a", 256 << 10, 0x11}, {"b", 256 << 10, 0x22}, {"c", 1000, 0x33}, {"d", 8 << 20, 0x44}, {"e", 8 << 20, 0x55}};
  for (Block& b : blocks) {
    void* v = nullptr;
    CK(cudaMalloc(&v, b.size));
    b.p = reinterpret_cast<CUdeviceptr>(v);
    CK(cudaMemset(v, b.pattern, b.size));
  }
  CK(cudaDeviceSynchronize());
  std::vector<unsigned long long> ids;
  for (Block& b : blocks) {
    for (size_t off : {size_t(0), size_t(1), b.size / 2, b.size - 1}) {
      CUdeviceptr base = 0, start = 0;
      size_t size = 0, size2 = 0;
      unsigned long long id = 0, id2 = 0;
      EXPECT(cuMemGetAddressRange_v2(&base, &size, b.p + off) == CUDA_SUCCESS);
      EXPECT(cuPointerGetAttribute(&start, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, b.p + off) == CUDA_SUCCESS);
      EXPECT(cuPointerGetAttribute(&size2, CU_POINTER_ATTRIBUTE_RANGE_SIZE, b.p + off) == CUDA_SUCCESS);
      EXPECT(cuPointerGetAttribute(&id, CU_POINTER_ATTRIBUTE_BUFFER_ID, b.p + off) == CUDA_SUCCESS);
      CUpointer_attribute attrs[] = {CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, CU_POINTER_ATTRIBUTE_BUFFER_ID};
      CUdeviceptr start3 = 0;
      void* data[] = {&start3, &id2};
      EXPECT(cuPointerGetAttributes(2, attrs, data, b.p + off) == CUDA_SUCCESS);
      cudaPointerAttributes pa{};
      EXPECT(cudaPointerGetAttributes(&pa, reinterpret_cast<void*>(b.p + off)) == cudaSuccess);
      EXPECT(pa.type == cudaMemoryTypeDevice);
      EXPECT(base == b.p && start == b.p && start3 == b.p);
      EXPECT(size == size2 && size >= b.size);
      EXPECT(id == id2 && id != 0);
      if (off == 0) {
        std::printf("answer %s size %zu reports %zu\n", b.name, b.size, size);
        ids.push_back(id);
      }
    }
  }
  for (size_t i = 0; i < ids.size(); ++i)
    for (size_t j = i + 1; j < ids.size(); ++j) EXPECT(ids[i] != ids[j]);

  // Clearing what the driver reports touches that block only (numba's device_memory_size).
  for (Block& b : blocks) {
    CUdeviceptr base = 0;
    size_t size = 0;
    EXPECT(cuMemGetAddressRange_v2(&base, &size, b.p) == CUDA_SUCCESS);
    EXPECT(cuMemsetD8_v2(base, 0, size) == CUDA_SUCCESS);
    CK(cudaDeviceSynchronize());
    EXPECT(all_bytes(b.p, b.size, 0));
    for (Block& other : blocks)
      if (&other != &b && other.pattern != 0) EXPECT(all_bytes(other.p, other.size, other.pattern));
    b.pattern = 0;
  }

  // IPC: export a (a segment's start under the shim) and check an importer sees its bytes; b is
  // inside a segment under the shim, which refuses to export it.
  CK(cudaMemset(reinterpret_cast<void*>(blocks[0].p), 0x77, blocks[0].size));
  CK(cudaDeviceSynchronize());
  cudaIpcMemHandle_t h;
  cudaError_t ea = cudaIpcGetMemHandle(&h, reinterpret_cast<void*>(blocks[0].p));
  std::printf("answer ipc_a %d\n", (int)ea);
  if (ea == cudaSuccess) {
    std::string hex;
    char buf[3];
    for (size_t i = 0; i < sizeof h; ++i) {
      std::snprintf(buf, sizeof buf, "%02x", reinterpret_cast<unsigned char*>(&h)[i]);
      hex += buf;
    }
    std::string cmd = std::string("'") + argv[0] + "' import " + hex;
    FILE* f = popen(cmd.c_str(), "r");
    unsigned v = 0;
    EXPECT(f && std::fscanf(f, "%u", &v) == 1);
    if (f) pclose(f);
    EXPECT(v == 0x77);
  }
  cudaError_t eb = cudaIpcGetMemHandle(&h, reinterpret_cast<void*>(blocks[1].p));
  (void)cudaGetLastError();
  std::printf("ipc_b %d\n", (int)eb);  // differs by design: not an "answer" line

  // A freed block answers as memory no allocation holds; a new block at the same address has a
  // new buffer id.
  unsigned long long old_id = 0, new_id = 0;
  EXPECT(cuPointerGetAttribute(&old_id, CU_POINTER_ATTRIBUTE_BUFFER_ID, blocks[2].p) == CUDA_SUCCESS);
  CK(cudaFree(reinterpret_cast<void*>(blocks[2].p)));
  CUdeviceptr base = 0;
  size_t size = 0;
  std::printf("answer freed_range %d\n", (int)cuMemGetAddressRange_v2(&base, &size, blocks[2].p));
  void* again = nullptr;
  CK(cudaMalloc(&again, blocks[2].size));
  EXPECT(cuPointerGetAttribute(&new_id, CU_POINTER_ATTRIBUTE_BUFFER_ID, reinterpret_cast<CUdeviceptr>(again)) ==
         CUDA_SUCCESS);
  EXPECT(new_id != old_id);
  std::printf("same_address %d\n", again == reinterpret_cast<void*>(blocks[2].p));
  std::printf("failures %d\n", failures);
  return failures ? 1 : 0;
}
