// Why an allocation ran out of memory: one diagnosis code, the arithmetic that leads to it, and
// the next step. Shared by `vramtrace explain` (figures read from a message) and `vramtrace oom`
// (figures from a trace, where the largest free block is known too).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "analyses/oom_message.h"

namespace vramtrace {

/// The verdicts, in the order they are tested.
enum class DiagnosisCode : std::uint8_t {
  exceeds_device,     ///< the request alone is larger than the device (or the cap)
  unexplained,        ///< the figures cannot produce an OOM (device had room): another cause
  fragmentation,      ///< enough free memory in total, no block large enough
  outside_allocator,  ///< memory held by the context, other libraries or other processes
  capacity,           ///< not enough memory whatever the layout
  undetermined,       ///< the input lacks the figures to decide
};

/// Stable name ("exceeds_device", ...), used in --json. Never null.
const char* diagnosis_code_name(DiagnosisCode c) noexcept;

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
  std::optional<std::uint64_t> process_in_use;        ///< NVML figure for this process
  std::optional<std::uint64_t> other_processes;       ///< sum over other processes named
  std::optional<std::uint64_t> private_pools;         ///< part of allocated held in private pools
  /// Trace-only figures.
  std::optional<std::uint64_t> largest_free_block;  ///< largest inactive block in the cache
  std::optional<std::uint64_t> inactive_split;      ///< free bytes inside split segments
  /// Memory outside the allocator known directly (trace: the simulated device's other use).
  std::optional<std::uint64_t> outside_allocator;
  bool exceeds_1eb = false;
  /// True for a TensorFlow BFC allocator, whose "device" is the allocator's memory limit.
  bool bfc = false;
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

/// Decides the code from the figures. Order: exceeds_device, unexplained, (outside memory larger
/// than the allocator's own: outside_allocator or capacity), fragmentation, outside_allocator,
/// capacity; undetermined when the figures for a step are missing. Pure function.
Diagnosis diagnose(const OomFigures& f);

/// The figures a message states (and nothing else).
OomFigures figures_from_message(const OomMessage& m);

}  // namespace vramtrace
