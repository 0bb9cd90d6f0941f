// Diagnosis of an OOM from its figures. The rules, in the order applied (diagnosis_rule_order();
// docs/reports.md, "Diagnosis codes", lists them in the same order and a test compares the two):
//  1. inconsistent: the figures contradict each other (reserved or allocated above the device
//     total, allocated above reserved, reserved + free above the total, beyond the rounding of
//     printed figures). Such figures come from two moments or two devices; no verdict is drawn.
//  2. exceeds_device: request > device total (or > the cap).
//  3. unexplained: the device (and the cap) had more than the new segment + slack free, so the
//     allocator could have obtained it; the failure has another cause.
//  4. outside_allocator: more memory sits outside the allocator than inside it (and no cap
//     binds), and more than a CUDA context takes; when it is no more than a context, the device
//     is simply small: capacity (case M1).
//  5. fragmentation: free in the cache + free on the device >= request (the memory exists, no
//     block is large enough). A trace also gives the largest free block, which must be < request.
//  6. outside_allocator: freeing the memory outside the allocator beyond a context's allowance
//     would make the request fit.
//  7. capacity: otherwise.
// undetermined is what a rule gives when a figure it needs is missing.
#include "analyses/oom/diagnosis.h"
#include "analyses/oom/tensor_request.h"
#include "vramtrace/size_rules.h"
#include "vramtrace/units.h"

#include <fmt/format.h>
#include <algorithm>
#include <cinttypes>

namespace vramtrace {

namespace {

using u64 = std::uint64_t;
using i64 = std::int64_t;

std::string fb(u64 v) { return format_bytes(static_cast<i64>(v), ByteStyle::pytorch); }

/// The words of the advice on each platform: the settings variable, the visible-devices variable,
/// the launch-blocking variable and the monitoring tool.
struct PlatformWords {
  const char* alloc_conf;
  const char* visible_devices;
  const char* launch_blocking;
  const char* smi;
};
PlatformWords words_of(GpuPlatform p) {
  if (p == GpuPlatform::rocm)
    return {"PYTORCH_HIP_ALLOC_CONF", "HIP_VISIBLE_DEVICES", "AMD_SERIALIZE_KERNEL=3", "rocm-smi"};
  return {"PYTORCH_CUDA_ALLOC_CONF", "CUDA_VISIBLE_DEVICES", "CUDA_LAUNCH_BLOCKING=1", "nvidia-smi"};
}

/// How far apart two printed figures may be and still agree: each carries half a unit of its last
/// digit (5 MiB for a figure in GiB), and the larger figure's scale decides. Exact figures (a
/// trace) get 0.
u64 printed_tolerance(const OomFigures& f, u64 a, u64 b) {
  if (!f.printed) return 0;
  u64 m = std::max(a, b);
  u64 half_unit = m >= (1ull << 30) ? (5ull << 20) : m >= (1ull << 20) ? (5ull << 10) : 5;
  return 2 * half_unit + (1ull << 20);
}

}  // namespace

const std::vector<DiagnosisCode>& diagnosis_rule_order() {
  static const std::vector<DiagnosisCode> order = {
      DiagnosisCode::inconsistent,      DiagnosisCode::exceeds_device, DiagnosisCode::unexplained,
      DiagnosisCode::outside_allocator, DiagnosisCode::fragmentation,  DiagnosisCode::outside_allocator,
      DiagnosisCode::capacity,
  };
  return order;
}

const char* alloc_conf_variable(GpuPlatform p) noexcept {
  switch (p) {
    case GpuPlatform::rocm:
      return "PYTORCH_HIP_ALLOC_CONF";
    case GpuPlatform::mps:
      return "PYTORCH_MPS_HIGH_WATERMARK_RATIO";
    case GpuPlatform::cuda:
    case GpuPlatform::tpu:  // no allocator setting applies; callers do not advise one for XLA's forms
      break;
  }
  return "PYTORCH_CUDA_ALLOC_CONF";
}

const char* diagnosis_code_name(DiagnosisCode c) noexcept {
  switch (c) {
    case DiagnosisCode::inconsistent:
      return "inconsistent";
    case DiagnosisCode::exceeds_device:
      return "exceeds_device";
    case DiagnosisCode::unexplained:
      return "unexplained";
    case DiagnosisCode::fragmentation:
      return "fragmentation";
    case DiagnosisCode::outside_allocator:
      return "outside_allocator";
    case DiagnosisCode::capacity:
      return "capacity";
    case DiagnosisCode::undetermined:
      return "undetermined";
  }
  return "undetermined";
}

namespace {

// TensorFlow's op kernel names the tensor, not its size: elements x the type's size.
void request_from_tensor(const OomMessage& m, OomFigures& f) {
  const bool shape_read =
      !m.tensor_shape_text.empty() && std::none_of(m.unreadable.begin(), m.unreadable.end(),
                                                   [](const UnreadableFigure& u) { return u.key == "tensor_shape"; });
  if (!shape_read) return;
  const auto element = tf_dtype_bytes(m.dtype);
  if (!element) return;
  const auto bytes = tensor_bytes(m.tensor_shape, *element);
  if (!bytes) return;
  std::string dims;
  for (std::size_t i = 0; i < m.tensor_shape.size(); ++i) dims += (i ? " x " : "") + std::to_string(m.tensor_shape[i]);
  f.request = *bytes;
  f.request_formula = fmt::format("request = shape {} x {} bytes ({}) = {}{} bytes = {}", m.tensor_shape_text, *element,
                                  m.dtype, dims.empty() ? "" : dims + " x ", *element, fb(*bytes));
}

}  // namespace

OomFigures figures_from_message(const OomMessage& m) {
  OomFigures f;
  auto get = [](const std::optional<PrintedSize>& p) -> std::optional<u64> {
    if (!p) return std::nullopt;
    return p->bytes;
  };
  f.exceeds_1eb = m.exceeds_1eb;
  f.unreadable_request = m.unreadable_requested;
  f.platform = m.platform;
  f.printed = true;
  if (m.format == OomMessageFormat::mps) {
    f.request = get(m.requested);
    f.allocated = get(m.allocated);
    f.mps_other = get(m.mps_other);
    f.allowed = get(m.allowed);
    f.allowed_name = "max allowed";
    return f;
  }
  if (m.format == OomMessageFormat::tensorflow_bfc || m.format == OomMessageFormat::tensorflow_tensor ||
      (m.format == OomMessageFormat::xla && m.bfc_limit)) {
    f.bfc = true;
    f.request = m.rounded ? get(m.rounded) : get(m.requested);
    if (!f.request) request_from_tensor(m, f);
    f.allowed = get(m.bfc_limit);
    f.allocated = get(m.bfc_in_use);
    f.largest_free_block = get(m.bfc_largest_free_chunk);
    return f;
  }
  f.request = get(m.requested);
  // The native allocator's "Tried to allocate" is the segment it asked the device for, never less
  // than a 2 MiB small-pool segment; a smaller figure (a hand-edited or foreign message) still
  // needs such a segment from the device.
  const bool native = m.format == OomMessageFormat::pytorch_cached || m.format == OomMessageFormat::pytorch_reserved ||
                      m.format == OomMessageFormat::pytorch_sentence;
  if (native && f.request && *f.request < kSmallBuffer) f.device_request = kSmallBuffer;
  f.device_total = get(m.device_total);
  f.device_free = get(m.device_free);
  f.allocated = get(m.allocated);
  f.reserved = get(m.reserved);
  f.reserved_unallocated = get(m.reserved_unallocated);
  f.allowed = get(m.allowed);
  f.process_in_use = get(m.process_in_use);
  f.private_pools = get(m.private_pools);
  if (!m.other_processes.empty()) {
    u64 sum = 0;
    for (const auto& p : m.other_processes) sum += p.in_use.bytes;
    f.other_processes = sum;
  }
  if (m.format == OomMessageFormat::xla && m.device_free) {
    // "There are N free": free inside XLA's allocator, which holds (nearly) the whole device.
    f.bfc = true;
    f.device_free.reset();
    f.reserved_unallocated = get(m.device_free);
  }
  return f;
}

namespace {

constexpr const char* kPrintedNote =
    "figures printed with two decimals are exact to half a unit of the last digit; derived values carry that error";

void derive(Diagnosis& d, std::string name, i64 bytes, std::string formula) {
  d.arithmetic.push_back({std::move(name), bytes, std::move(formula)});
}

// --- request and the exabyte check --------------------------------------------------------

// exceeds_device before any figure: PyTorch's own size check refused the request.
bool rule_exceeds_1eb(const OomFigures& f, Diagnosis& d) {
  if (!f.exceeds_1eb) return false;
  d.code = DiagnosisCode::exceeds_device;
  d.headline = "the request is more than 1 EiB: no device has that much memory";
  d.reasons.push_back("PyTorch refuses sizes above 1 EiB before asking the device");
  d.next_step =
      "Look for a wrong shape: a size computed from an uninitialised or negative value, or an "
      "unintended broadcast (e.g. [N,1] * [1,N]).";
  return true;
}

bool undetermined_without_request(const OomFigures& f, Diagnosis& d) {
  if (f.request) return false;
  d.code = DiagnosisCode::undetermined;
  if (!f.unreadable_request.empty()) {
    d.headline = fmt::format(
        "the request size \"{}\" is in the input but could not be read (out of range, negative or without its "
        "unit), so no verdict is possible",
        f.unreadable_request);
    d.next_step =
        "Check that the message was copied whole and unchanged. Or record a trace (vramtrace run) and use "
        "`vramtrace oom`.";
    return true;
  }
  d.headline = "the request size is not in the input, so no verdict is possible";
  d.next_step =
      "Paste the whole message: the figures follow \"Tried to allocate\" on the same line. Or record a "
      "trace (vramtrace run) and use `vramtrace oom`.";
  return true;
}

// How to raise the cap that binds, in the words of whoever set it: PyTorch's memory fraction
// (its message prints "allowed"), the shim's `limit`, or the --capacity the user gave.
std::string raise_the_cap(const OomFigures& f) {
  const std::string& who = f.allowed_name;
  if (who == "--capacity") return "Give a larger --capacity (the cap is the one you asked for),";
  if (who.find("--limit") != std::string::npos) return "Raise the cap (vramtrace run --limit),";
  if (who.find("PyTorch") != std::string::npos || who == "max allowed" || who == "allowed")
    return "Raise the cap, PyTorch's memory fraction (torch.cuda.set_per_process_memory_fraction),";
  return "Raise the cap (whatever set it: PyTorch's memory fraction, vramtrace run --limit, a container),";
}

// --- 1. inconsistent -----------------------------------------------------------------------
// Figures that cannot describe one moment of one device: each check allows for the rounding of
// printed figures (printed_tolerance). A message pasted from two failures, edited by hand, or from
// a tool that misreports the device gives such figures; a verdict drawn from them would be a guess.
bool rule_inconsistent(const OomFigures& f, Diagnosis& d) {
  std::vector<std::string> found;
  auto above = [&](std::optional<u64> a, const char* an, std::optional<u64> b, const char* bn) {
    if (a && b && *a > *b + printed_tolerance(f, *a, *b))
      found.push_back(fmt::format("{} {} > {} {}", an, fb(*a), bn, fb(*b)));
  };
  std::optional<u64> reserved = f.reserved;
  if (!reserved && f.allocated && f.reserved_unallocated) reserved = *f.allocated + *f.reserved_unallocated;
  above(reserved, "reserved", f.device_total, "device total");
  above(f.allocated, "allocated", f.device_total, "device total");
  above(f.device_free, "free on the device", f.device_total, "device total");
  above(f.process_in_use, "in use by this process", f.device_total, "device total");
  if (f.reserved) above(f.allocated, "allocated", f.reserved, "reserved");
  if (reserved && f.device_free && f.device_total && *reserved <= *f.device_total)
    above(*reserved + *f.device_free, "reserved + free on the device", f.device_total, "device total");
  if (found.empty()) return false;
  d.code = DiagnosisCode::inconsistent;
  d.headline = "the figures contradict each other, so they cannot describe one moment of one device";
  for (auto& r : found) d.reasons.push_back(std::move(r));
  d.next_step =
      "Paste one whole message as PyTorch printed it (a log with several failures: each message separately). If it "
      "is one unedited message, the device's figures were misreported (a virtualised or shared GPU, a driver that "
      "reports another device's total): record a trace with `vramtrace run` and use `vramtrace oom`.";
  return true;
}

// --- Apple MPS: the watermark limit is the device ---------------------------------------------
// The MPS allocator refuses a buffer when what it holds plus the process's other allocations plus
// the request would pass its high watermark ("max allowed": PYTORCH_MPS_HIGH_WATERMARK_RATIO times
// the device's recommended working set, 1.7 by default in aten/src/ATen/mps/MPSAllocator.h).
void diagnose_mps(const OomFigures& f, u64 R, Diagnosis& d) {
  const char* ratio = "PYTORCH_MPS_HIGH_WATERMARK_RATIO";
  if (f.allowed && R > *f.allowed) {
    d.code = DiagnosisCode::exceeds_device;
    d.headline = "the request alone is larger than the MPS allocator's limit";
    d.reasons.push_back(fmt::format("request {} > max allowed {}", fb(R), fb(*f.allowed)));
    d.next_step = "Make this one tensor smaller (batch, sequence length, image size), or check its shape for a bug.";
    return;
  }
  if (!f.allowed || !f.allocated) {
    d.code = DiagnosisCode::undetermined;
    d.headline = "the message lacks the MPS allocator's figures (MPS allocated, max allowed)";
    d.next_step = "Paste the whole message: the figures are in the parentheses after \"MPS backend out of memory\".";
    return;
  }
  const u64 other = f.mps_other.value_or(0);
  const u64 used = *f.allocated + other;
  derive(
      d, "mps_in_use", static_cast<i64>(used),
      fmt::format("in use = MPS allocated + other allocations = {} + {} = {}", fb(*f.allocated), fb(other), fb(used)));
  const i64 head = static_cast<i64>(*f.allowed) - static_cast<i64>(used);
  derive(d, "limit_headroom", head,
         fmt::format("headroom under the limit = max allowed - in use = {} - {} = {}", fb(*f.allowed), fb(used),
                     format_bytes(head, ByteStyle::pytorch)));
  const u64 tol = printed_tolerance(f, *f.allowed, used);
  if (head < static_cast<i64>(R + tol)) {
    d.code = DiagnosisCode::capacity;
    d.headline = "the MPS allocator's limit (its high watermark) is used up";
    d.reasons.push_back(fmt::format("headroom {} < request {}{}", format_bytes(head, ByteStyle::pytorch), fb(R),
                                    tol ? fmt::format(" + {} for the rounding of printed figures", fb(tol)) : ""));
    if (other > *f.allocated)
      d.reasons.push_back(
          fmt::format("other allocations {} > MPS allocated {}: most of the memory is held outside "
                      "the MPS allocator's heaps",
                      fb(other), fb(*f.allocated)));
    d.next_step = fmt::format(
        "Need less memory: smaller batch or sequence length, float16/bfloat16, activation checkpointing. "
        "torch.mps.empty_cache() returns the allocator's cached buffers between phases. The limit itself is {} "
        "(1.7 by default: a multiple of the device's recommended working set); a higher ratio, or 0.0 for none, "
        "lets the process use more of the unified memory at the risk of swapping or, as the message says, system "
        "failure.",
        ratio);
    return;
  }
  d.code = DiagnosisCode::unexplained;
  d.headline = "the figures leave room under the MPS limit, so the limit does not explain the failure";
  d.reasons.push_back(fmt::format("headroom {} >= request {} + {} for rounding", format_bytes(head, ByteStyle::pytorch),
                                  fb(R), fb(tol)));
  d.next_step =
      "The system could not give the buffer: other applications hold the unified memory (Activity Monitor, memory "
      "pressure), or the request needs one Metal buffer larger than the device allows. Close other applications, "
      "or make the tensor smaller.";
}

// --- TensorFlow BFC: the allocator's limit is its device ----------------------------------
void diagnose_bfc(const OomFigures& f, u64 R, Diagnosis& d) {
  if (f.allowed && R > *f.allowed) {
    d.code = DiagnosisCode::exceeds_device;
    d.headline = "the request alone is larger than the allocator's memory limit";
    d.reasons.push_back(fmt::format("request {} > Limit {}", fb(R), fb(*f.allowed)));
    d.next_step = "Reduce the size of this one tensor (batch, sequence length, image size) or shard it across devices.";
    return;
  }
  std::optional<u64> free_in_limit = f.reserved_unallocated;
  if (f.allowed && f.allocated) {
    i64 v = static_cast<i64>(*f.allowed) - static_cast<i64>(*f.allocated);
    derive(d, "free_within_limit", v,
           fmt::format("free within the limit = Limit - InUse = {} - {} = {}", fb(*f.allowed), fb(*f.allocated),
                       format_bytes(v, ByteStyle::pytorch)));
    free_in_limit = v > 0 ? static_cast<u64>(v) : 0;
  }
  if (!free_in_limit) {
    d.code = DiagnosisCode::undetermined;
    d.headline = "the message gives the request but not the allocator's limit and use";
    d.next_step =
        "Paste the allocator dump printed with the message (the lines \"Limit:\", \"InUse:\" and the chunk "
        "list), or run with TF_GPU_ALLOCATOR=cuda_malloc_async to see the device's own figures.";
    return;
  }
  if (*free_in_limit >= R) {
    d.code = DiagnosisCode::fragmentation;
    d.headline = "enough memory is free inside the allocator's limit, but no free chunk is large enough";
    d.reasons.push_back(fmt::format("free within the limit {} >= request {}", fb(*free_in_limit), fb(R)));
    if (f.largest_free_block)
      d.reasons.push_back(fmt::format("largest free chunk {} < request {}", fb(*f.largest_free_block), fb(R)));
    d.next_step =
        "Allocate the largest, longest-lived tensors first, or use TF_GPU_ALLOCATOR=cuda_malloc_async; "
        "in JAX, XLA_PYTHON_CLIENT_ALLOCATOR=platform shows whether the pool layout is the cause.";
  } else {
    d.code = DiagnosisCode::capacity;
    d.headline = "the allocator's limit is used up: not enough memory whatever the layout";
    d.reasons.push_back(fmt::format("free within the limit {} < request {}", fb(*free_in_limit), fb(R)));
    d.next_step =
        "Reduce the batch size or model size, use mixed precision or rematerialisation, or raise the memory "
        "limit (TF: set_memory_growth / memory_limit; JAX: XLA_PYTHON_CLIENT_MEM_FRACTION).";
  }
}

// --- derived figures ----------------------------------------------------------------------

/// What the rules compare: the input's figures, completed by arithmetic on known figures only.
struct Derived {
  u64 request = 0;
  u64 device_request = 0;  ///< what the device must give: the request, or the new segment it needs
  std::optional<u64> reserved;
  std::optional<u64> cache_free;    ///< reserved but unallocated
  std::optional<u64> outside;       ///< memory outside the allocator
  std::optional<u64> device_avail;  ///< free on the device, limited by the cap's headroom
  bool cap_binds = false;           ///< the cap, not the device, limits device_avail
};

// Reserved and free in the cache; the notes on private pools and the inactive split.
void derive_cache(const OomFigures& f, Derived& x, Diagnosis& d) {
  x.reserved = f.reserved;
  x.cache_free = f.reserved_unallocated;
  if (!x.reserved && f.allocated && f.reserved_unallocated) {
    x.reserved = *f.allocated + *f.reserved_unallocated;
    derive(d, "reserved", static_cast<i64>(*x.reserved),
           fmt::format("reserved = allocated + reserved but unallocated = {} + {} = {}", fb(*f.allocated),
                       fb(*f.reserved_unallocated), fb(*x.reserved)));
  }
  if (!x.cache_free && x.reserved && f.allocated) {
    i64 v = static_cast<i64>(*x.reserved) - static_cast<i64>(*f.allocated);
    derive(d, "reserved_unallocated", v,
           fmt::format("reserved but unallocated (free in the cache) = reserved - allocated = {} - {} = {}",
                       fb(*x.reserved), fb(*f.allocated), format_bytes(v, ByteStyle::pytorch)));
    if (v < 0) d.notes.push_back("allocated exceeds reserved: the figures are inconsistent (or rounded very coarsely)");
    x.cache_free = v > 0 ? static_cast<u64>(v) : 0;
  }
  if (f.private_pools)
    d.notes.push_back(
        fmt::format("{} of the allocated memory is cached in private pools (CUDA graphs); only that pool's "
                    "captures can use it",
                    fb(*f.private_pools)));
  if (f.inactive_split)
    derive(d, "inactive_split", static_cast<i64>(*f.inactive_split),
           fmt::format("free inside split segments (inactive split, non-releasable) = {}", fb(*f.inactive_split)));
}

// Memory outside the allocator.
void derive_outside(const OomFigures& f, Derived& x, Diagnosis& d) {
  x.outside = f.outside_allocator;
  if (!x.outside && f.process_in_use && x.reserved) {
    i64 v = static_cast<i64>(*f.process_in_use) - static_cast<i64>(*x.reserved);
    derive(d, "outside_allocator_this_process", v,
           fmt::format("memory outside the allocator in this process = in use - reserved = {} - {} = {}",
                       fb(*f.process_in_use), fb(*x.reserved), format_bytes(v, ByteStyle::pytorch)));
    u64 own = v > 0 ? static_cast<u64>(v) : 0;
    x.outside = own + f.other_processes.value_or(0);
    if (f.other_processes) {
      derive(d, "outside_allocator", static_cast<i64>(*x.outside),
             fmt::format("memory outside the allocator = this process's + other processes' = {} + {} = {}", fb(own),
                         fb(*f.other_processes), fb(*x.outside)));
    }
  }
  if (!x.outside && f.device_total && f.device_free && x.reserved) {
    i64 v = static_cast<i64>(*f.device_total) - static_cast<i64>(*f.device_free) - static_cast<i64>(*x.reserved);
    derive(d, "outside_allocator", v,
           fmt::format("memory outside the allocator (context, libraries, other processes) = total - free - reserved = "
                       "{} - {} - {} = {}",
                       fb(*f.device_total), fb(*f.device_free), fb(*x.reserved), format_bytes(v, ByteStyle::pytorch)));
    x.outside = v > 0 ? static_cast<u64>(v) : 0;
  }
}

// What the device can still give: its free memory, limited by the cap's headroom.
void derive_device_avail(const OomFigures& f, Derived& x, Diagnosis& d) {
  x.device_avail = f.device_free;
  x.cap_binds = false;
  if (f.allowed && x.reserved) {
    i64 head = static_cast<i64>(*f.allowed) - static_cast<i64>(*x.reserved);
    derive(d, "cap_headroom", head,
           fmt::format("headroom under the cap = {} - reserved = {} - {} = {}", f.allowed_name, fb(*f.allowed),
                       fb(*x.reserved), format_bytes(head, ByteStyle::pytorch)));
    u64 h = head > 0 ? static_cast<u64>(head) : 0;
    if (!x.device_avail || h < *x.device_avail) {
      x.device_avail = h;
      x.cap_binds = true;
    }
  }
}

Derived derive_figures(const OomFigures& f, u64 R, Diagnosis& d) {
  Derived x;
  x.request = R;
  x.device_request = std::max(R, f.device_request.value_or(R));
  derive_cache(f, x, d);
  derive_outside(f, x, d);
  derive_device_avail(f, x, d);
  return x;
}

// --- 1. exceeds_device --------------------------------------------------------------------
bool rule_exceeds_device(const OomFigures& f, const Derived& x, Diagnosis& d) {
  const u64 R = x.request;
  if (f.device_total && R > *f.device_total) {
    d.code = DiagnosisCode::exceeds_device;
    d.headline = "the request alone is larger than the device";
    d.reasons.push_back(fmt::format("request {} > device total {}", fb(R), fb(*f.device_total)));
    d.next_step =
        "No allocator setting helps. Reduce the size of this one tensor (batch, sequence length, image "
        "size), shard it across devices, or check its shape for a bug.";
    return true;
  }
  if (f.allowed && R > *f.allowed) {
    d.code = DiagnosisCode::exceeds_device;
    d.headline = "the request alone is larger than the per-process cap";
    d.reasons.push_back(fmt::format("request {} > {} {}", fb(R), f.allowed_name, fb(*f.allowed)));
    d.next_step = raise_the_cap(f) + " or make this tensor smaller.";
    return true;
  }
  if (!f.device_total && R >= (1ull << 40)) {
    d.code = DiagnosisCode::exceeds_device;
    d.headline = "the request alone is larger than any GPU's memory";
    d.reasons.push_back(
        fmt::format("request {} >= 1 TiB; the device total is not in the input, but no single GPU "
                    "has that much memory",
                    fb(R)));
    d.next_step = "Look for a wrong shape (an unexpected dimension, a broadcast, a huge image) before anything else.";
    return true;
  }
  return false;
}

// --- 2. unexplained -----------------------------------------------------------------------
bool rule_unexplained(const OomFigures& f, const Derived& x, Diagnosis& d) {
  const u64 R = x.request;
  const u64 Rdev = x.device_request;
  if (!x.device_avail || *x.device_avail < Rdev + kDeviceSlackBytes) return false;
  const PlatformWords w = words_of(f.platform);
  d.code = DiagnosisCode::unexplained;
  d.headline = "the device had room for the request, so this allocator's state does not explain the failure";
  d.reasons.push_back(fmt::format("free {} {} >= {} {} + {} slack", x.cap_binds ? "under the cap" : "on the device",
                                  fb(*x.device_avail), Rdev != R ? "new segment" : "request", fb(Rdev),
                                  fb(kDeviceSlackBytes)));
  d.next_step = fmt::format(
      "Check for: another process allocating at the same moment (watch {}); the program running on a "
      "different GPU than the message names ({}); a limit the figures do not show (MIG slice, container, "
      "set_per_process_memory_fraction, vramtrace run --limit: `vramtrace oom --capacity SIZE` applies a cap the "
      "trace does not record); a different error reported as out of memory (rerun with {}).",
      w.smi, w.visible_devices, w.launch_blocking);
  return true;
}

bool undetermined_without_device_free(const Derived& x, Diagnosis& d) {
  if (x.device_avail) return false;
  d.code = DiagnosisCode::undetermined;
  d.headline = "the input does not say how much memory the device had free";
  d.next_step = "Paste the whole message, or record a trace (vramtrace run) and use `vramtrace oom`.";
  return true;
}

// --- 3. more memory outside the allocator than inside ---------------------------------------
void rule_outside_larger_than_inside(const Derived& x, Diagnosis& d) {
  if (x.cap_binds || !x.outside || !x.reserved || *x.outside <= *x.reserved) return;
  d.reasons.push_back(fmt::format("memory outside the allocator {} > reserved {}: the allocator holds the smaller part",
                                  fb(*x.outside), fb(*x.reserved)));
  if (*x.outside > kContextAllowanceBytes) {
    d.code = DiagnosisCode::outside_allocator;
    d.headline = "most of the device is held outside this allocator (other processes, other libraries)";
    d.reasons.push_back(
        fmt::format("{} outside > {} a CUDA context takes", fb(*x.outside), fb(kContextAllowanceBytes)));
  } else {
    d.code = DiagnosisCode::capacity;
    d.headline = "the device is too small: the CUDA context takes a large share of it and the rest is in use";
    d.reasons.push_back(fmt::format("{} outside is about what a CUDA context takes (<= {}): a fixed cost",
                                    fb(*x.outside), fb(kContextAllowanceBytes)));
  }
}

// --- 4. fragmentation ---------------------------------------------------------------------
void rule_fragmentation(const OomFigures& f, const Derived& x, Diagnosis& d) {
  if (!x.cache_free) return;
  const u64 R = x.request;
  u64 total_free = *x.cache_free + *x.device_avail;
  derive(d, "free_in_all", static_cast<i64>(total_free),
         fmt::format("free in all = free in the cache + free {} = {} + {} = {}",
                     x.cap_binds ? "under the cap" : "on the device", fb(*x.cache_free), fb(*x.device_avail),
                     fb(total_free)));
  if (total_free < R) return;
  d.code = DiagnosisCode::fragmentation;
  d.headline = "enough memory is free in total, but no free block is large enough";
  d.reasons.push_back(fmt::format("free in all {} >= request {}", fb(total_free), fb(R)));
  // What rule 3 compared: the free memory against the new segment plus the slack.
  const std::string sum = fb(x.device_request + kDeviceSlackBytes);
  d.reasons.push_back(fmt::format("free {} {} < {} {} + {} slack{}: a new segment does not fit",
                                  x.cap_binds ? "under the cap" : "on the device", fb(*x.device_avail),
                                  x.device_request != R ? "new segment" : "request", fb(x.device_request),
                                  fb(kDeviceSlackBytes), sum == fb(x.device_request) ? "" : " = " + sum));
  if (f.largest_free_block) {
    d.reasons.push_back(
        fmt::format("largest free block in the cache {} < request {}", fb(*f.largest_free_block), fb(R)));
    if (*f.largest_free_block >= R)
      d.notes.push_back(
          "the largest free block is not smaller than the request: it may be in another stream's pool or oversize");
  } else {
    d.reasons.push_back(
        "the cache's free memory is in holes smaller than the request (PyTorch released every whole free segment "
        "before failing)");
  }
}

// --- 5. outside_allocator / 6. capacity ---------------------------------------------------
bool undetermined_without_cache_free(const Derived& x, Diagnosis& d) {
  if (x.cache_free) return false;
  d.code = DiagnosisCode::undetermined;
  d.headline = "the input does not say how much of the cache was free";
  d.next_step = "Paste the whole message, or record a trace (vramtrace run) and use `vramtrace oom`.";
  return true;
}

// What the request lacks beyond all the free memory (rule 4 found less free than the request).
u64 derive_shortfall(const Derived& x, Diagnosis& d) {
  u64 total_free = *x.cache_free + *x.device_avail;
  u64 shortfall = x.request - total_free;
  derive(d, "shortfall", static_cast<i64>(shortfall),
         fmt::format("shortfall = request - free in all = {} - {} = {}", fb(x.request), fb(total_free), fb(shortfall)));
  return shortfall;
}

bool rule_outside_allocator(const Derived& x, u64 shortfall, Diagnosis& d) {
  if (x.cap_binds || !x.outside || *x.outside <= kContextAllowanceBytes ||
      *x.outside - kContextAllowanceBytes < shortfall)
    return false;
  u64 total_free = *x.cache_free + *x.device_avail;
  d.code = DiagnosisCode::outside_allocator;
  d.headline = "memory held outside the allocator is what is missing";
  d.reasons.push_back(fmt::format("free in all {} < request {}", fb(total_free), fb(x.request)));
  d.reasons.push_back(fmt::format("memory outside the allocator beyond a context's {} is {} >= shortfall {}",
                                  fb(kContextAllowanceBytes), fb(*x.outside - kContextAllowanceBytes), fb(shortfall)));
  return true;
}

void rule_capacity(const Derived& x, Diagnosis& d) {
  u64 total_free = *x.cache_free + *x.device_avail;
  d.code = DiagnosisCode::capacity;
  d.headline = x.cap_binds ? "the per-process cap is used up: not enough memory whatever the layout"
                           : "not enough memory whatever the layout";
  d.reasons.push_back(fmt::format("free in all {} < request {}", fb(total_free), fb(x.request)));
  if (x.cap_binds)
    d.reasons.push_back(
        fmt::format("the cap leaves {} of headroom; the device itself had more free", fb(*x.device_avail)));
}

// The next step of rules 4 to 7, by code.
void set_next_step(Diagnosis& d, const OomFigures& f, bool cap_binds) {
  const PlatformWords w = words_of(f.platform);
  switch (d.code) {
    case DiagnosisCode::fragmentation:
      d.next_step = fmt::format(
          "Set {}=expandable_segments:True (PyTorch >= 2.1) so that free pages can be combined, or "
          "max_split_size_mb:N (N a little above your usual large tensor, in MiB) so that large cached blocks are "
          "not split. `vramtrace oom TRACE` replays a recorded run under these settings and says which fits.",
          w.alloc_conf);
      break;
    case DiagnosisCode::outside_allocator:
      d.next_step = fmt::format(
          "Find who holds the memory outside the allocator: `{}` for other processes; in this process, other "
          "libraries (cuDNN/cuBLAS workspaces, NCCL buffers, a second framework such as JAX, which preallocates 75% "
          "unless XLA_PYTHON_CLIENT_PREALLOCATE=false). Free them, limit them, or move them to another device.",
          w.smi);
      break;
    case DiagnosisCode::capacity:
      // Note [what capacity says about settings]: at the failure the cache held too little free
      // memory for any layout to serve the request; that is all the figures of one moment show. A
      // setting changes what was reserved before that moment, so only a replay can say whether one
      // gets past it (note_replays_in_diagnosis).
      d.next_step =
          cap_binds
              ? raise_the_cap(f) +
                    " or need less memory: smaller batch, mixed precision, activation checkpointing. At this moment "
                    "the cache held too little free memory for any layout to serve the request."
              : "Need less memory: smaller batch or sequence length, mixed precision, activation checkpointing, a "
                "sharded optimizer (ZeRO/FSDP), CPU offload; or a device with more memory. At this moment the cache "
                "held too little free memory for any layout to serve the request.";
      break;
    default:
      break;
  }
}

}  // namespace

// The rules in the order of the comment at the top of this file (diagnosis_rule_order(), and
// docs/reports.md, "Diagnosis codes"): the first that decides, decides. Rules 4 and 5 decide by
// giving reasons.
Diagnosis diagnose(const OomFigures& f) {
  Diagnosis d;
  if (rule_exceeds_1eb(f, d) || rule_inconsistent(f, d) || undetermined_without_request(f, d)) return d;
  const u64 R = *f.request;
  if (!f.request_formula.empty()) derive(d, "request", static_cast<i64>(R), f.request_formula);
  if (f.bfc) {
    diagnose_bfc(f, R, d);
    return d;
  }
  if (f.platform == GpuPlatform::mps) {
    diagnose_mps(f, R, d);
    if (f.printed) d.notes.push_back(kPrintedNote);
    return d;
  }
  const Derived x = derive_figures(f, R, d);
  if (rule_exceeds_device(f, x, d) || rule_unexplained(f, x, d) || undetermined_without_device_free(x, d)) return d;
  rule_outside_larger_than_inside(x, d);
  if (d.reasons.empty()) rule_fragmentation(f, x, d);
  if (d.reasons.empty()) {
    if (undetermined_without_cache_free(x, d)) return d;
    const u64 shortfall = derive_shortfall(x, d);
    if (!rule_outside_allocator(x, shortfall, d)) rule_capacity(x, d);
  }
  set_next_step(d, f, x.cap_binds);
  if (f.printed) d.notes.push_back(kPrintedNote);
  return d;
}

void note_replays_in_diagnosis(Diagnosis& d, const ReplayOutcome& r) {
  if (r.tried == 0) return;
  if (r.withheld) {
    if (d.code == DiagnosisCode::capacity || d.code == DiagnosisCode::fragmentation)
      d.next_step += " The replays below give no verdict on any setting (the warning there says why).";
    return;
  }
  std::string list;
  for (std::size_t i = 0; i < r.passing.size(); ++i) list += (i ? "; " : "") + r.passing[i];
  // The settings that ran out on the capacity but not with the bound, as the table calls them.
  std::string marginal;
  if (!r.short_by.empty()) {
    const auto [lo, hi] = std::minmax_element(r.short_by.begin(), r.short_by.end());
    marginal = fmt::format(
        "{} {} marginal: out of memory on this capacity, short by {}{}, but not with the error bound added",
        r.short_by.size(), r.short_by.size() == 1 ? "is" : "are", fb(*lo), *lo == *hi ? "" : " to " + fb(*hi));
  }
  // Note [fragmentation that no layout rescues]: the figures of the failed moment say the free
  // memory exists but is scattered, which promises that a setting fixes it. When the trace's own
  // replay reproduces the OOM and no setting gets past it with room above the error bound,
  // expandable segments (which reuse any free page, whatever the split) among them, nothing shows
  // that promise kept: the program needs about as much memory as it has, or more.
  if (d.code == DiagnosisCode::fragmentation && r.reproduces && r.layout_tried && !r.any_room) {
    d.code = DiagnosisCode::capacity;
    d.headline =
        "not enough memory whatever the layout: the free memory is scattered at the failure, but no replayed "
        "setting gets past it with room to spare";
    std::string reason = fmt::format(
        "of the {} replayed settings, expandable_segments:True among them, none gets past "
        "the failure with room above the error bound",
        r.tried);
    if (!list.empty()) reason += "; within it: " + list;
    if (!marginal.empty()) reason += "; " + marginal;
    d.reasons.push_back(reason);
    d.next_step =
        "Need less memory: smaller batch or sequence length, mixed precision, activation checkpointing, a sharded or "
        "8-bit optimizer, CPU offload; or raise the cap, or use a device with more memory. A layout that packs the "
        "free memory would serve this request, but the replays show no setting with room to spare.";
    if (!list.empty() || !marginal.empty())
      d.next_step +=
          " Check the settings that got past it on the real program (vramtrace tune) before you rely on one.";
    return;
  }
  if (d.code != DiagnosisCode::capacity) return;
  if (!r.reproduces) {
    d.next_step +=
        " The replays below do not reproduce this OOM, so they cannot say whether a setting would get past it.";
    return;
  }
  if (r.passing.empty()) {
    d.next_step +=
        marginal.empty()
            ? fmt::format(" None of the {} replayed settings gets past it either (the replays below).", r.tried)
            : fmt::format(
                  " None of the {} replayed settings gets past it on this capacity; {} (the "
                  "replays below): verify on the real program before you rely on one.",
                  r.tried, marginal);
    return;
  }
  d.next_step += fmt::format(
      " But a setting changes what was reserved before it, and the replays below get past the failure under: {}. "
      "Check that on the real program before you cut the batch.",
      list);
}

}  // namespace vramtrace
