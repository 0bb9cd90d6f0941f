#include "analyses/oom/verdict.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "vramtrace/units.h"

namespace vramtrace {

namespace {
std::uint64_t relative(std::uint64_t bytes, double fraction) noexcept {
  return static_cast<std::uint64_t>(std::ceil(static_cast<double>(bytes) * fraction));
}
std::string size(std::uint64_t b) { return format_size(b); }
}  // namespace

std::uint64_t whatif_error_bound(std::uint64_t allowed) noexcept {
  return std::max(relative(allowed, kWhatIfRelativeBound), kWhatIfAbsoluteBoundBytes);
}

std::uint64_t measured_replay_error(std::uint64_t allowed) noexcept {
  return std::max(relative(allowed, kMeasuredReplayErrorRelative), kMeasuredReplayErrorBytes);
}

std::string whatif_bound_source() {
  return fmt::format(
      "the larger of {:.0f} % of what the setting lets the run use and {}; replays measured against real runs were "
      "within {}, {:.2f} %",
      kWhatIfRelativeBound * 100, format_size(kWhatIfAbsoluteBoundBytes), format_size(kMeasuredReplayErrorBytes),
      kMeasuredReplayErrorRelative * 100);
}

const char* whatif_verdict_name(WhatIfVerdict v) noexcept {
  switch (v) {
    case WhatIfVerdict::fits:
      return "fits";
    case WhatIfVerdict::marginal:
      return "marginal";
    case WhatIfVerdict::does_not_fit:
      return "does_not_fit";
    case WhatIfVerdict::withheld:
      return "withheld";
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
    case WhatIfVerdict::withheld:
      return "no verdict";
    case WhatIfVerdict::failed:
      break;
  }
  return "failed";
}

Judgement judge(const ReplayResult& at, const ReplayResult* with_bound, const JudgeContext& ctx) {
  Judgement j;
  j.replayed = true;
  j.allowed_bytes = allowed_bytes(at.config.settings, ctx.capacity_bytes);
  j.bound_bytes = whatif_error_bound(j.allowed_bytes);
  j.peak_reserved_bytes = at.stats.reserved_bytes[kStatAll].peak;
  j.peak_allocated_bytes = at.stats.allocated_bytes[kStatAll].peak;
  j.ooms = at.failed_allocs;
  j.partial = ctx.partial != nullptr;
  if (ctx.withheld) {
    j.verdict = WhatIfVerdict::withheld;
    j.withheld = *ctx.withheld;
    return j;
  }
  if (at.failed_allocs == 0) {
    const std::int64_t spare = static_cast<std::int64_t>(j.allowed_bytes) - j.peak_reserved_bytes;
    j.margin_bytes = static_cast<std::uint64_t>(std::max<std::int64_t>(0, spare));
    if (ctx.partial) {
      j.verdict = WhatIfVerdict::withheld;
      j.withheld = *ctx.partial;
    } else {
      j.verdict = *j.margin_bytes > j.bound_bytes ? WhatIfVerdict::fits : WhatIfVerdict::marginal;
    }
    return j;
  }
  // The recorded run has answered for its own settings on the memory it had: the bound stands
  // for what a replay cannot know about another setting.
  if (ctx.recorded_oom || !with_bound || with_bound->failed_allocs != 0) {
    j.verdict = WhatIfVerdict::does_not_fit;
    j.recorded_outcome = ctx.recorded_oom;
    return j;
  }
  j.verdict = WhatIfVerdict::marginal;
  const std::int64_t over =
      with_bound->stats.reserved_bytes[kStatAll].peak - static_cast<std::int64_t>(j.allowed_bytes);
  j.shortfall_bytes = static_cast<std::uint64_t>(std::max<std::int64_t>(0, over));
  j.short_beyond_error = *j.shortfall_bytes > measured_replay_error(j.allowed_bytes);
  return j;
}

Judgement withheld_judgement(const Withheld& why) {
  Judgement j;
  j.verdict = WhatIfVerdict::withheld;
  j.withheld = why;
  return j;
}

namespace {
// Higher is worse: the order in which worse_of keeps a device's judgement. A device that runs out
// of memory decides for the setting, whatever another device's replay could not say: the program
// dies there.
int severity(WhatIfVerdict v) noexcept {
  switch (v) {
    case WhatIfVerdict::fits:
      return 0;
    case WhatIfVerdict::marginal:
      return 1;
    case WhatIfVerdict::withheld:
      return 2;
    case WhatIfVerdict::does_not_fit:
      return 3;
    case WhatIfVerdict::failed:
      break;
  }
  return 4;
}
}  // namespace

Judgement worse_of(const Judgement& a, const Judgement& b) {
  Judgement w = severity(b.verdict) > severity(a.verdict) ? b : a;
  w.peak_reserved_bytes = std::max(a.peak_reserved_bytes, b.peak_reserved_bytes);
  w.peak_allocated_bytes = std::max(a.peak_allocated_bytes, b.peak_allocated_bytes);
  w.ooms = a.ooms + b.ooms;
  if (a.margin_bytes && b.margin_bytes && w.margin_bytes) w.margin_bytes = std::min(*a.margin_bytes, *b.margin_bytes);
  return w;
}

bool tune_candidate(const Judgement& j) noexcept {
  switch (j.verdict) {
    case WhatIfVerdict::fits:
      return true;
    case WhatIfVerdict::marginal:
      return !j.short_beyond_error;
    case WhatIfVerdict::withheld:
      return j.partial && j.margin_bytes.has_value();
    case WhatIfVerdict::does_not_fit:
    case WhatIfVerdict::failed:
      break;
  }
  return false;
}

std::string judgement_text(const Judgement& j) {
  switch (j.verdict) {
    case WhatIfVerdict::fits:
      return fmt::format("fits ({} spare > {} bound)", size(j.margin_bytes.value_or(0)), size(j.bound_bytes));
    case WhatIfVerdict::marginal:
      if (j.margin_bytes)
        return fmt::format("marginal ({} spare <= {} bound: verify)", size(*j.margin_bytes), size(j.bound_bytes));
      if (j.short_beyond_error)
        return fmt::format("marginal (OOM here, short by {}: more than the replay's measured error, not a candidate)",
                           size(j.shortfall_bytes.value_or(0)));
      return fmt::format("marginal (OOM here, short by {}, none with {} more: verify)",
                         size(j.shortfall_bytes.value_or(0)), size(j.bound_bytes));
    case WhatIfVerdict::does_not_fit:
      if (j.recorded_outcome) return "does not fit (the recorded run ran out of memory)";
      return fmt::format("does not fit (OOM also with {} more)", size(j.bound_bytes));
    case WhatIfVerdict::withheld:
      if (j.partial && j.margin_bytes)
        return fmt::format("no verdict (gets through the recorded part with {} spare)", size(*j.margin_bytes));
      return "no verdict";
    case WhatIfVerdict::failed:
      break;
  }
  return j.error.empty() ? "failed" : "failed: " + j.error;
}

template <class Json>
void put_judgement(Json& o, const Judgement& j) {
  auto opt = [](const std::optional<std::uint64_t>& v) { return v ? Json(*v) : Json(nullptr); };
  const bool firm = j.verdict != WhatIfVerdict::withheld && j.verdict != WhatIfVerdict::failed;
  o["verdict"] = firm ? Json(whatif_verdict_name(j.verdict)) : Json(nullptr);
  o["withheld"] = j.withheld ? Json(j.withheld->why) : Json(nullptr);
  o["how_to_get_a_verdict"] = j.withheld && !j.withheld->how.empty() ? Json(j.withheld->how) : Json(nullptr);
  o["fits"] = j.verdict == WhatIfVerdict::fits;
  // Nothing replayed: no figure is known, so none is given (0 would be a figure).
  auto figure = [&](auto v) { return j.replayed ? Json(v) : Json(nullptr); };
  o["allowed_bytes"] = figure(j.allowed_bytes);
  o["bound_bytes"] = figure(j.bound_bytes);
  o["margin_bytes"] = opt(j.margin_bytes);
  o["shortfall_bytes"] = opt(j.shortfall_bytes);
  o["short_beyond_measured_error"] = j.short_beyond_error;
  o["recorded_outcome"] = j.recorded_outcome;
  o["partial"] = j.partial;
  o["ooms"] = figure(j.ooms);
  o["peak_reserved_bytes"] = figure(j.peak_reserved_bytes);
  o["peak_allocated_bytes"] = figure(j.peak_allocated_bytes);
  o["error"] = j.error.empty() ? Json(nullptr) : Json(j.error);
}
template void put_judgement(nlohmann::json&, const Judgement&);
template void put_judgement(nlohmann::ordered_json&, const Judgement&);

nlohmann::ordered_json judgement_json(const Judgement& j) {
  nlohmann::ordered_json o = nlohmann::ordered_json::object();
  put_judgement(o, j);
  return o;
}

std::uint64_t allowed_bytes(const AllocatorSettings& s, std::uint64_t capacity) noexcept {
  std::uint64_t allowed = capacity;
  if (s.per_process_memory_fraction < 1.0)
    allowed =
        std::min(allowed, static_cast<std::uint64_t>(s.per_process_memory_fraction * static_cast<double>(capacity)));
  if (s.limit_bytes != 0) allowed = std::min(allowed, s.limit_bytes);
  return allowed;
}

ReplayConfig bound_lane(const ReplayConfig& c) {
  // The bound's extra memory goes to what binds: the device, and a fraction or limit that caps
  // the allocator below it (else "an OOM also with the bound more" would test nothing).
  const std::uint64_t bound = whatif_error_bound(allowed_bytes(c.settings, c.capacity_bytes));
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
  return b;
}

std::vector<ReplayConfig> with_bound_lanes(const std::vector<ReplayConfig>& configs) {
  std::vector<ReplayConfig> out = configs;
  for (const ReplayConfig& c : configs) out.push_back(bound_lane(c));
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
