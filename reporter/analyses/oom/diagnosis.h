// Why an allocation ran out of memory: one diagnosis code, the arithmetic that leads to it, and
// the next step. Shared by `vramtrace explain` (figures read from a message) and `vramtrace oom`
// (figures from a trace, where the largest free block is known too).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "analyses/oom/oom_message.h"

namespace vramtrace {

/// The verdicts, in the order their rules are tested (diagnosis.cpp, docs/reports.md "Diagnosis
/// codes"; diagnosis_rule_order() lists the order and a test holds the doc to it).
enum class DiagnosisCode : std::uint8_t {
  inconsistent,       ///< the figures contradict each other: no verdict from them
  exceeds_device,     ///< the request alone is larger than the device (or the cap)
  unexplained,        ///< the figures cannot produce an OOM (device had room): another cause
  outside_allocator,  ///< memory held by the context, other libraries or other processes
  fragmentation,      ///< enough free memory in total, no block large enough
  capacity,           ///< not enough memory whatever the layout
  undetermined,       ///< the input lacks the figures to decide
};

/// Stable name ("exceeds_device", ...), used in --json. Never null.
const char* diagnosis_code_name(DiagnosisCode c) noexcept;

/// The rules of diagnose(), in the order they are tested: one entry per rule, named by the code it
/// gives (outside_allocator twice: first when memory outside the allocator is larger than the
/// allocator's own, then when freeing it would cover what the request lacks). undetermined is
/// not a rule: it is what a rule gives when a figure it needs is missing.
const std::vector<DiagnosisCode>& diagnosis_rule_order();

/// Figures known at an OOM, in bytes. Unknown figures stay empty; the diagnosis never fills a
/// missing one with a guess, it derives only what arithmetic on known figures gives.
struct OomFigures {
  std::optional<std::uint64_t> request;  ///< bytes asked of the device (segment size in PyTorch messages)
  /// What a new device allocation for the request would take (PyTorch's segment size), when it
  /// differs from `request` (traces record the rounded request). Used to judge device free memory.
  std::optional<std::uint64_t> device_request;
  std::optional<std::uint64_t> device_total;
  std::optional<std::uint64_t> device_free;  ///< cudaMemGetInfo free at the failure
  std::optional<std::uint64_t> allocated;
  std::optional<std::uint64_t> reserved;
  std::optional<std::uint64_t> reserved_unallocated;  ///< reserved - allocated, when printed directly
  std::optional<std::uint64_t> allowed;               ///< per-process cap on reserved memory
  /// What `allowed` is, for the reasons shown: "allowed" (a message's figure), "the cap of
  /// vramtrace run --limit", "PyTorch's memory fraction", "--capacity", "max allowed" (MPS).
  std::string allowed_name = "allowed";
  std::optional<std::uint64_t> process_in_use;   ///< NVML figure for this process
  std::optional<std::uint64_t> other_processes;  ///< sum over other processes named
  std::optional<std::uint64_t> private_pools;    ///< part of allocated held in private pools
  /// Trace-only figures.
  std::optional<std::uint64_t> largest_free_block;  ///< largest inactive block in the cache
  std::optional<std::uint64_t> inactive_split;      ///< free bytes inside split segments
  /// Memory outside the allocator known directly (trace: the simulated device's other use).
  std::optional<std::uint64_t> outside_allocator;
  /// MPS: memory of the process outside the MPS allocator's heaps ("other allocations").
  std::optional<std::uint64_t> mps_other;
  bool exceeds_1eb = false;
  /// The request as printed when it could not be read (OomMessage::unreadable_requested).
  std::string unreadable_request;
  /// How `request` follows from what the input prints when it prints no size (TensorFlow's
  /// "shape[32,512,512,64] and type float"): the first line of the arithmetic. Empty otherwise.
  std::string request_formula;
  /// True for a TensorFlow BFC allocator, whose "device" is the allocator's memory limit.
  bool bfc = false;
  /// Whose allocator failed: the advice names its variables (PYTORCH_HIP_ALLOC_CONF on ROCm, the
  /// MPS watermark on Apple GPUs).
  GpuPlatform platform = GpuPlatform::cuda;
  /// The figures were printed with two decimals (a pasted message): comparisons allow for the
  /// rounding. False for a trace's exact figures.
  bool printed = false;
};

/// One line of arithmetic: "reserved = allocated + reserved but unallocated = 14.56 GiB + 12.76 MiB = 14.57 GiB".
struct Derivation {
  std::string name;  ///< snake_case key for --json, e.g. "reserved"
  std::int64_t bytes = 0;
  std::string formula;  ///< the line shown to people
};

struct Diagnosis {
  DiagnosisCode code = DiagnosisCode::undetermined;
  std::string headline;                ///< one sentence: the verdict in words
  std::vector<Derivation> arithmetic;  ///< derived figures, in the order they were used
  std::vector<std::string> reasons;    ///< the comparisons that decided the code
  std::string next_step;               ///< what to do
  std::vector<std::string> notes;      ///< caveats (rounding, hints, missing figures)
};

/// Slack under which device free memory is not taken as proof that the device had room:
/// the driver maps in 2 MiB pages and printed figures are rounded.
inline constexpr std::uint64_t kDeviceSlackBytes = 2ull << 20;
/// Memory outside the allocator up to this size is taken to be the CUDA context and libraries'
/// fixed cost (a PyTorch process's context: ~554 MB on an H200, 1105 MiB in pytorch/pytorch#60150),
/// not something to hunt down.
inline constexpr std::uint64_t kContextAllowanceBytes = 1280ull << 20;

/// Decides the code from the figures, testing the rules in the order of diagnosis_rule_order()
/// (inconsistent, exceeds_device, unexplained, outside_allocator when the outside is the larger
/// part, fragmentation, outside_allocator when freeing it covers the shortfall, capacity);
/// undetermined when the figures for a step are missing. TensorFlow's BFC figures and MPS
/// messages have their own, shorter lists of the same codes. Pure function.
Diagnosis diagnose(const OomFigures& f);

/// What the replays of a trace found about its failure, for note_replays_in_diagnosis.
struct ReplayOutcome {
  /// Each setting whose replay got past the failure on the capacity, with its verdict and spare,
  /// in the words of the replays' table.
  std::vector<std::string> passing;
  /// The shortfalls of the settings whose replay ran out on the capacity but not with the error
  /// bound added ("marginal" in the table), in bytes.
  std::vector<std::uint64_t> short_by;
  std::size_t tried = 0;      ///< settings replayed besides the trace's own
  bool reproduces = false;    ///< the replay of the trace's own settings runs out of memory as the trace did
  bool withheld = false;      ///< the input supports no verdict (verdict_support.h): the replays say nothing
  bool layout_tried = false;  ///< a setting that packs free memory (expandable_segments:True) was replayed
  /// A replayed setting got past the failure with spare above the error bound (a verdict "fits",
  /// or, in a replay that covers only part of the run, the same room without the verdict).
  bool any_room = false;
};

/// What the verdict "capacity" can and cannot say about allocator settings, after replays:
/// at the failure the cache held too little free memory for any layout, but a setting changes
/// what was reserved before it. When a replay under another setting got past the failure
/// (`r.passing`), the next step says so instead of "need less memory" alone; with no such replay
/// it says that none did. When the replay of the trace's own settings does not reproduce the OOM,
/// the replays can say nothing and the next step says that.
/// A `fragmentation` whose replays reproduce the OOM, with a setting that packs free memory among
/// them, while none gets past it with room above the error bound, becomes `capacity` (Note [fragmentation that no
/// layout rescues]): the free memory is scattered, but no setting is shown to rescue the run; the
/// settings that got past it within the bound are named. Other codes are left as they are. Pure.
void note_replays_in_diagnosis(Diagnosis& d, const ReplayOutcome& r);

/// The environment variable that takes allocator settings on `p`: PYTORCH_CUDA_ALLOC_CONF,
/// PYTORCH_HIP_ALLOC_CONF (ROCm); for MPS, which has no such settings, its watermark variable
/// PYTORCH_MPS_HIGH_WATERMARK_RATIO. Never null.
const char* alloc_conf_variable(GpuPlatform p) noexcept;

/// The figures a message states (and nothing else).
OomFigures figures_from_message(const OomMessage& m);

}  // namespace vramtrace
