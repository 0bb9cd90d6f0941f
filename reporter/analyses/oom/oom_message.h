// Reading a pasted out-of-memory message: every generation of PyTorch's CUDA OOM text, the
// cudaMallocAsync backend's, TensorFlow's BFC allocator and op kernels, XLA/JAX (its runtime
// allocations and its compile-time plan on TPU), CuPy's memory pool, and the CUDA libraries'
// statuses that hide an allocation failure (cuBLAS, cuDNN, NCCL). The reader only records what the
// text says; arithmetic and the verdict live in diagnosis.h and form_diagnosis.h.
//
// Message layouts are listed in docs/pytorch-allocator.md, "The OOM message across PyTorch
// versions".
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace vramtrace {

/// Whose allocator wrote the message: it decides which variables the advice names
/// (PYTORCH_CUDA_ALLOC_CONF, PYTORCH_HIP_ALLOC_CONF, PYTORCH_MPS_HIGH_WATERMARK_RATIO).
enum class GpuPlatform : std::uint8_t {
  cuda,  ///< NVIDIA CUDA (also the default when the text does not say)
  rocm,  ///< AMD ROCm/HIP: PyTorch prints "HIP out of memory" and names PYTORCH_HIP_ALLOC_CONF
  mps,   ///< Apple Metal (MPS): its own allocator, limited by a watermark, not by a device total
  tpu,   ///< Google TPU (XLA's runtime or compile-time check): no CUDA variable or tool applies
};

/// Stable name ("cuda", "rocm", "mps", "tpu"), used in --json. Never null.
const char* gpu_platform_name(GpuPlatform p) noexcept;

/// Which generation of message the text is.
enum class OomMessageFormat : std::uint8_t {
  unknown,           ///< no known OOM text found
  pytorch_cached,    ///< PyTorch <= 1.3: "... N free; N cached)" (cached = reserved - allocated)
  pytorch_reserved,  ///< PyTorch 1.4 to 2.0: "... N free; [N allowed; ]N reserved in total by PyTorch)"
  pytorch_sentence,  ///< PyTorch 2.1+: "GPU d has a total capacity of N of which N is free. ..."
  pytorch_exabyte,   ///< "Tried to allocate more than 1EB memory." (size sanity check)
  pytorch_async,     ///< backend:cudaMallocAsync: "Allocation on device d would exceed allowed memory."
  tensorflow_bfc,    ///< TensorFlow/XLA BFC allocator: "ran out of memory trying to allocate ..." / "Limit: ..."
  xla,               ///< XLA/JAX: "RESOURCE_EXHAUSTED: Out of memory while trying to allocate N bytes"
  cuda_error,        ///< a bare CUDA error ("CUDA error: out of memory") without figures
  pytorch_thc,       ///< PyTorch <= 0.4 (THC): "cuda runtime error (2) : out of memory at ...", no figures
  mps,               ///< PyTorch on Apple MPS: "MPS backend out of memory (MPS allocated: ..., max allowed: ...)"
  /// TensorFlow's op kernels: "OOM when allocating tensor with shape[32,512,512,64] and type float on
  /// /job:localhost/replica:0/task:0/device:GPU:0 by allocator GPU_0_bfc" (TF1 "Resource exhausted: ...",
  /// TF2 "RESOURCE_EXHAUSTED: ...", older "tensor of shape [..]"): the request is shape x dtype size.
  tensorflow_tensor,
  /// XLA's compile-time plan (TPU): "Ran out of memory in memory space hbm. Used 17.73G of 15.48G hbm.
  /// Exceeded hbm capacity by 2.25G."
  xla_memory_space,
  /// CuPy's memory pool: "Out of memory allocating N bytes (allocated so far: M bytes[, limit set to: L bytes])."
  cupy,
  /// A CUDA library's status that hides an allocation failure: CUBLAS_STATUS_ALLOC_FAILED,
  /// CUBLAS_STATUS_NOT_INITIALIZED, CUDNN_STATUS_NOT_INITIALIZED, CUDNN_STATUS_ALLOC_FAILED, cuFFT,
  /// cuSOLVER, cuSPARSE and cuRAND allocation failures, NCCL's "Cuda failure 'out of memory'".
  cuda_library,
};

/// Stable name of a format ("pytorch_sentence", ...), used in --json. Never null.
const char* oom_message_format_name(OomMessageFormat f) noexcept;
/// One line describing a format for people ("PyTorch 2.1+ sentence form"). Never null.
const char* oom_message_format_description(OomMessageFormat f) noexcept;

/// A size as printed in the message and its value in bytes. Printed sizes carry two decimals
/// ("14.58 GiB"), so `bytes` is exact only to half a unit of the last printed digit.
struct PrintedSize {
  std::uint64_t bytes = 0;
  std::string text;  ///< as it appeared, e.g. "26.39 MiB", "802160640"
};

/// A figure that the text prints but that could not be read as a size: a number without its unit
/// in a form that always prints one ("of which 1" when a wrap cut "1.23 GiB"), a value beyond
/// 2^64 bytes, a shape with a part that is not a number.
struct UnreadableFigure {
  std::string key;      ///< the figure's JSON key ("device_free_bytes", "tensor_shape")
  std::string printed;  ///< the text as it stands in the message
};

/// Another process named in a PyTorch 2.1+ message ("Process 1234 has 3.00 GiB memory in use").
struct ProcessUse {
  std::int64_t pid = 0;
  PrintedSize in_use;
};

/// Everything read from one message. Every optional is set only when the text contains the
/// figure; nothing is derived here.
struct OomMessage {
  OomMessageFormat format = OomMessageFormat::unknown;
  GpuPlatform platform = GpuPlatform::cuda;  ///< rocm when the text says HIP, mps for the MPS form
  std::optional<int> device;                 ///< "GPU 0", "device 1", "GPU_0_bfc"
  std::optional<PrintedSize> requested;      ///< "Tried to allocate" / "Requested" / "trying to allocate"
  /// The request as printed when it is there but is no size in bytes (out of range, negative):
  /// "99999999999999999999.00 GiB". Empty otherwise.
  std::string unreadable_requested;
  std::optional<PrintedSize> rounded;       ///< TensorFlow "(rounded to N)"
  std::optional<PrintedSize> device_total;  ///< "total capacity" / "Device limit"
  std::optional<PrintedSize> device_free;   ///< "free" (cudaMemGetInfo) / "There are N free"
  std::optional<PrintedSize> allocated;     ///< "already allocated" / "is allocated by PyTorch" / "Currently allocated"
  std::optional<PrintedSize> reserved;      ///< "reserved in total by PyTorch" (total reserved)
  std::optional<PrintedSize> reserved_unallocated;  ///< "cached" (<= 1.3) / "reserved by PyTorch but unallocated"
  std::optional<PrintedSize> allowed;         ///< "N allowed" / "PyTorch limit (set by user-supplied memory fraction)"
  std::optional<PrintedSize> process_in_use;  ///< "Including non-PyTorch memory, this process has N memory in use"
  std::optional<PrintedSize> private_pools;   ///< "with N allocated in private pools (e.g., CUDA Graphs)"
  std::vector<ProcessUse> other_processes;    ///< "Process P has N memory in use"
  /// MPS: "other allocations: N" (memory of this process outside the MPS allocator's heaps);
  /// the MPS allocator's own figure is `allocated` and its "max allowed" is `allowed`.
  std::optional<PrintedSize> mps_other;
  // TensorFlow BFC dump figures.
  std::string allocator_name;                         ///< "GPU_0_bfc"
  std::optional<PrintedSize> bfc_limit;               ///< "Limit:"
  std::optional<PrintedSize> bfc_in_use;              ///< "InUse:"
  std::optional<PrintedSize> bfc_max_in_use;          ///< "MaxInUse:"
  std::optional<PrintedSize> bfc_region_bytes;        ///< "total_region_allocated_bytes_:"
  std::optional<PrintedSize> bfc_largest_free_chunk;  ///< largest "Free at ... of size N" chunk
  std::optional<PrintedSize> bfc_free_chunks_bytes;   ///< sum of the "Free at" chunks
  std::uint64_t bfc_free_chunks = 0;                  ///< number of "Free at" chunk lines
  // TensorFlow op kernel form.
  std::vector<std::uint64_t> tensor_shape;  ///< the shape's dimensions, when every one was read
  std::string tensor_shape_text;            ///< the shape as printed ("[32,512,512,64]"); empty when absent
  std::string dtype;                        ///< TensorFlow's name of the element type ("float", "half")
  std::uint64_t root_errors = 0;            ///< TF2's "N root error(s) found." (0 when not printed)
  // XLA's compile-time plan.
  std::string memory_space;                      ///< "hbm", "vmem"
  std::optional<PrintedSize> space_used;         ///< "Used U": what the program needs in that space
  std::optional<PrintedSize> space_limit;        ///< "of L": the space's capacity
  std::optional<PrintedSize> space_exceeded_by;  ///< "Exceeded hbm capacity by X"
  // CuPy.
  /// "allocated so far": the bytes CuPy's pool held (in use and cached) when it refused; CuPy 8 and
  /// later print it without the request, older versions counted the request in.
  std::optional<PrintedSize> pool_allocated_so_far;
  // CUDA library statuses.
  std::string library;         ///< "cuBLAS", "cuDNN", "NCCL", ...
  std::string library_status;  ///< the status as printed ("CUBLAS_STATUS_ALLOC_FAILED")
  std::string library_call;    ///< the call that returned it, when printed ("cublasCreate(handle)")
  /// cudaMallocAsync: the "PyTorch limit" line prints 2^64 bytes ("17179869184.00 GiB"), the
  /// backend's value when no memory fraction is set.
  bool no_memory_fraction = false;

  bool exceeds_1eb = false;      ///< "Tried to allocate more than 1EB memory"
  bool capacity_typo = false;    ///< "total capacty" (PyTorch 2.1)
  bool expandable_hint = false;  ///< the hint to set expandable_segments:True (printed even when it is on)
  bool max_split_hint = false;   ///< the hint to set max_split_size_mb
  bool truncated = false;        ///< the text stops before the figures its form always has
  std::string truncated_after;   ///< the last words before the cut, when truncated
  /// The JSON keys of the figures its form always prints ("device_free_bytes", "dtype") that were
  /// not read: absent from the text (a cut message) or unreadable (also in `unreadable`).
  std::vector<std::string> missing;
  /// The figures printed but not readable as sizes, with their text.
  std::vector<UnreadableFigure> unreadable;
  /// What the reader found and what it looked for in vain, in plain sentences.
  std::vector<std::string> findings;
};

/// Reads `text`, which may be a whole traceback or log: the OOM sentence is found inside it.
/// What pasting added is removed first (unwrap_pasted_text: colour codes, line prefixes, soft line
/// breaks), then whitespace and line breaks are normalised. A form whose figures carry units (PyTorch,
/// CuPy, XLA's plan) never has a number read without its unit: such a figure is `unreadable`. Never throws on any input
/// (including empty and binary text); a text without a known form returns format == unknown with findings saying so.
/// Reads one message: for a log that may hold several, use parse_oom_messages. Thread-safe (no shared state).
OomMessage parse_oom_message(std::string_view text);

/// Reads every out-of-memory message of `text`, in order: a log of several failures (two
/// processes, a retry with a smaller batch, TF2's "2 root error(s) found") holds one "Tried to
/// allocate" (or cudaMallocAsync "would exceed allowed memory", PyTorch 0.4 "cuda runtime error
/// (2)", TensorFlow "OOM when allocating tensor", CuPy "Out of memory allocating") per message.
/// The text is cut before each message's start ("CUDA out of memory", "HIP out of memory", "MPS
/// backend out of memory", "Allocation on device", "RESOURCE_EXHAUSTED", ... just before its head),
/// and each piece is read with parse_oom_message, so that no message borrows another's figures. A
/// text with at most one such message gives one result, the same as parse_oom_message (TensorFlow
/// BFC and XLA logs included).
/// Never empty. Thread-safe.
std::vector<OomMessage> parse_oom_messages(std::string_view text);

/// Parses a printed size: "26.39 MiB", "0 bytes", "765.00MiB", "1.54G", "3.50 GB", "802160640",
/// "1,073,741,824 bytes" (CuPy's thousands separators: groups of three digits).
/// Binary units (KiB, MiB, GiB, TiB, PiB, EiB; also K/M/G/T and KB/MB/GB/TB, which these
/// frameworks print for binary multiples). Result rounded to the nearest byte. nullopt if not a
/// size or above 2^64.
std::optional<std::uint64_t> parse_printed_size(std::string_view text);

}  // namespace vramtrace
