// The verdict of one what-if replay: fits, marginal or does not fit, with its margin and the error
// bound it is judged against. Shared by `vramtrace oom` (its replays under other settings) and
// `vramtrace replay` (its --conf columns).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

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
/// The bound is the larger of kWhatIfRelativeBound of the simulated capacity and
/// kWhatIfAbsoluteBoundBytes (two segments of the largest size class that PyTorch rounds small
/// requests to, 20 MiB: one segment's difference in a replay moves the peak by a segment).
/// Measured (tests/gpu/whatif_accuracy.py, H200, 2026-12-01, docs/benchmarks.md): replays of
/// BERT-base with variable lengths and GPT-2 124M under the six settings `oom` tries, against the
/// same programs run alone without a cap, gave peak reserved memory within 0 to +36 MiB (at most
/// 0.21 %), never below the real peak. That measures the allocator model only; under a cap the
/// program itself behaves differently (PyTorch frees its cache and retries, libraries size their
/// workspaces from the free memory), which is where the failures at 1 to 11 MiB spare above came
/// from. So the bound stays well above the measured model error.
inline constexpr double kWhatIfRelativeBound = 0.02;
inline constexpr std::uint64_t kWhatIfAbsoluteBoundBytes = 40ull << 20;

/// The error bound of a replay on a simulated device of `capacity_bytes` (Note [what-if error
/// bound]), in bytes. Pure.
std::uint64_t whatif_error_bound(std::uint64_t capacity_bytes) noexcept;

/// One sentence saying where the bound comes from, for reports.
std::string whatif_bound_source();

/// What a replay under one setting says.
enum class WhatIfVerdict : std::uint8_t {
  fits,          ///< no OOM, and the spare (capacity - peak reserved) is above the bound
  marginal,      ///< no OOM with spare within the bound, or an OOM that the bound's extra memory removes
  does_not_fit,  ///< runs out of memory even on a device larger by the bound
  failed,        ///< the replay could not run (a setting refused, a replay error)
};

/// Stable name ("fits", "marginal", "does_not_fit", "failed"), used in --json. Never null.
const char* whatif_verdict_name(WhatIfVerdict v) noexcept;
/// Words for people ("fits", "marginal", "does not fit", "failed"). Never null.
const char* whatif_verdict_words(WhatIfVerdict v) noexcept;

/// A replay's verdict and the figures behind it.
struct Judgement {
  WhatIfVerdict verdict = WhatIfVerdict::failed;
  std::int64_t margin_bytes = 0;  ///< capacity - peak reserved at the capacity (never negative: the device caps it)
  std::uint64_t bound_bytes = 0;
  /// Marginal with an OOM: how much more than the capacity the replay with the bound's extra
  /// memory reserved at its peak (0 when it stayed below the capacity: the OOM came from the
  /// layout, not the amount). Empty otherwise.
  std::optional<std::uint64_t> shortfall_bytes;
  /// What the setting let the allocator reserve (allowed_bytes): the capacity, or less under a
  /// memory fraction or a limit. The margin is measured from it.
  std::uint64_t allowed_bytes = 0;
};

/// The bytes a setting lets the allocator reserve on a device of `capacity_bytes`: the capacity,
/// or `per_process_memory_fraction` of it, or `limit`, whichever is least (the allocator's
/// allowed_memory(), as PyTorch's set_per_process_memory_fraction caps it). Pure.
std::uint64_t allowed_bytes(const AllocatorSettings& settings, std::uint64_t capacity_bytes) noexcept;

/// Judges one setting from its replay on the simulated capacity and its replay on capacity +
/// bound (the same trace, the same setting; null when that lane was not run, then an OOM is
/// `does_not_fit`). The margin is measured from what the setting allows on `capacity_bytes`
/// (allowed_bytes: a memory fraction or a limit caps it below the capacity). Pure.
Judgement judge_replay(const ReplayResult& at_capacity, const ReplayResult* with_bound, std::uint64_t capacity_bytes,
                       std::uint64_t bound_bytes) noexcept;

/// `configs` followed by a copy of each with capacity_bytes + `bound_bytes`: replay all of them in
/// one pass, then find each config's pair with bound_lane_of.
std::vector<ReplayConfig> with_bound_lanes(const std::vector<ReplayConfig>& configs, std::uint64_t bound_bytes);

/// The result of `config` (settings text and capacity) on `device` among `results`, or null.
const ReplayResult* result_of(const std::vector<ReplayResult>& results, const ReplayConfig& config,
                              std::int32_t device) noexcept;

}  // namespace vramtrace
