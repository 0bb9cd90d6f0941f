// Pointer queries and IPC export of sub-allocated blocks: a program linked directly against the
// fake driver asks cuMemGetAddressRange_v2, cuPointerGetAttribute(s) and cuIpcGetMemHandle about
// blocks that share a segment under the shim. Every answer must be the one the driver gives
// without the shim, where each cuMemAlloc_v2 is an allocation of its own; the one difference
// allowed is an IPC export of a block that does not start its segment, which the shim refuses.
#define __CUDA_API_VERSION_INTERNAL 1
#include <cuda.h>

#include <cstring>

#include "road.h"

static Tally tally;

struct Answer {
  CUdeviceptr start = 0;
  size_t size = 0;
  unsigned long long id = 0;
};

// Asks all three queries about `p` and checks they agree; returns the answer.
static Answer ask(CUdeviceptr p) {
  Answer r;
  tally.add("cuMemGetAddressRange_v2");
  CHECK_EQ(cuMemGetAddressRange_v2(&r.start, &r.size, p), CUDA_SUCCESS);
  CUdeviceptr start = 0;
  size_t size = 0;
  tally.add("cuPointerGetAttribute", 3);
  CHECK_EQ(cuPointerGetAttribute(&start, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, p), CUDA_SUCCESS);
  CHECK_EQ(cuPointerGetAttribute(&size, CU_POINTER_ATTRIBUTE_RANGE_SIZE, p), CUDA_SUCCESS);
  CHECK_EQ(cuPointerGetAttribute(&r.id, CU_POINTER_ATTRIBUTE_BUFFER_ID, p), CUDA_SUCCESS);
  CHECK_EQ(start, r.start);
  CHECK_EQ(size, r.size);
  CUpointer_attribute attrs[] = {CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, CU_POINTER_ATTRIBUTE_RANGE_SIZE,
                                 CU_POINTER_ATTRIBUTE_BUFFER_ID, CU_POINTER_ATTRIBUTE_MEMORY_TYPE};
  CUdeviceptr s2 = 0;
  size_t z2 = 0;
  unsigned long long id2 = 0;
  unsigned int type = 0;
  void* data[] = {&s2, &z2, &id2, &type};
  tally.add("cuPointerGetAttributes");
  CHECK_EQ(cuPointerGetAttributes(4, attrs, data, p), CUDA_SUCCESS);
  CHECK_EQ(s2, r.start);
  CHECK_EQ(z2, r.size);
  CHECK_EQ(id2, r.id);
  CHECK_EQ(type, CU_MEMORYTYPE_DEVICE);
  return r;
}

int main() {
  const bool shim = under_shim();
  CHECK_EQ(cuInit(0), CUDA_SUCCESS);
  CUcontext ctx = nullptr;
  CHECK_EQ(cuCtxCreate_v2(&ctx, 0, 0), CUDA_SUCCESS);

  // Three small blocks: under the shim they share one 2 MiB segment, a at its start.
  constexpr size_t kSmall = 256 << 10, kOdd = 1000;
  CUdeviceptr a = 0, b = 0, c = 0;
  tally.add("cuMemAlloc_v2", 3);
  CHECK_EQ(cuMemAlloc_v2(&a, kSmall), CUDA_SUCCESS);
  CHECK_EQ(cuMemAlloc_v2(&b, kSmall), CUDA_SUCCESS);
  CHECK_EQ(cuMemAlloc_v2(&c, kOdd), CUDA_SUCCESS);
  if (shim) CHECK_EQ(fake_calls("cuMemAlloc_v2"), 1);

  for (CUdeviceptr p : {a, b}) {
    for (CUdeviceptr q : {p, p + 1, p + kSmall - 1}) {  // the start and interior pointers
      Answer x = ask(q);
      CHECK_EQ(x.start, p);
      CHECK_EQ(x.size, kSmall);
    }
  }
  Answer ac = ask(c + 999);
  CHECK_EQ(ac.start, c);
  CHECK_EQ(ac.size, kOdd);  // the size asked for, not the rounded block
  {
    // Past the request, in the block's rounding: no allocation's bytes.
    CUdeviceptr s = 0;
    size_t z = 0;
    tally.add("cuMemGetAddressRange_v2");
    CHECK_EQ(cuMemGetAddressRange_v2(&s, &z, c + 1010), CUDA_ERROR_NOT_FOUND);
  }
  Answer aa = ask(a), ab = ask(b);
  CHECK(aa.id != ab.id);
  CHECK(aa.id != ac.id && ab.id != ac.id);
  CHECK_EQ(ask(b).id, ab.id);  // stable while the block lives

  // A large block, asked about 5 MiB in.
  CUdeviceptr d = 0;
  tally.add("cuMemAlloc_v2");
  CHECK_EQ(cuMemAlloc_v2(&d, 8 << 20), CUDA_SUCCESS);
  Answer ad = ask(d + (5 << 20));
  CHECK_EQ(ad.start, d);
  CHECK_EQ(ad.size, 8 << 20);

  // Through the resolver too: the pointer cuGetProcAddress hands out answers for the block.
  using GetAttr = CUresult (*)(void*, CUpointer_attribute, CUdeviceptr);
  void* fn = nullptr;
  CUdriverProcAddressQueryResult qr{};
  tally.add("cuGetProcAddress_v2");
  CHECK_EQ(cuGetProcAddress_v2("cuPointerGetAttribute", &fn, 12000, 0, &qr), CUDA_SUCCESS);
  CUdeviceptr start = 0;
  tally.add("cuPointerGetAttribute");
  CHECK_EQ(reinterpret_cast<GetAttr>(fn)(&start, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, b + 77), CUDA_SUCCESS);
  CHECK_EQ(start, b);

  // A freed block is memory no allocation holds, then a new allocation with a new buffer id.
  tally.add("cuMemFree_v2");
  CHECK_EQ(cuMemFree_v2(b), CUDA_SUCCESS);
  CUdeviceptr s = 1;
  size_t z = 1;
  tally.add("cuMemGetAddressRange_v2");
  CHECK_EQ(cuMemGetAddressRange_v2(&s, &z, b), CUDA_ERROR_NOT_FOUND);
  tally.add("cuPointerGetAttribute");
  CHECK_EQ(cuPointerGetAttribute(&s, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, b + 8), CUDA_ERROR_INVALID_VALUE);
  CUpointer_attribute attrs[] = {CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, CU_POINTER_ATTRIBUTE_MEMORY_TYPE};
  unsigned int type = 7;
  void* data[] = {&s, &type};
  tally.add("cuPointerGetAttributes");
  CHECK_EQ(cuPointerGetAttributes(2, attrs, data, b), CUDA_SUCCESS);
  CHECK_EQ(s, 0);
  CHECK_EQ(type, 0);
  CUdeviceptr b2 = 0;
  tally.add("cuMemAlloc_v2");
  CHECK_EQ(cuMemAlloc_v2(&b2, kSmall), CUDA_SUCCESS);
  if (shim) CHECK_EQ(b2, b);  // the cache hands the same block out again
  Answer ab2 = ask(b2);
  CHECK_EQ(ab2.start, b2);
  CHECK(ab2.id != ab.id);

  // IPC: a block at its segment's start exports; one further in cannot be exported correctly.
  CUipcMemHandle h;
  std::memset(&h, 0, sizeof h);
  tally.add("cuIpcGetMemHandle", 2);
  CHECK_EQ(cuIpcGetMemHandle(&h, a), CUDA_SUCCESS);
  CHECK_EQ(cuIpcGetMemHandle(&h, b2), shim ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS);

  tally.add("cuMemFree_v2", 4);
  for (CUdeviceptr p : {a, b2, c, d}) CHECK_EQ(cuMemFree_v2(p), CUDA_SUCCESS);
  tally.add("cuCtxDestroy_v2");
  CHECK_EQ(cuCtxDestroy_v2(ctx), CUDA_SUCCESS);
  tally.print();
  return 0;
}
