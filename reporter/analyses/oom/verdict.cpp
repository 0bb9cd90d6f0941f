#include "analyses/oom/verdict.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "vramtrace/units.h"

namespace vramtrace {

std::uint64_t whatif_error_bound(std::uint64_t capacity) noexcept {
  const auto relative = static_cast<std::uint64_t>(std::ceil(static_cast<double>(capacity) * kWhatIfRelativeBound));
  return std::max(relative, kWhatIfAbsoluteBoundBytes);
}

std::string whatif_bound_source() {
  return fmt::format(
      "the larger of {:.0f} % of the capacity and {}; replays measured against real runs on the H200 were within "
      "36 MiB, 0.21 %, without a cap",
      kWhatIfRelativeBound * 100, format_size(kWhatIfAbsoluteBoundBytes));
}

const char* whatif_verdict_name(WhatIfVerdict v) noexcept {
  switch (v) {
    case WhatIfVerdict::fits:
      return "fits";
    case WhatIfVerdict::marginal:
      return "marginal";
    case WhatIfVerdict::does_not_fit:
      return "does_not_fit";
    case WhatIfVerdict::failed:
      break;
  }
  return "failed";
}

const char* whatif_verdict_words(WhatIfVerdict v) noexcept {
  switch (v) {
    case WhatIfVerdict::fits:
      return "fits";
    case WhatIfVerdict::marginal:
      return "marginal";
    case WhatIfVerdict::does_not_fit:
      return "does not fit";
    case WhatIfVerdict::failed:
      break;
  }
  return "failed";
}

Judgement judge_replay(const ReplayResult& at, const ReplayResult* with_bound, std::uint64_t capacity,
                       std::uint64_t bound) noexcept {
  Judgement j;
  j.bound_bytes = bound;
  // A fraction or a limit caps the allocator below the device: the margin is to that cap.
  capacity = allowed_bytes(at.config.settings, capacity);
  j.allowed_bytes = capacity;
  const std::int64_t peak = at.stats.reserved_bytes[kStatAll].peak;
  j.margin_bytes = std::max<std::int64_t>(0, static_cast<std::int64_t>(capacity) - peak);
  if (at.failed_allocs == 0) {
    j.verdict = static_cast<std::uint64_t>(j.margin_bytes) > bound ? WhatIfVerdict::fits : WhatIfVerdict::marginal;
    return j;
  }
  if (with_bound && with_bound->failed_allocs == 0) {
    j.verdict = WhatIfVerdict::marginal;
    const std::int64_t over = with_bound->stats.reserved_bytes[kStatAll].peak - static_cast<std::int64_t>(capacity);
    j.shortfall_bytes = static_cast<std::uint64_t>(std::max<std::int64_t>(0, over));
    return j;
  }
  j.verdict = WhatIfVerdict::does_not_fit;
  return j;
}

std::uint64_t allowed_bytes(const AllocatorSettings& s, std::uint64_t capacity) noexcept {
  std::uint64_t allowed = capacity;
  if (s.per_process_memory_fraction < 1.0)
    allowed =
        std::min(allowed, static_cast<std::uint64_t>(s.per_process_memory_fraction * static_cast<double>(capacity)));
  if (s.limit_bytes != 0) allowed = std::min(allowed, s.limit_bytes);
  return allowed;
}

std::vector<ReplayConfig> with_bound_lanes(const std::vector<ReplayConfig>& configs, std::uint64_t bound) {
  std::vector<ReplayConfig> out = configs;
  for (const ReplayConfig& c : configs) {
    // The bound's extra memory goes to what binds: the device, and a fraction or limit that caps
    // the allocator below it (else "an OOM also with the bound more" would test nothing).
    ReplayConfig b = c;
    b.capacity_bytes = c.capacity_bytes + bound;
    AllocatorSettings& s = b.settings;
    if (s.limit_bytes != 0) s.limit_bytes += bound;
    if (s.per_process_memory_fraction < 1.0) {
      const double wider =
          (s.per_process_memory_fraction * static_cast<double>(c.capacity_bytes) + static_cast<double>(bound)) /
          static_cast<double>(b.capacity_bytes);
      s.per_process_memory_fraction = std::min(1.0, wider);
    }
    out.push_back(b);
  }
  return out;
}

const ReplayResult* result_of(const std::vector<ReplayResult>& results, const ReplayConfig& config,
                              std::int32_t device) noexcept {
  for (const ReplayResult& r : results)
    if (r.device == device && r.config.capacity_bytes == config.capacity_bytes &&
        r.config.settings.text == config.settings.text)
      return &r;
  return nullptr;
}

}  // namespace vramtrace
