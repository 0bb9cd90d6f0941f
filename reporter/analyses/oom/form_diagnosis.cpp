// Diagnoses decided by a message's form (form_diagnosis.h). Each function names where its form's
// meaning comes from.
#include "analyses/oom/form_diagnosis.h"
#include "analyses/oom/tensor_request.h"
#include "vramtrace/units.h"

#include <fmt/format.h>

#include <algorithm>
#include <limits>

namespace vramtrace {

namespace {

using u64 = std::uint64_t;
using i64 = std::int64_t;

std::string fb(u64 v) { return format_bytes(static_cast<i64>(v), ByteStyle::pytorch); }
std::string fbs(i64 v) { return format_bytes(v, ByteStyle::pytorch); }

// Printed figures may be any size up to 2^64 bytes: the arithmetic on them saturates rather than
// overflow.
constexpr u64 kMaxI64 = static_cast<u64>(std::numeric_limits<i64>::max());
// a + b, at most 2^64 - 1.
u64 sat_add(u64 a, u64 b) { return a > std::numeric_limits<u64>::max() - b ? std::numeric_limits<u64>::max() : a + b; }
// a - b as a signed figure, within +-(2^63 - 1).
i64 diff(u64 a, u64 b) {
  return a >= b ? static_cast<i64>(std::min(a - b, kMaxI64)) : -static_cast<i64>(std::min(b - a, kMaxI64));
}
// |x - y|, without overflow.
u64 distance(i64 x, i64 y) {
  return x >= y ? static_cast<u64>(x) - static_cast<u64>(y) : static_cast<u64>(y) - static_cast<u64>(x);
}

std::optional<u64> bytes_of(const std::optional<PrintedSize>& p) {
  if (!p) return std::nullopt;
  return p->bytes;
}

void derive(Diagnosis& d, std::string name, i64 bytes, std::string formula) {
  d.arithmetic.push_back({std::move(name), bytes, std::move(formula)});
}

constexpr const char* kPrintedNote =
    "figures printed with two decimals are exact to half a unit of the last digit; derived values carry that error";

/// How far apart two figures printed with two decimals may be and still agree (as in
/// diagnosis.cpp): half a unit of the last digit of each, at the larger figure's scale, plus 1 MiB.
u64 printed_tolerance(u64 a, u64 b) {
  const u64 m = std::max(a, b);
  const u64 half_unit = m >= (1ull << 30) ? (5ull << 20) : m >= (1ull << 20) ? (5ull << 10) : 5;
  return 2 * half_unit + (1ull << 20);
}

/// The monitoring tool, the variable that makes kernel errors synchronous and the one that picks
/// the devices, on the message's platform.
struct PlatformWords {
  const char* smi;
  const char* launch_blocking;
  const char* visible_devices;
};
PlatformWords words_of(GpuPlatform p) {
  if (p == GpuPlatform::rocm) return {"rocm-smi", "AMD_SERIALIZE_KERNEL=3", "HIP_VISIBLE_DEVICES"};
  return {"nvidia-smi", "CUDA_LAUNCH_BLOCKING=1", "CUDA_VISIBLE_DEVICES"};
}

// --- a bare CUDA error ---------------------------------------------------------------------
// PyTorch's caching allocator reports its own failures with "Tried to allocate" and the device's
// figures; "CUDA error: out of memory" is the status of some other CUDA call (C10_CUDA_CHECK), and
// CUDA reports a kernel's error at a later call ("CUDA kernel errors might be asynchronously
// reported at some other API call"). TensorFlow's and XLA's stream executor print the size they
// asked the driver for ("failed to allocate 3.71GiB (3984588800 bytes) from device").
Diagnosis diagnose_cuda_error(const OomMessage& m) {
  const PlatformWords w = words_of(m.platform);
  Diagnosis d;
  d.code = DiagnosisCode::undetermined;
  if (m.requested) {
    d.headline = fmt::format(
        "the driver could not give {} to the framework's allocator; the message prints no figures of the device",
        fb(m.requested->bytes));
    d.reasons.push_back(fmt::format("request {} (\"failed to allocate ... from device\")", fb(m.requested->bytes)));
    d.next_step = fmt::format(
        "TensorFlow and XLA print this when their allocator reserves its memory; at start-up they retry with smaller "
        "sizes, and a run of such lines that the program survives is harmless. Check what else holds the device "
        "(`{}`). TensorFlow reserves as it goes with tf.config.experimental.set_memory_growth(gpu, True) "
        "(TF_FORCE_GPU_ALLOW_GROWTH=true); JAX with XLA_PYTHON_CLIENT_PREALLOCATE=false, or less up front with "
        "XLA_PYTHON_CLIENT_MEM_FRACTION.",
        w.smi);
    return d;
  }
  d.headline =
      "CUDA reported out of memory for a call outside the caching allocator's own check, without figures: the "
      "request and the device's state are unknown";
  d.reasons.push_back(
      "\"CUDA error: out of memory\" is the status of a CUDA call, not the caching allocator's message (which "
      "prints \"Tried to allocate\" and the device's figures)");
  d.next_step = fmt::format(
      "Find which of these it is. (1) An earlier asynchronous error reported at a later call: rerun with {} so that "
      "the call that fails raises where it happens. (2) Memory allocated outside the caching allocator: cuBLAS and "
      "cuDNN handles and workspaces, NCCL buffers, the CUDA context, other libraries or a second framework in the "
      "process; the traceback's last frame names the call. (3) Other processes on the GPU: `{}` lists them and "
      "their memory. (4) A CUDA context created on a GPU that is already full: the first CUDA call of a process, or "
      "of a new device, fails this way; check `{}` before the program starts, and {} if it runs on another GPU than "
      "intended. torch.cuda.memory_allocated() and memory_reserved() just before the failing call show how much "
      "PyTorch itself held.",
      w.launch_blocking, w.smi, w.smi, w.visible_devices);
  return d;
}

// --- a CUDA library's status ----------------------------------------------------------------
// cuBLAS, cuDNN, cuFFT, cuSOLVER, cuSPARSE and cuRAND allocate their handles and workspaces with
// the CUDA runtime, outside PyTorch's caching allocator, so their allocation failures carry their
// own status. CUBLAS_STATUS_NOT_INITIALIZED ("usually caused by ... an error in the CUDA Runtime
// API called by the cuBLAS routine", cuBLAS documentation), CUDNN_STATUS_NOT_INITIALIZED and
// TensorFlow's "Could not create cudnn handle: CUDNN_STATUS_INTERNAL_ERROR" come from a handle
// that could not get its memory, or from a driver and library that do not match. NCCL allocates its
// buffers the same way and logs "Cuda failure 'out of memory'".
Diagnosis diagnose_cuda_library(const OomMessage& m) {
  const PlatformWords w = words_of(m.platform);
  const bool alloc = m.library_status.find("ALLOC") != std::string::npos || m.library == "NCCL";
  const std::string call = m.library_call.empty() ? "" : fmt::format(" (in {})", m.library_call);
  Diagnosis d;
  d.code = DiagnosisCode::outside_allocator;
  if (m.library == "NCCL") {
    d.headline = "NCCL could not allocate its buffers: device memory outside PyTorch's caching allocator ran out";
  } else if (alloc) {
    d.headline = fmt::format(
        "{} could not allocate its memory{}: an allocation outside PyTorch's caching allocator failed for lack of "
        "device memory",
        m.library, call);
  } else {
    d.headline = fmt::format(
        "{} failed to initialise{}: most often its handle could not get device memory outside PyTorch's caching "
        "allocator; a driver and library version mismatch gives the same status",
        m.library, call);
  }
  d.reasons.push_back(fmt::format(
      "{} is {}'s status, not an allocator's out-of-memory message: {} allocates that memory itself, outside the "
      "caching allocator, so no allocator figures exist for it",
      m.library_status, m.library, m.library));
  if (!alloc)
    d.reasons.push_back(
        fmt::format("{} also comes from a driver, CUDA and {} that do not match, so the memory is the likely cause, "
                    "not a proven one",
                    m.library_status, m.library));
  std::string step = fmt::format(
      "Check what holds the device: `{}` for other processes and a second framework; PyTorch's own cache may hold "
      "it: call torch.cuda.empty_cache() before the first {} call, cap the cache so that room is left "
      "(torch.cuda.set_per_process_memory_fraction), or use a smaller batch. TensorFlow takes nearly all memory up "
      "front (tf.config.experimental.set_memory_growth(gpu, True) leaves room), JAX 75% "
      "(XLA_PYTHON_CLIENT_PREALLOCATE=false).",
      w.smi, m.library);
  if (m.library == "cuBLAS")
    step +=
        " cuBLAS's workspace size is set by CUBLAS_WORKSPACE_CONFIG (:4096:8 is the default on recent GPUs; :16:8 "
        "is smaller).";
  if (m.library == "NCCL") step += " NCCL's buffers are smaller with a lower NCCL_BUFFSIZE.";
  if (!alloc)
    step +=
        " If memory is not short, check that the versions match: the driver's CUDA version (nvidia-smi) against "
        "torch.version.cuda, and torch.backends.cudnn.version() against the cuDNN the framework was built with.";
  step += fmt::format(
      " If nothing is short, an earlier kernel error reported late shows up at the next library call (an "
      "out-of-range index into an embedding often does): rerun with {}.",
      w.launch_blocking);
  d.next_step = std::move(step);
  return d;
}

// --- CuPy's memory pool -----------------------------------------------------------------------
// cupy/cuda/memory.pyx: with a limit (set_limit, CUPY_GPU_MEMORY_LIMIT) the pool refuses when what
// it holds, cached free blocks included, plus the request passes the limit, before releasing
// anything; without one it releases its cached blocks (free_all_blocks), collects garbage and
// retries, and raises when the device still cannot give the request.
void diagnose_cupy_limit(u64 R, std::optional<u64> held, u64 limit, Diagnosis& d) {
  if (R > limit) {
    d.code = DiagnosisCode::exceeds_device;
    d.headline = "the request alone is larger than the CuPy pool's limit";
    d.reasons.push_back(fmt::format("request {} > limit {}", fb(R), fb(limit)));
    d.next_step =
        "Raise the limit (cupy.get_default_memory_pool().set_limit(size=...), CUPY_GPU_MEMORY_LIMIT) or make this "
        "array smaller.";
    return;
  }
  if (held && sat_add(*held, R) <= limit) {
    d.code = DiagnosisCode::inconsistent;
    d.headline = "the pool's figures stay within its limit, so they are not the ones that refused the request";
    d.reasons.push_back(fmt::format("allocated so far + request = {} <= limit {}", fb(sat_add(*held, R)), fb(limit)));
    d.next_step = "Paste the message as CuPy printed it.";
    return;
  }
  d.code = DiagnosisCode::capacity;
  d.headline = "the CuPy pool's limit is used up: what the pool holds plus the request passes it";
  if (held)
    d.reasons.push_back(fmt::format("allocated so far + request = {} > limit {}", fb(sat_add(*held, R)), fb(limit)));
  d.next_step =
      "CuPy checks its limit against all the memory its pool holds, its cached free blocks included, before it "
      "releases any: cupy.get_default_memory_pool().free_all_blocks() returns the cached blocks to the device. Or "
      "raise the limit (set_limit, CUPY_GPU_MEMORY_LIMIT), or need less memory (smaller arrays, fewer kept alive).";
}

Diagnosis diagnose_cupy(const OomMessage& m) {
  Diagnosis d;
  if (!m.requested) {
    d.code = DiagnosisCode::undetermined;
    d.headline = "the request size is not in the input, so no verdict is possible";
    d.next_step = "Paste the whole message: the size follows \"Out of memory allocating\".";
    return d;
  }
  const u64 R = m.requested->bytes;
  const std::optional<u64> held = bytes_of(m.pool_allocated_so_far);
  if (held) {
    const u64 with = sat_add(*held, R);
    derive(d, "pool_with_request", static_cast<i64>(std::min(with, kMaxI64)),
           fmt::format("the pool with this request = allocated so far + request = {} + {} = {}", fb(*held), fb(R),
                       fb(with)));
    d.notes.push_back(
        "\"allocated so far\" is what CuPy's pool held, in use and cached, before this request in recent CuPy; older "
        "versions counted the request in");
  }
  if (m.allowed) {
    diagnose_cupy_limit(R, held, m.allowed->bytes, d);
    return d;
  }
  d.code = DiagnosisCode::undetermined;
  d.headline = fmt::format(
      "the device could not give CuPy's pool {} after the pool released its cached blocks; the message prints "
      "neither the device's size nor its free memory",
      fb(R));
  d.reasons.push_back("CuPy releases its cached free blocks and retries before it raises this error");
  if (held) d.reasons.push_back(fmt::format("CuPy's pool held {} (allocated so far)", fb(*held)));
  d.next_step =
      "Compare what the pool held (allocated so far) with the card's memory: `nvidia-smi` shows the total and what "
      "other processes hold. Memory of this process outside CuPy's pool (PyTorch's cache: torch.cuda.empty_cache(); "
      "another framework) is not in these figures. cupy.get_default_memory_pool().used_bytes() and total_bytes() "
      "before the failing call show how close it was.";
  return d;
}

// --- XLA's compile-time plan -------------------------------------------------------------------
// openxla.org, error code E1000 ("Compile Time: HBM OOM"): XLA checks that the program's static
// allocations (inputs and outputs, temporaries at the peak, the compiled binary, reserved space)
// fit the device's HBM; "Used U of C hbm" is the program's need against the capacity.
Diagnosis diagnose_xla_memory_space(const OomMessage& m) {
  Diagnosis d;
  const std::string space = m.memory_space.empty() ? "memory" : m.memory_space;
  if (!m.space_used || !m.space_limit) {
    d.code = DiagnosisCode::undetermined;
    d.headline = "the message does not print both what the program needs and the memory's capacity";
    d.next_step = fmt::format("Paste the whole message: \"Used U of C {}\" follows \"Ran out of memory\".", space);
    return d;
  }
  const u64 U = m.space_used->bytes, C = m.space_limit->bytes;
  const i64 over = diff(U, C);
  derive(d, "exceeded_by", over, fmt::format("over = used - capacity = {} - {} = {}", fb(U), fb(C), fbs(over)));
  const u64 tol = printed_tolerance(U, C);
  if (m.space_exceeded_by) {
    const i64 printed = static_cast<i64>(std::min(m.space_exceeded_by->bytes, kMaxI64));
    if (distance(printed, over) > tol) {
      // The message contradicts itself: no verdict from figures that do not agree.
      d.code = DiagnosisCode::inconsistent;
      d.headline = fmt::format("the figures contradict each other: the printed overshoot {} is not used - capacity {}",
                               m.space_exceeded_by->text, fbs(over));
      d.reasons.push_back(fmt::format("printed overshoot {} != used {} - capacity {} = {}, beyond rounding",
                                      m.space_exceeded_by->text, fb(U), fb(C), fbs(over)));
      d.next_step = "Paste the message again from its source: the figures were changed or mixed with another's.";
      return d;
    }
  }
  d.code = DiagnosisCode::capacity;
  d.headline =
      fmt::format("the compiled program needs more {} than the device has: {} of {}, over by {}", space,
                  m.space_used->text, m.space_limit->text, m.space_exceeded_by ? m.space_exceeded_by->text : fbs(over));
  d.reasons.push_back(fmt::format("used {} > capacity {}", fb(U), fb(C)));
  if (space == "hbm") {
    d.next_step =
        "XLA decides this when it compiles the program, before it runs: the program as a whole (inputs, outputs, "
        "weights, optimizer state and the temporaries at its peak) does not fit, so no allocator setting helps. Look "
        "in the log after the message for the largest allocations: one far larger than expected (more than half the "
        "memory) is usually a tensor replicated on every chip by a missing sharding annotation, or a leftover "
        "jax.debug.print. Otherwise reduce the batch per chip, rematerialise activations (jax.checkpoint), donate "
        "input buffers (donate_argnums), use bfloat16, or shard over more chips (openxla.org, error code E1000).";
  } else {
    d.next_step = fmt::format(
        "A kernel needs more of the memory space {} than the chip has: smaller blocks (a Pallas kernel's block "
        "shapes), or a larger limit for the kernel where the chip allows it (vmem_limit_bytes for VMEM).",
        space);
  }
  d.notes.push_back(kPrintedNote);
  return d;
}

// --- PyTorch's cudaMallocAsync backend -------------------------------------------------------
// c10/cuda/CUDAMallocAsyncAllocator.cpp, mallocAsync: the backend refuses when what PyTorch has
// allocated plus the request passes the memory fraction's limit (checked before CUDA is asked),
// or when cudaMallocAsync itself fails; "Currently allocated" counts live allocations only, and
// the pool keeps freed memory cached (its release threshold is UINT64_MAX).

// The memory fraction's limit: true when it decides.
bool async_limit_decides(u64 R, std::optional<u64> A, u64 L, Diagnosis& d) {
  if (R > L) {
    d.code = DiagnosisCode::exceeds_device;
    d.headline = "the request alone is larger than PyTorch's limit (the memory fraction)";
    d.reasons.push_back(fmt::format("request {} > PyTorch limit {}", fb(R), fb(L)));
    d.next_step = "Raise the fraction (torch.cuda.set_per_process_memory_fraction) or make this tensor smaller.";
    return true;
  }
  if (!A) return false;
  const i64 head = diff(L, *A);
  derive(d, "limit_headroom", head,
         fmt::format("headroom under the PyTorch limit = limit - allocated = {} - {} = {}", fb(L), fb(*A), fbs(head)));
  if (head >= 0 && static_cast<u64>(head) >= R) return false;
  d.code = DiagnosisCode::capacity;
  d.headline = "the memory fraction's limit is used up: allocated + request passes PyTorch's limit";
  d.reasons.push_back(
      fmt::format("headroom {} < request {} (the backend checks this before it asks CUDA)", fbs(head), fb(R)));
  d.next_step =
      "Raise the fraction (torch.cuda.set_per_process_memory_fraction) or need less memory: smaller batch, mixed "
      "precision, activation checkpointing.";
  return true;
}

// What the device's figures say when the limit does not decide.
void async_device(const OomMessage& m, u64 R, u64 F, Diagnosis& d) {
  const PlatformWords w = words_of(m.platform);
  if (F >= R + kDeviceSlackBytes) {
    d.code = DiagnosisCode::unexplained;
    d.headline = "the device had room for the request, so the figures do not explain the failure";
    d.reasons.push_back(
        fmt::format("free on the device {} >= request {} + {} slack", fb(F), fb(R), fb(kDeviceSlackBytes)));
    d.next_step = fmt::format(
        "Check for another process allocating at the same moment (watch `{}`), a limit the figures do not show "
        "(MIG slice, container), or a different CUDA error reported as out of memory (rerun with {}).",
        w.smi, w.launch_blocking);
    return;
  }
  d.code = DiagnosisCode::capacity;
  d.headline = "the device had less free memory than the request: not enough of what it had left";
  d.reasons.push_back(fmt::format("request {} > free on the device {}{}", fb(R), fb(F),
                                  R > F ? "" : fmt::format(" - {} slack", fb(kDeviceSlackBytes))));
  d.next_step = fmt::format(
      "Need less memory: smaller batch, resolution or sequence length, mixed precision, activation checkpointing, "
      "CPU offload; or a device with more memory. The cudaMallocAsync pool keeps freed memory cached: "
      "torch.cuda.empty_cache() returns it to the device between phases, and `{}` shows whether other processes "
      "hold memory.",
      w.smi);
}

// The device's memory that is neither free nor allocated by PyTorch.
void async_outside(const OomMessage& m, Diagnosis& d) {
  if (!m.device_total || !m.device_free || !m.allocated) return;
  const u64 T = m.device_total->bytes, F = m.device_free->bytes, A = m.allocated->bytes;
  const i64 other = diff(T, sat_add(F, A));
  derive(
      d, "not_free_not_allocated", other,
      fmt::format("on the device but neither free nor allocated by PyTorch = total - free - allocated = {} - {} - {} "
                  "= {}",
                  fb(T), fb(F), fb(A), fbs(other)));
  if (other < -static_cast<i64>(printed_tolerance(T, A))) {
    d.reasons.push_back(fmt::format(
        "allocated {} + free {} > device total {}: part of what PyTorch counts as allocated is not in the device's "
        "memory (the Windows driver's fallback to system memory is one way), and the device itself was full",
        fb(A), fb(F), fb(T)));
  } else if (other > static_cast<i64>(kContextAllowanceBytes)) {
    d.reasons.push_back(fmt::format(
        "{} of the device is neither free nor allocated by PyTorch (more than the {} a CUDA context takes): the "
        "pool's cached free memory, other libraries and other processes",
        fbs(other), fb(kContextAllowanceBytes)));
  }
}

Diagnosis diagnose_async(const OomMessage& m) {
  Diagnosis d;
  if (!m.requested) {
    d.code = DiagnosisCode::undetermined;
    d.headline = "the request size is not in the input, so no verdict is possible";
    d.next_step = "Paste the whole message: the figures are on the lines after \"would exceed allowed memory\".";
    return d;
  }
  const u64 R = m.requested->bytes;
  if (m.no_memory_fraction)
    d.notes.push_back("no memory fraction is set (the PyTorch limit prints 2^64 bytes): only the device limits it");
  if (m.allowed && async_limit_decides(R, bytes_of(m.allocated), m.allowed->bytes, d)) {
    d.notes.push_back(kPrintedNote);
    return d;
  }
  if (m.device_total && R > m.device_total->bytes) {
    d.code = DiagnosisCode::exceeds_device;
    d.headline = "the request alone is larger than the device";
    d.reasons.push_back(fmt::format("request {} > device total {}", fb(R), fb(m.device_total->bytes)));
    d.next_step = "No setting helps. Make this one tensor smaller, shard it across devices, or check its shape.";
    return d;
  }
  async_outside(m, d);
  if (!m.device_free) {
    d.code = DiagnosisCode::undetermined;
    d.headline = "the input does not say how much memory the device had free";
    d.next_step = "Paste the whole message: \"Free (according to CUDA)\" is one of its lines.";
    return d;
  }
  async_device(m, R, m.device_free->bytes, d);
  d.notes.push_back(kPrintedNote);
  return d;
}

// --- a TensorFlow tensor whose size cannot be computed -----------------------------------------
std::optional<Diagnosis> diagnose_tf_tensor(const OomMessage& m) {
  if (m.requested || m.rounded || m.tensor_shape_text.empty()) return std::nullopt;
  const bool shape_read = std::none_of(m.unreadable.begin(), m.unreadable.end(),
                                       [](const UnreadableFigure& u) { return u.key == "tensor_shape"; });
  const auto element = tf_dtype_bytes(m.dtype);
  if (shape_read && element && tensor_bytes(m.tensor_shape, *element)) return std::nullopt;  // diagnose() computes it
  Diagnosis d;
  d.code = DiagnosisCode::undetermined;
  if (!shape_read) {
    d.headline = fmt::format("the tensor's shape \"{}\" is not a list of whole numbers, so its size cannot be computed",
                             m.tensor_shape_text);
  } else if (m.dtype.empty()) {
    d.headline = fmt::format("the message names the tensor's shape {} but not its type, so its size cannot be computed",
                             m.tensor_shape_text);
  } else if (!element) {
    d.headline = fmt::format(
        "the tensor's type \"{}\" has no fixed size, or is not one vramtrace knows, so its size cannot be computed "
        "from the shape {}",
        m.dtype, m.tensor_shape_text);
  } else {
    d.code = DiagnosisCode::exceeds_device;
    d.headline = fmt::format("the tensor {} of {} would take 2^64 bytes or more: no device has that much memory",
                             m.tensor_shape_text, m.dtype);
    d.next_step = "Look for a wrong shape: a dimension computed from a wrong value, or an unintended broadcast.";
    return d;
  }
  d.next_step =
      "Paste the allocator's lines printed with it as well (\"ran out of memory trying to allocate\", \"Limit:\", "
      "\"InUse:\"): they print the size and the allocator's state.";
  return d;
}

}  // namespace

std::optional<Diagnosis> diagnose_form(const OomMessage& m) {
  switch (m.format) {
    case OomMessageFormat::cuda_error:
      return diagnose_cuda_error(m);
    case OomMessageFormat::cuda_library:
      return diagnose_cuda_library(m);
    case OomMessageFormat::cupy:
      return diagnose_cupy(m);
    case OomMessageFormat::xla_memory_space:
      return diagnose_xla_memory_space(m);
    case OomMessageFormat::pytorch_async:
      return diagnose_async(m);
    case OomMessageFormat::tensorflow_tensor:
    case OomMessageFormat::tensorflow_bfc:
      return diagnose_tf_tensor(m);
    default:
      return std::nullopt;
  }
}

}  // namespace vramtrace
