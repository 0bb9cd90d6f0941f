// Diagnosis of an OOM from its figures. The rules, in the order applied:
//  1. exceeds_device: request > device total (or > the cap).
//  2. unexplained: the device (and the cap) had more than request + slack free, so the allocator
//     could have obtained a new segment; the failure has another cause.
//  3. When more memory sits outside the allocator than inside it (and no cap binds), that memory
//     decides: outside_allocator if it is more than a CUDA context takes, else capacity (a small
//     card whose context takes half of it; case M1).
//  4. fragmentation: free in the cache + free on the device >= request (the memory exists, no
//     block is large enough). A trace also gives the largest free block, which must be < request.
//  5. outside_allocator: freeing the memory outside the allocator beyond a context's allowance
//     would make the request fit.
//  6. capacity: otherwise.
#include "analyses/diagnosis.h"
#include "vramtrace/units.h"

#include <fmt/format.h>
#include <algorithm>
#include <cinttypes>

namespace vramtrace {

namespace {

using u64 = std::uint64_t;
using i64 = std::int64_t;

std::string fb(u64 v) { return format_bytes(static_cast<i64>(v), ByteStyle::pytorch); }

}  // namespace

const char* diagnosis_code_name(DiagnosisCode c) noexcept {
  switch (c) {
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

OomFigures figures_from_message(const OomMessage& m) {
  OomFigures f;
  auto get = [](const std::optional<PrintedSize>& p) -> std::optional<u64> {
    if (!p) return std::nullopt;
    return p->bytes;
  };
  f.exceeds_1eb = m.exceeds_1eb;
  if (m.format == OomMessageFormat::tensorflow_bfc || (m.format == OomMessageFormat::xla && m.bfc_limit)) {
    f.bfc = true;
    f.request = m.rounded ? get(m.rounded) : get(m.requested);
    f.allowed = get(m.bfc_limit);
    f.allocated = get(m.bfc_in_use);
    f.largest_free_block = get(m.bfc_largest_free_chunk);
    return f;
  }
  f.request = get(m.requested);
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
  d.headline = "the request size is not in the input, so no verdict is possible";
  d.next_step =
      "Paste the whole message: the figures follow \"Tried to allocate\" on the same line. Or record a "
      "trace (vramtrace run) and use `vramtrace oom`.";
  return true;
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
        "Paste the allocator dump that follows the message (the lines \"Limit:\", \"InUse:\" and the chunk "
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
           fmt::format("headroom under the cap = allowed - reserved = {} - {} = {}", fb(*f.allowed), fb(*x.reserved),
                       format_bytes(head, ByteStyle::pytorch)));
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
    d.reasons.push_back(fmt::format("request {} > allowed {}", fb(R), fb(*f.allowed)));
    d.next_step = "Raise the cap (torch.cuda.set_per_process_memory_fraction) or make this tensor smaller.";
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
bool rule_unexplained(const Derived& x, Diagnosis& d) {
  const u64 R = x.request;
  const u64 Rdev = x.device_request;
  if (!x.device_avail || *x.device_avail < Rdev + kDeviceSlackBytes) return false;
  d.code = DiagnosisCode::unexplained;
  d.headline = "the device had room for the request, so this allocator's state does not explain the failure";
  d.reasons.push_back(fmt::format("free on the device {} >= {} {} + {} slack", fb(*x.device_avail),
                                  Rdev != R ? "new segment" : "request", fb(Rdev), fb(kDeviceSlackBytes)));
  d.next_step =
      "Check for: another process allocating at the same moment (watch nvidia-smi); the program running on a "
      "different GPU than the message names (CUDA_VISIBLE_DEVICES); a limit the message does not show (MIG "
      "slice, container, set_per_process_memory_fraction); a different CUDA error reported as out of memory "
      "(rerun with CUDA_LAUNCH_BLOCKING=1).";
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
  d.reasons.push_back(
      fmt::format("free on the device {} < {}: a new segment does not fit", fb(*x.device_avail), fb(x.device_request)));
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

// The next step of rules 3 to 6, by code.
void set_next_step(Diagnosis& d, bool cap_binds) {
  switch (d.code) {
    case DiagnosisCode::fragmentation:
      d.next_step =
          "Set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (PyTorch >= 2.1) so that free pages can be "
          "combined, or max_split_size_mb:N (N a little above your usual large tensor, in MiB) so that large "
          "cached blocks are not split. `vramtrace oom TRACE` replays a recorded run under these settings and "
          "says which fits.";
      break;
    case DiagnosisCode::outside_allocator:
      d.next_step =
          "Find who holds the memory outside the allocator: `nvidia-smi` for other processes; in this process, "
          "other libraries (cuDNN/cuBLAS workspaces, NCCL buffers, a second framework such as JAX, which "
          "preallocates 75% unless XLA_PYTHON_CLIENT_PREALLOCATE=false). Free them, limit them, or move them "
          "to another device.";
      break;
    case DiagnosisCode::capacity:
      d.next_step =
          cap_binds
              ? "Raise the cap (torch.cuda.set_per_process_memory_fraction / per_process_memory_fraction) or need "
                "less memory: smaller batch, mixed precision, activation checkpointing. Allocator settings cannot "
                "fix this: the cache holds almost nothing free."
              : "Need less memory: smaller batch or sequence length, mixed precision, activation checkpointing, a "
                "sharded optimizer (ZeRO/FSDP), CPU offload; or a device with more memory. Allocator settings "
                "cannot fix this.";
      break;
    default:
      break;
  }
}

}  // namespace

// The rules in the order of the comment at the top of this file (and of docs/reports.md,
// "Diagnosis codes"): the first that decides, decides. Rules 3 and 4 decide by giving reasons.
Diagnosis diagnose(const OomFigures& f) {
  Diagnosis d;
  if (rule_exceeds_1eb(f, d) || undetermined_without_request(f, d)) return d;
  const u64 R = *f.request;
  if (f.bfc) {
    diagnose_bfc(f, R, d);
    return d;
  }
  const Derived x = derive_figures(f, R, d);
  if (rule_exceeds_device(f, x, d) || rule_unexplained(x, d) || undetermined_without_device_free(x, d)) return d;
  rule_outside_larger_than_inside(x, d);
  if (d.reasons.empty()) rule_fragmentation(f, x, d);
  if (d.reasons.empty()) {
    if (undetermined_without_cache_free(x, d)) return d;
    const u64 shortfall = derive_shortfall(x, d);
    if (!rule_outside_allocator(x, shortfall, d)) rule_capacity(x, d);
  }
  set_next_step(d, x.cap_binds);
  d.notes.push_back(
      "figures printed with two decimals are exact to half a unit of the last digit; derived values carry that error");
  return d;
}

}  // namespace vramtrace
