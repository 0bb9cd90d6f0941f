// What input can support a verdict on an allocator setting, and what cannot: the rule that
// withholds verdicts (docs/replay.md, "When there is no verdict", lists it as a table). judge()
// (analyses/oom/verdict.h) applies what these functions decide; every command asks them through
// the one engine, run_whatifs (analyses/oom/oom_whatif.h).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "analyses/oom/verdict.h"
#include "model/trace_model.h"
#include "vramtrace/settings.h"

namespace vramtrace {

/// The simulated device the replays run on, and what it stands for.
struct WhatIfCapacity {
  std::uint64_t bytes = 0;  ///< 0: unknown (no OOM figures, no cap, no device total)
  std::string source;       ///< in words, for the report
  enum class Kind : std::uint8_t {
    unknown,         ///< nothing gives one
    given,           ///< --capacity (or tune's --limit): the user's device
    device_total,    ///< the device's total memory as the trace records it
    recorded_cap,    ///< a cap the trace records below the device (TraceHeader::cap_of)
    reached_at_oom,  ///< reserved + free on the device at the first OOM
  };
  Kind kind = Kind::unknown;
  /// recorded_cap (or reached_at_oom under one): the cap is PyTorch's own memory fraction, which
  /// its allocator knows (garbage collection acts against it).
  bool pytorch_fraction_cap = false;
  /// The device's total memory, when the trace records it (0 otherwise).
  std::uint64_t device_total_bytes = 0;
  /// What the trace says the program had: the capacity chosen without --capacity (0: unknown). A
  /// given capacity no larger than this is a device on which the recorded run's outcome holds.
  std::uint64_t recorded_bytes = 0;

  /// The trace's own outcome holds on this capacity: it is no larger than what the program had.
  bool within_recorded() const noexcept { return recorded_bytes != 0 && bytes <= recorded_bytes; }
};

/// The smallest capacity taken from a trace as a device's (64 MiB, the smallest a capacity given
/// without a unit may be, docs/configuration.md "Sizes"): below it the trace's figures are not.
inline constexpr std::uint64_t kMinPlausibleCapacityBytes = 64ull << 20;

/// What a trace as a whole can support, before any replay.
struct TraceSupport {
  /// No verdict at all on any setting, and why (the wrong level, no or a late history, lost
  /// events, no or an implausible capacity, figures that contradict each other, a backend the
  /// replay does not model, a --full trace of another program).
  std::optional<Withheld> none;
  /// False where a replay would not mean anything (another allocator's segments, no history, a
  /// history that begins late): the rows get no figures either.
  bool replayable = true;
  /// The replays cover only part of the run (it ends at its OOM, or it did not finish): "does
  /// not fit" holds, a setting that gets through has no verdict.
  std::optional<Withheld> partial;
};

/// Facts about a complete trace of the same program given with --full.
struct FullTraceFacts {
  std::uint64_t ooms = 0;   ///< oom entries in it
  bool incomplete = false;  ///< it ends abruptly
  /// Its first `matching` allocations equal the trace's, of the `compared` the trace made before
  /// its failure (match_traces): under 90 % it is taken for another program or input.
  std::uint64_t matching = 0;
  std::uint64_t compared = 0;
};

/// Note [what a verdict needs]
/// A verdict on a setting promises what the real program does under it. The replay can keep that
/// promise only when (1) the trace's allocations are the requests the modelled allocator served
/// (Note [the level of a trace]: not another allocator's segments), (2) the history holds the
/// whole run's allocations (not none, not a ring that wrapped, no lost event), (3) the device's
/// size is known and plausible, and the figures at the OOM agree with each other, (4) the program
/// ran PyTorch's native allocator (not cudaMallocAsync), (5) the setting's meaning depends on
/// nothing the trace does not record (see setting_support), and (6) the trace's own settings
/// reproduce its OOM on what the program had (checked after the replay, reproduction_support). A
/// --full trace must be the same program (90 % of the allocations before the failure the same);
/// a trace that covers only part of the run (it ends at its OOM, or its process did not finish)
/// supports "does not fit" but not "fits". `full` is the --full trace's facts when one replaces
/// this trace (then the coverage is its own); `figures_contradict`: an OOM of the trace is
/// diagnosed `inconsistent`. Reads the trace's directory only to name a tensor-level companion
/// (readers/trace_paths.h) in the advice.
TraceSupport trace_support(const TraceModel& m, const WhatIfCapacity& capacity, bool ends_at_failure,
                           const FullTraceFacts* full, bool figures_contradict = false);

/// How to record the requests of the allocator whose segments `m` holds (Note [the level of a
/// trace]): the tensor-level companion beside the trace, or the `vramtrace run` command for its
/// program; for an allocator whose requests vramtrace cannot record, says so. Reads the trace's
/// directory for the companion (readers/trace_paths.h).
std::string requests_level_advice(const TraceModel& m);

/// Rule (5) of Note [what a verdict needs]: why the replay does not model `settings` on
/// `capacity` exactly, or nullopt when it does.
///  - garbage_collection_threshold acts in PyTorch only under its memory fraction
///    (set_per_process_memory_fraction: CUDACachingAllocator.cpp collects only when set_fraction),
///    against that fraction of the device: with `limit` (a cap PyTorch does not see), or on a
///    capacity that is a recorded PyTorch fraction replayed as a device, the replay would collect
///    where PyTorch did not, or not where it did;
///  - per_process_memory_fraction and limit cap the device PyTorch sees: on a capacity that is not
///    that device (a recorded cap, what the allocator reached at the OOM) they would be a cap of a
///    cap.
/// Pure.
std::optional<Withheld> setting_support(const AllocatorSettings& settings, const WhatIfCapacity& capacity);

/// Rule (6) of Note [what a verdict needs]: the trace recorded `recorded_ooms` OOMs (with or
/// without an entry in the history, `with_entries` of them with one), the replay of its own
/// settings on what the program had (the smaller of `capacity` and what the trace says it had,
/// WhatIfCapacity::recorded_bytes: a larger --capacity is a what-if, a smaller one the user's word
/// for a cap the trace does not record) ran out of memory `own_ooms` times (nullopt: not
/// replayed). Why no verdict holds when that replay does not reproduce the OOM, or nullopt. `own_spare` is that
/// replay's spare, for the message. Pure.
std::optional<Withheld> reproduction_support(std::uint64_t recorded_ooms, std::uint64_t with_entries,
                                             std::optional<std::uint64_t> own_ooms, std::uint64_t own_spare,
                                             const WhatIfCapacity& capacity, const std::string& trace_path);

}  // namespace vramtrace
