// OOM messages used by the tests: the cases of docs/cases.md (M1-M4, C2-C4, C12) and the real
// message of docs/h200.md. Numbers are the cases'; wording follows each
// framework's template of that era.
#pragma once

namespace vramtrace::test_messages {

// M1 (pytorch/examples#621): old form, 1 GiB card.
inline constexpr const char* kM1 =
    "RuntimeError: CUDA out of memory. Tried to allocate 26.00 MiB (GPU 0; 1024.00 MiB total capacity; 435.61 MiB "
    "already allocated; 24.17 MiB free; 26.39 MiB cached)";

// M2 (pytorch/pytorch#16417): free far above the request.
inline constexpr const char* kM2 =
    "RuntimeError: CUDA out of memory. Tried to allocate 12.50 MiB (GPU 0; 10.92 GiB total capacity; 8.57 MiB "
    "already allocated; 9.28 GiB free; 4.68 MiB cached)";

// M3: the H200 message as quoted in docs/h200.md (elided with "...").
inline constexpr const char* kM3Quoted =
    "Tried to allocate 44.00 MiB ... this process has 15.31 GiB memory in use. 14.58 GiB allowed; Of the allocated\n"
    "memory 14.56 GiB is allocated by PyTorch, and 12.76 MiB is reserved by PyTorch but unallocated.";

// M3 in full, as PyTorch 2.11 prints it (device figures of an H200: 143771 MiB total).
inline constexpr const char* kM3Full =
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 44.00 MiB. GPU 0 has a total capacity of 140.40 GiB "
    "of which 124.21 GiB is free. Including non-PyTorch memory, this process has 15.31 GiB memory in use. 14.58 GiB "
    "allowed; Of the allocated memory 14.56 GiB is allocated by PyTorch, and 12.76 MiB is reserved by PyTorch but "
    "unallocated. If reserved but unallocated memory is large try setting PYTORCH_ALLOC_CONF=expandable_segments:True "
    "to avoid fragmentation.  See documentation for Memory Management  "
    "(https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)";

// C2 (pytorch/pytorch#31353): old form, plenty cached.
inline constexpr const char* kC2 =
    "RuntimeError: CUDA out of memory. Tried to allocate 1.86 GiB (GPU 0; 31.72 GiB total capacity; 24.58 GiB already "
    "allocated; 1.28 GiB free; 5.08 GiB cached)";

// C3 (pytorch/pytorch#32101): 1.4-2.0 form.
inline constexpr const char* kC3 =
    "RuntimeError: CUDA out of memory. Tried to allocate 152.00 MiB (GPU 0; 31.75 GiB total capacity; 24.89 GiB "
    "already allocated; 6.12 MiB free; 30.70 GiB reserved in total by PyTorch)";

// C4 (vllm-project/compressed-tensors PR 587): sentence form.
inline constexpr const char* kC4 =
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.96 GiB. GPU 0 has a total capacity of 79.18 GiB "
    "of which 1.08 GiB is free. Including non-PyTorch memory, this process has 78.09 GiB memory in use. Of the "
    "allocated memory 75.31 GiB is allocated by PyTorch, and 1.83 GiB is reserved by PyTorch but unallocated. If "
    "reserved but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid "
    "fragmentation.  See documentation for Memory Management  "
    "(https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)";

// M4: cut after "GPU" (pytorch/pytorch#126766).
inline constexpr const char* kM4Cut = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 3725.29 GiB. GPU";

// M4: the PyTorch 2.1 typo form with other processes listed.
inline constexpr const char* kTypoWithProcesses =
    "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacty of 23.65 "
    "GiB of which 1.06 GiB is free. Process 4242 has 12.00 GiB memory in use. Including non-PyTorch memory, this "
    "process has 10.57 GiB memory in use. Of the allocated memory 9.80 GiB is allocated by PyTorch, and 300.00 MiB is "
    "reserved by PyTorch but unallocated. If reserved but unallocated memory is large try setting max_split_size_mb "
    "to avoid fragmentation.  See documentation for Memory Management and PYTORCH_CUDA_ALLOC_CONF";

// M4: private pools clause (pytorch/pytorch#121932).
inline constexpr const char* kPrivatePools =
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.50 GiB. GPU 0 has a total capacity of 39.39 GiB "
    "of which 512.00 MiB is free. Including non-PyTorch memory, this process has 38.87 GiB memory in use. Of the "
    "allocated memory 36.90 GiB is allocated by PyTorch, with 5.50 GiB allocated in private pools (e.g., CUDA "
    "Graphs), and 1.20 GiB is reserved by PyTorch but unallocated. If reserved but unallocated memory is large try "
    "setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.";

// M4: the cudaMallocAsync backend's multi-line form.
inline constexpr const char* kAsync =
    "torch.OutOfMemoryError: Allocation on device 0 would exceed allowed memory. (out of memory)\n"
    "Currently allocated     : 21.52 GiB\n"
    "Requested               : 2.50 GiB\n"
    "Device limit            : 23.65 GiB\n"
    "Free (according to CUDA): 1.19 GiB\n"
    "PyTorch limit (set by user-supplied memory fraction)\n"
    "                        : 23.65 GiB";

// M4 / C12: TensorFlow BFC, with the rounded request.
inline constexpr const char* kTfRounded =
    "2023-05-02 10:00:00.000000: W tensorflow/core/common_runtime/bfc_allocator.cc:479] Allocator (GPU_0_bfc) ran out "
    "of memory trying to allocate 765.00MiB (rounded to 802160640)requested by op Conv2D\n"
    "If the cause is memory fragmentation maybe the environment variable 'TF_GPU_ALLOCATOR=cuda_malloc_async' will "
    "improve the situation.";

// C12 contrast (tensorflow/tensorflow#3304): capacity from Limit/InUse.
inline constexpr const char* kTfCapacity =
    "W tensorflow/core/common_runtime/bfc_allocator.cc:213] Ran out of memory trying to allocate 1.53MiB.  See logs "
    "for memory state.\n"
    "I tensorflow/core/common_runtime/bfc_allocator.cc:696] Stats: \n"
    "Limit:                   503270604\n"
    "InUse:                   503061248\n"
    "MaxInUse:                503270400\n"
    "NumAllocs:                    3052\n"
    "MaxAllocSize:            160432128\n";

// C12 (tensorflow/tensorflow#56019): 1 GiB of 48758784 B chunks, pairs freed, request 200 MB.
inline constexpr const char* kTfFragmented =
    "W bfc_allocator.cc:479] Allocator (GPU_0_bfc) ran out of memory trying to allocate 190.73MiB (rounded to "
    "200000000)requested by op MatMul\n"
    "I bfc_allocator.cc:1033] InUse at 7f2b1a000000 of size 48758784 next 1\n"
    "I bfc_allocator.cc:1033] Free  at 7f2b1ce80000 of size 97517568 next 2\n"
    "I bfc_allocator.cc:1033] InUse at 7f2b22b80000 of size 48758784 next 3\n"
    "I bfc_allocator.cc:1033] Free  at 7f2b25a00000 of size 175600000 next 4\n"
    "I bfc_allocator.cc:1033] InUse at 7f2b30000000 of size 48758784 next 5\n"
    "I bfc_allocator.cc:1041] Stats: \n"
    "Limit:                  1073741824\n"
    "InUse:                   800624256\n"
    "MaxInUse:                995641856\n";

// XLA / JAX.
inline constexpr const char* kXla =
    "jaxlib.xla_extension.XlaRuntimeError: RESOURCE_EXHAUSTED: Out of memory while trying to allocate 17179869184 "
    "bytes.";
inline constexpr const char* kXlaAttempting =
    "RESOURCE_EXHAUSTED: Error allocating device buffer: Attempting to allocate 1.54G. That was not possible. There "
    "are 1.12G free.; (0x0x0_HBM0)";

inline constexpr const char* kExabyte = "RuntimeError: CUDA out of memory. Tried to allocate more than 1EB memory.";

// Apple MPS (its GB and MB are binary multiples).
inline constexpr const char* kMps =
    "RuntimeError: MPS backend out of memory (MPS allocated: 18.04 GB, other allocations: 2.55 MB, max allowed: 18.13 "
    "GB). Tried to allocate 256.00 MB on private pool. Use PYTORCH_MPS_HIGH_WATERMARK_RATIO=0.0 to disable upper "
    "limit for memory allocations (may cause system failure).";

// PyTorch 0.4 (THC): no figures at all.
inline constexpr const char* kThc =
    "THCudaCheck FAIL file=/pytorch/aten/src/THC/generic/THCStorage.cu line=58 error=2 : out of memory\n"
    "RuntimeError: cuda runtime error (2) : out of memory at /pytorch/aten/src/THC/generic/THCStorage.cu:58";

// ROCm: the CUDA sentence form with HIP's words.
inline constexpr const char* kHip =
    "torch.OutOfMemoryError: HIP out of memory. Tried to allocate 1.96 GiB. GPU 0 has a total capacity of 63.98 GiB "
    "of which 1.08 GiB is free. Of the allocated memory 58.31 GiB is allocated by PyTorch, and 3.83 GiB is reserved "
    "by PyTorch but unallocated. If reserved but unallocated memory is large try setting "
    "PYTORCH_HIP_ALLOC_CONF=expandable_segments:True to avoid fragmentation.";

// cudaMallocAsync without a memory fraction: its limit prints 2^64 bytes (c10/cuda/CUDAMallocAsyncAllocator.cpp).
inline constexpr const char* kAsyncNoFraction =
    "torch.OutOfMemoryError: Allocation on device 0 would exceed allowed memory. (out of memory)\n"
    "Currently allocated     : 21.52 GiB\n"
    "Requested               : 2.50 GiB\n"
    "Device limit            : 23.65 GiB\n"
    "Free (according to CUDA): 1.19 GiB\n"
    "PyTorch limit (set by user-supplied memory fraction)\n"
    "                        : 17179869184.00 GiB";

// TensorFlow's op kernel (TF2 wording): the request is 32 x 512 x 512 x 64 x 4 bytes = 2 GiB.
inline constexpr const char* kTfTensor =
    "2024-03-01 10:00:00.000000: W tensorflow/core/framework/op_kernel.cc:1827] OP_REQUIRES failed at "
    "conv_ops.cc:688 : RESOURCE_EXHAUSTED: OOM when allocating tensor with shape[32,512,512,64] and type float on "
    "/job:localhost/replica:0/task:0/device:GPU:0 by allocator GPU_0_bfc";

// TF2's exception with two root errors, each its own tensor.
inline constexpr const char* kTfRootErrors =
    "tensorflow.python.framework.errors_impl.ResourceExhaustedError: Graph execution error:\n\n"
    "2 root error(s) found.\n"
    "  (0) RESOURCE_EXHAUSTED:  OOM when allocating tensor with shape[8,16,1024,1024] and type half on "
    "/job:localhost/replica:0/task:0/device:GPU:0 by allocator GPU_0_bfc\n"
    "\t [[{{node model/attention/softmax}}]]\n"
    "Hint: If you want to see a list of allocated tensors when OOM happens, add report_tensor_allocations_upon_oom "
    "to RunOptions for current allocation info.\n\n"
    "  (1) RESOURCE_EXHAUSTED:  OOM when allocating tensor with shape[64,50257] and type float on "
    "/job:localhost/replica:0/task:0/device:GPU:0 by allocator GPU_0_bfc\n"
    "\t [[{{node model/lm_head/MatMul}}]]\n"
    "0 successful operations.\n"
    "0 derived errors ignored.";

// XLA's compile-time plan on a TPU (openxla.org error code E1000).
inline constexpr const char* kXlaTpu =
    "jaxlib.xla_extension.XlaRuntimeError: RESOURCE_EXHAUSTED: XLA:TPU compile permanent error. Ran out of memory in "
    "memory space hbm. Used 17.73G of 15.48G hbm. Exceeded hbm capacity by 2.25G.";

// CuPy's pool, with thousands separators (cupy/cuda/memory.pyx).
inline constexpr const char* kCupy =
    "cupy.cuda.memory.OutOfMemoryError: Out of memory allocating 1,073,741,824 bytes (allocated so far: "
    "15,032,385,536 bytes).";
inline constexpr const char* kCupyLimit =
    "cupy.cuda.memory.OutOfMemoryError: Out of memory allocating 536,870,912 bytes (allocated so far: 3,865,470,566 "
    "bytes, limit set to: 4,294,967,296 bytes).";

// CUDA libraries' statuses that hide an allocation failure.
inline constexpr const char* kCublas =
    "RuntimeError: CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`";
inline constexpr const char* kCudnn = "RuntimeError: cuDNN error: CUDNN_STATUS_NOT_INITIALIZED";

}  // namespace vramtrace::test_messages
