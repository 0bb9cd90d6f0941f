// The verdict rule: whether a setting fits, from its replays. judge() is the one function that
// gives the "fits", "marginal", "does not fit" or withheld verdict of every command (`oom`,
// `replay`, `tune --from`, the HTML report) and of their --json; the commands render its
// Judgement and decide nothing themselves. What input may be judged at all is the rule of
// analyses/oom/verdict_support.h.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "analyses/replay.h"

namespace vramtrace {

/// Note [what-if error bound]
/// A replay is a model of the program's allocator, not the program: it replays the recorded
/// requests, so it misses what the program would do differently under another setting (a
/// library that sizes its workspace from the free memory, a retry that frees a cache), memory
/// outside the recorded allocator that grows with the run, and the allocator's own choices where
/// they depend on more than the requests. Its peak reserved memory is therefore off by some amount
/// from the real run's under the same setting, and a replay that "fits" with less spare than that
/// amount proves nothing (measured on the H200: three settings said to fit with 1 to 11 MiB spare
/// under a 24351 MiB cap all ran out of memory on the real GPU; docs/benchmarks.md).
///
/// The bound is the larger of kWhatIfRelativeBound of the memory the setting lets the run use
/// (allowed_bytes: the device, or a memory fraction's or a limit's share of it) and
/// kWhatIfAbsoluteBoundBytes (two segments of the largest size class that PyTorch rounds small
/// requests to, 20 MiB: one segment's difference in a replay moves the peak by a segment). Its
/// base is what the run may use, not the device: 2 % of an H200 is 2.8 GiB, which under a
/// fraction of 24 GiB would call settings with 1.8 GiB spare marginal that really fit.
/// The bound stays well above the measured model error (Note [measured replay error]): under a
/// cap the program itself behaves differently (PyTorch frees its cache and retries, libraries
/// size their workspaces from the free memory), which is where the failures at 1 to 11 MiB
/// spare above came from.
inline constexpr double kWhatIfRelativeBound = 0.02;
inline constexpr std::uint64_t kWhatIfAbsoluteBoundBytes = 40ull << 20;

/// Note [measured replay error]
/// Measured (tests/gpu/whatif_accuracy.py, H200, 2026-12-01, docs/benchmarks.md): replays of
/// BERT-base with variable lengths and GPT-2 124M under the six settings `oom` tries, against the
/// same programs run alone without a cap, gave peak reserved memory within 0 to +36 MiB (at most
/// 0.21 %), never below the real peak; under PyTorch's memory fraction (tests/gpu/fraction_check.py,
/// H100, 2026-12-05) the replayed peak equalled max_memory_reserved() to the byte in 28 runs. A
/// replay that runs out of memory on what the setting allows, and gets through only with more than
/// this error added, is short by more than the model can be wrong: the verdict stays "marginal"
/// (the program may still behave differently under the cap), but it says how short, and `tune`
/// is not offered it as a candidate to fit.
inline constexpr std::uint64_t kMeasuredReplayErrorBytes = 36ull << 20;
inline constexpr double kMeasuredReplayErrorRelative = 0.0021;

/// The error bound of a replay whose setting lets the run use `allowed_bytes` (Note [what-if
/// error bound]), in bytes. Pure.
std::uint64_t whatif_error_bound(std::uint64_t allowed_bytes) noexcept;

/// The measured replay error on `allowed_bytes` (Note [measured replay error]), in bytes. Pure.
std::uint64_t measured_replay_error(std::uint64_t allowed_bytes) noexcept;

/// One sentence saying where the bound comes from, for reports.
std::string whatif_bound_source();

/// What a replay under one setting says.
enum class WhatIfVerdict : std::uint8_t {
  fits,          ///< no OOM, and the spare (allowed - peak reserved) is above the bound
  marginal,      ///< no OOM with spare within the bound, or an OOM that the bound's extra memory removes
  does_not_fit,  ///< runs out of memory even with the bound's extra memory
  withheld,      ///< the input cannot support a verdict on this setting (Withheld says why)
  failed,        ///< the replay could not run (a setting refused, a replay error)
};

/// Stable name ("fits", "marginal", "does_not_fit", "withheld", "failed"). Never null.
const char* whatif_verdict_name(WhatIfVerdict v) noexcept;
/// Words for people ("fits", "marginal", "does not fit", "no verdict", "failed"). Never null.
const char* whatif_verdict_words(WhatIfVerdict v) noexcept;

/// Why there is no verdict, and how to get one.
struct Withheld {
  std::string why;  ///< one sentence
  std::string how;  ///< the command or input that gets a verdict; may be empty
};

/// A replay's verdict and the figures behind it. Exactly one of margin_bytes (no OOM on what the
/// setting allows) and shortfall_bytes (an OOM there that the bound's extra memory removes) is
/// set, or neither (does not fit, withheld without a replay, failed).
struct Judgement {
  WhatIfVerdict verdict = WhatIfVerdict::failed;
  /// What the setting let the allocator reserve: the capacity, or less under a memory fraction or
  /// a limit. The margin, the shortfall and the bound are measured from it.
  std::uint64_t allowed_bytes = 0;
  std::uint64_t bound_bytes = 0;  ///< whatif_error_bound(allowed_bytes)
  std::int64_t peak_reserved_bytes = 0;
  std::int64_t peak_allocated_bytes = 0;
  std::uint64_t ooms = 0;                     ///< failed allocations of the replay on what the setting allows
  std::optional<std::uint64_t> margin_bytes;  ///< no OOM: allowed - peak reserved
  std::optional<std::uint64_t>
      shortfall_bytes;  ///< marginal with an OOM: how far the replay with the bound went past allowed
  /// Marginal with an OOM whose shortfall is above the measured replay error (Note [measured
  /// replay error]): said with the figure, and no candidate for `tune`.
  bool short_beyond_error = false;
  /// The verdict is the recorded run's own outcome: the trace's own settings, on what the program
  /// had, in a trace that ran out of memory.
  bool recorded_outcome = false;
  /// The replay covers only part of the run (it ends at its OOM, Note [a trace that ends at its
  /// OOM], or it did not finish): a setting that gets through that part has no verdict, only its
  /// spare there; `withheld` says why.
  bool partial = false;
  std::optional<Withheld> withheld;
  std::string error;  ///< failed: why
  /// A replay ran for it (judge()); false for a verdict withheld without one: then no figure of
  /// it is known, and none is shown.
  bool replayed = false;
};

/// What judge() takes besides the replays.
struct JudgeContext {
  /// The capacity of the simulated device: what the allocator could reach.
  std::uint64_t capacity_bytes = 0;
  /// Why the input cannot support any verdict on this setting (verdict_support.h), or null.
  const Withheld* withheld = nullptr;
  /// Why the replay covers only part of the run (verdict_support.h), or null: "does not fit" still
  /// holds (those allocations were made), a setting that gets through has no verdict.
  const Withheld* partial = nullptr;
  /// The setting is the trace's own, the capacity is what the program had, and the trace ran out
  /// of memory: a replay that runs out too is the recorded outcome, "does not fit" whatever the
  /// bound would add.
  bool recorded_oom = false;
};

/// The verdict rule. From the replay on the capacity (`at`) and the replay of the same trace and
/// setting with the bound's extra memory (`with_bound`; null when that lane was not run):
///  - `ctx.withheld`: withheld, whatever the replays say;
///  - the trace's own setting that ran out of memory where the trace did: does_not_fit;
///  - a replay that runs out of memory also with the bound (or without that lane): does_not_fit,
///    also when it covers only part of the run (those allocations were made);
///  - no OOM on what the setting allows: with `ctx.partial`, withheld (with its margin: it got
///    through the part recorded); else fits with the margin above the bound, marginal within it;
///  - an OOM that the bound's memory removes: marginal, with the shortfall (and
///    short_beyond_error past the measured replay error).
/// The bound is whatif_error_bound(allowed_bytes(setting, capacity)). Pure; thread-safe.
Judgement judge(const ReplayResult& at, const ReplayResult* with_bound, const JudgeContext& ctx);

/// A verdict for a setting that was not replayed at all: withheld for `why`. Pure.
Judgement withheld_judgement(const Withheld& why);

/// The worse of two devices' judgements of one setting (a trace of several devices): failed, then
/// does_not_fit (the program dies on that device, whatever another's replay could not say), then
/// withheld, marginal, fits; the smaller margin. Pure.
Judgement worse_of(const Judgement& a, const Judgement& b);

/// Whether `tune` should run a setting judged `j` as a candidate to fit: fits, marginal within
/// the measured replay error, or a setting with its verdict withheld that got past the failure
/// of a trace that ends there (the real run is what decides). Pure.
bool tune_candidate(const Judgement& j) noexcept;

/// The judgement in words, one cell of a table ("fits (3.20 GiB spare > 245.76 MiB bound)",
/// "marginal: 12.00 MiB spare, within the 245.76 MiB bound: verify", "no verdict: ..."). Pure.
std::string judgement_text(const Judgement& j);

/// The judgement's fields for --json, the same keys in every command: "verdict" (name, or null
/// when withheld or failed), "withheld" and "how_to_get_a_verdict" (strings or null),
/// "fits" (verdict == fits), "allowed_bytes", "bound_bytes", "margin_bytes", "shortfall_bytes"
/// (integers or null, never both set), "short_beyond_measured_error", "recorded_outcome",
/// "partial", "ooms", "peak_reserved_bytes", "peak_allocated_bytes", "error"; the figures are null
/// where nothing was replayed (Judgement::replayed). Pure.
nlohmann::ordered_json judgement_json(const Judgement& j);
/// The same keys put into `o` (nlohmann::json or nlohmann::ordered_json). Pure.
template <class Json>
void put_judgement(Json& o, const Judgement& j);
extern template void put_judgement(nlohmann::json&, const Judgement&);
extern template void put_judgement(nlohmann::ordered_json&, const Judgement&);

/// The bytes a setting lets the allocator reserve on a device of `capacity_bytes`: the capacity,
/// or `per_process_memory_fraction` of it, or `limit`, whichever is least (the allocator's
/// allowed_memory(), as PyTorch's set_per_process_memory_fraction caps it). Pure.
std::uint64_t allowed_bytes(const AllocatorSettings& settings, std::uint64_t capacity_bytes) noexcept;

/// `c` with the bound of what it allows (whatif_error_bound(allowed_bytes)) added to the device and
/// to its fraction or limit: the lane whose replay tells "marginal" from "does not fit". Pure.
ReplayConfig bound_lane(const ReplayConfig& c);

/// `configs` followed by bound_lane of each: replay all of them in one pass, then find each
/// config's pair with result_of(results, bound_lane(config), device).
std::vector<ReplayConfig> with_bound_lanes(const std::vector<ReplayConfig>& configs);

/// The result of `config` (settings text and capacity) on `device` among `results`, or null.
const ReplayResult* result_of(const std::vector<ReplayResult>& results, const ReplayConfig& config,
                              std::int32_t device) noexcept;

}  // namespace vramtrace
