// run_whatifs (analyses/oom/oom_whatif.h): plans the rows, replays them on each device's capacity
// and the bound's lanes, and judges every device's replays with judge() within what the input
// supports (analyses/oom/verdict_support.h).
#include <fmt/format.h>

#include <algorithm>
#include <map>

#include "analyses/oom/oom_whatif.h"

namespace vramtrace {

const char* whatif_covers_name(WhatIfCovers c) noexcept {
  switch (c) {
    case WhatIfCovers::to_failure:
      return "to_failure";
    case WhatIfCovers::full_trace:
      return "full_trace";
    case WhatIfCovers::whole_trace:
      break;
  }
  return "whole_trace";
}

std::vector<const WhatIf*> WhatIfRun::shown_rows() const {
  std::vector<const WhatIf*> out;
  for (const WhatIf& w : rows)
    if (w.shown) out.push_back(&w);
  return out;
}

namespace {

// The --full trace against the trace up to its failure: notes and warnings on `run`.
FullTraceFacts check_full_trace(const std::string& path, const std::string& full, WhatIfRun& run) {
  run.covers = WhatIfCovers::full_trace;
  run.full_path = full;
  const TraceMatch match = match_traces(path, full);
  if (match.first_difference.empty())
    run.notes.push_back(
        fmt::format("the full trace makes the same {} allocations as this one up to its failure", match.compared));
  else
    run.warnings.push_back(fmt::format(
        "the full trace differs from this one at {} ({} of {} allocations before the failure match): it may not be "
        "the same program or input, and the verdicts judge the full trace only",
        match.first_difference, match.matching, match.compared));
  return {match.full_ooms, match.full_incomplete, match.matching, match.compared};
}

// What the replays of a trace that ends at its OOM cover, in a note.
void note_to_failure(const FailureCoverage& cov, WhatIfRun& run) {
  run.covers = WhatIfCovers::to_failure;
  const std::string steps = cov.marks_before ? fmt::format(
                                                   " The trace records {} mark{} (steps) before the failure; the "
                                                   "replays cover those and the failing step up to the failed request.",
                                                   cov.marks_before, cov.marks_before == 1 ? "" : "s")
                                             : "";
  run.notes.push_back(fmt::format(
      "the trace ends at its OOM ({} allocation{} after it, {} before): the replays cover the run up to the failed "
      "request; the rest of the run was never recorded.{}",
      cov.allocs_after, cov.allocs_after == 1 ? "" : "s", cov.allocs_before, steps));
}

// One row per setting asked (and the trace's own, not shown, when the trace recorded an OOM and no
// row asks for them), with its parsed settings; a refused setting is a row with its error.
std::vector<std::optional<AllocatorSettings>> plan_rows(const TraceModel& m, const WhatIfOptions& o, bool recorded_oom,
                                                        WhatIfRun& run) {
  std::vector<std::string> asked = o.settings;
  if (asked.empty())
    asked = whatif_settings();
  else if (!o.settings_replace_own && !asked.front().empty())
    asked.insert(asked.begin(), "");
  const std::string own = AllocatorSettings::parse_recorded(m.header.settings).to_string();
  std::vector<std::optional<AllocatorSettings>> parsed;
  bool own_asked = false;
  auto add = [&](const std::string& setting, const std::string& conf, bool shown) {
    WhatIf w;
    w.settings = setting;
    w.conf = conf;
    w.shown = shown;
    AllocatorSettings s;
    std::string err;
    if (!AllocatorSettings::parse(conf, s, err)) {
      w.error = err;
      w.judgement.error = err;
      parsed.emplace_back();
    } else {
      s.text = conf;
      w.own = s.to_string() == own;
      own_asked = own_asked || w.own;
      parsed.emplace_back(std::move(s));
    }
    run.rows.push_back(std::move(w));
  };
  for (const auto& extra : asked) {
    std::string conf = extra;
    if (!o.settings_replace_own) {
      conf = m.header.settings;
      if (!extra.empty()) conf = conf.empty() ? extra : conf + "," + extra;
    }
    add(extra, conf, true);
  }
  if (recorded_oom && !own_asked) add(m.header.settings, m.header.settings, false);
  return parsed;
}

// The OOM entries of `m` to put back (the OOMs, not the attempts the program retried), by index.
std::vector<std::uint64_t> oom_entries(const TraceModel& m) {
  std::vector<std::uint64_t> out;
  for (const auto& d : m.devices)
    for (const auto& o : d.ooms)
      if (o.fate == OomFate::oom) out.push_back(o.event_index);
  std::sort(out.begin(), out.end());
  return out;
}

// The records of one device only: a pass of the replay per device when their capacities differ.
class DeviceFilter : public TraceReader {
 public:
  DeviceFilter(TraceReader& inner, std::int32_t device) : inner_(inner), device_(device) {}
  const TraceHeader& header() const override { return inner_.header(); }
  bool next(TraceRecord& out) override {
    while (inner_.next(out))
      if (out.device == device_ || out.action == Action::mark) return true;
    return false;
  }
  std::string position() const override { return inner_.position(); }
  bool incomplete() const override { return inner_.incomplete(); }
  std::string incomplete_reason() const override { return inner_.incomplete_reason(); }
  std::uint64_t lost_events() const override { return inner_.lost_events(); }
  std::uint64_t bytes_read() const override { return inner_.bytes_read(); }
  std::uint64_t bytes_total() const override { return inner_.bytes_total(); }

 private:
  TraceReader& inner_;
  std::int32_t device_;
};

// Each device's capacity (whatif_capacity of its own OOMs, cap and total), by device.
std::map<std::int32_t, WhatIfCapacity> device_capacities(const TraceModel& m, const std::vector<OomCase>& cases,
                                                         std::optional<std::uint64_t> given) {
  std::map<std::int32_t, WhatIfCapacity> out;
  for (const DeviceModel& d : m.devices) {
    std::vector<OomCase> own;
    for (const OomCase& c : cases)
      if (c.device == d.device) own.push_back(c);
    if (own.empty()) {  // whatif_capacity takes the device of its first case
      OomCase any;
      any.device = d.device;
      any.last_state = true;
      own.push_back(any);
    }
    out[d.device] = whatif_capacity(m, own, given);
  }
  return out;
}

// The tag that keeps the configs of two rows (or a row and its reproduction lane) apart in one
// replay, which matches results to configs by their text and capacity.
std::string lane_text(const std::string& conf, std::size_t row, bool reproduction) {
  return fmt::format("{}\x1f{}{}", conf, row, reproduction ? "r" : "");
}

// The configs of one pass: each row on `cap`, its bound lane, and the trace's own settings on what
// the program had where that differs from `cap` (the reproduction lane).
std::vector<ReplayConfig> pass_configs(const std::vector<std::optional<AllocatorSettings>>& parsed,
                                       const WhatIfRun& run, const WhatIfCapacity& cap) {
  std::vector<ReplayConfig> configs;
  const std::uint64_t bytes = cap.bytes ? cap.bytes : kStandInCapacityBytes;
  for (std::size_t i = 0; i < parsed.size(); ++i) {
    if (!parsed[i]) continue;
    ReplayConfig c;
    c.settings = *parsed[i];
    c.settings.text = lane_text(run.rows[i].conf, i, false);
    c.capacity_bytes = bytes;
    configs.push_back(c);
    if (run.rows[i].own && cap.recorded_bytes && cap.recorded_bytes < bytes) {
      ReplayConfig r = c;
      r.settings.text = lane_text(run.rows[i].conf, i, true);
      r.capacity_bytes = cap.recorded_bytes;
      configs.push_back(r);
    }
  }
  return with_bound_lanes(configs);
}

// Whether two replays of a device made the same run: a setting that changes nothing the replay
// sees shares the trace's own outcome.
bool same_run(const ReplayResult& a, const ReplayResult& b) {
  return a.failed_allocs == b.failed_allocs &&
         a.stats.reserved_bytes[kStatAll].peak == b.stats.reserved_bytes[kStatAll].peak &&
         a.stats.allocated_bytes[kStatAll].peak == b.stats.allocated_bytes[kStatAll].peak &&
         a.stats.num_device_alloc == b.stats.num_device_alloc &&
         (a.first_oom ? b.first_oom && a.first_oom->alloc_index == b.first_oom->alloc_index : !b.first_oom);
}

// What judge_device needs of the run beyond the replays.
struct DeviceFacts {
  std::int32_t device = 0;
  WhatIfCapacity capacity;
  bool recorded_oom = false;  ///< the trace recorded an OOM on this device
};

// Judges every row on one device from that device's results of `rep`; returns the trace's own
// settings' reproduction check: nullopt when it holds (or there is nothing to check).
std::optional<Withheld> judge_device(WhatIfRun& run, const std::vector<std::optional<AllocatorSettings>>& parsed,
                                     const ReplayReport& rep, const DeviceFacts& f, std::uint64_t entries,
                                     std::uint64_t recorded, const std::string& path) {
  const ReplayResult* own_result = nullptr;
  std::optional<Withheld> reproduction;
  for (std::size_t i = 0; i < run.rows.size(); ++i) {
    WhatIf& w = run.rows[i];
    if (!parsed[i]) continue;
    ReplayConfig c;
    c.settings.text = lane_text(w.conf, i, false);
    c.capacity_bytes = f.capacity.bytes ? f.capacity.bytes : kStandInCapacityBytes;
    const ReplayResult* r = result_of(rep.results, c, f.device);
    if (!r) continue;
    ReplayConfig lane = c;
    lane.settings = *parsed[i];
    lane.settings.text = c.settings.text;
    const std::optional<Withheld> setting = setting_support(*parsed[i], f.capacity);
    JudgeContext ctx;
    ctx.capacity_bytes = r->config.capacity_bytes;
    ctx.partial = run.partial ? &*run.partial : nullptr;
    ctx.recorded_oom = w.own && f.recorded_oom && f.capacity.within_recorded();
    // The recorded run's outcome under its own settings is a fact, whatever the replay models of
    // them; what the trace as a whole cannot support stays withheld.
    ctx.withheld = run.withheld ? &*run.withheld : setting && !ctx.recorded_oom ? &*setting : nullptr;
    Judgement j = judge(*r, result_of(rep.results, bound_lane(lane), f.device), ctx);
    if (w.own && !own_result) {
      own_result = r;
      // Rule (6): the own settings must run out of memory on what the program had: the trace's own
      // figure, or a smaller --capacity (the user's word for the cap the trace does not record).
      ReplayConfig at_recorded = c;
      at_recorded.settings.text = lane_text(w.conf, i, true);
      at_recorded.capacity_bytes = f.capacity.recorded_bytes;
      const ReplayResult* rr = result_of(rep.results, at_recorded, f.device);
      if (!rr) rr = r;
      if (f.recorded_oom && rr)
        reproduction = reproduction_support(
            recorded, entries, rr->failed_allocs,
            static_cast<std::uint64_t>(std::max<std::int64_t>(
                0, static_cast<std::int64_t>(rr->config.capacity_bytes) - rr->stats.reserved_bytes[kStatAll].peak)),
            f.capacity, path);
    }
    w.results.push_back(*r);
    w.per_device.push_back(j);
  }
  // A setting that changes nothing the replay sees makes the trace's own run: its outcome too.
  if (own_result && f.recorded_oom && f.capacity.within_recorded() && !run.withheld)
    for (WhatIf& w : run.rows)
      if (!w.own && !w.per_device.empty() && w.results.back().device == f.device &&
          w.per_device.back().verdict != WhatIfVerdict::withheld && same_run(w.results.back(), *own_result) &&
          own_result->failed_allocs > 0) {
        Judgement& j = w.per_device.back();
        j.verdict = WhatIfVerdict::does_not_fit;
        j.recorded_outcome = true;
        j.withheld.reset();
        j.margin_bytes.reset();
        j.shortfall_bytes.reset();
        j.short_beyond_error = false;
      }
  return reproduction;
}

// Each row's judgement: the worst of its devices' (worse_of); a row without any result failed.
void merge_devices(WhatIfRun& run) {
  for (WhatIf& w : run.rows) {
    if (!w.error.empty()) {
      w.judgement.verdict = WhatIfVerdict::failed;
      continue;
    }
    if (w.per_device.empty()) {
      if (run.withheld) {
        w.judgement = withheld_judgement(*run.withheld);
      } else {
        w.error = "no replay result";
        w.judgement.verdict = WhatIfVerdict::failed;
        w.judgement.error = w.error;
      }
      continue;
    }
    w.judgement = w.per_device.front();
    for (std::size_t d = 1; d < w.per_device.size(); ++d) w.judgement = worse_of(w.judgement, w.per_device[d]);
  }
}

// Withholds every row's verdict for `why` (the figures of the replays stay).
void withhold_all(WhatIfRun& run, const Withheld& why) {
  run.withheld = why;
  for (WhatIf& w : run.rows)
    for (Judgement& j : w.per_device) {
      j.verdict = WhatIfVerdict::withheld;
      j.withheld = why;
      j.shortfall_bytes.reset();
      j.short_beyond_error = false;
      j.recorded_outcome = false;
    }
}

}  // namespace

WhatIfRun run_whatifs(const std::string& path, const TraceModel& m, const WhatIfOptions& options) {
  WhatIfRun run;
  // What the replays will say of the trace they read; the model's word until then (a trace that
  // is not replayed keeps it).
  run.header = m.header;
  run.events = m.events;
  run.incomplete = m.incomplete;
  run.lost_events = m.lost_events;
  const std::vector<OomCase> cases = oom_cases(m, {options.capacity_bytes});
  run.capacity = whatif_capacity(m, cases, options.capacity_bytes);
  run.replayed_capacity_bytes = run.capacity.bytes ? run.capacity.bytes : kStandInCapacityBytes;
  const FailureCoverage cov = failure_coverage(m);
  run.allocs_after_failure = cov.allocs_after;
  run.marks_before_failure = cov.marks_before;
  const std::vector<std::uint64_t> entries = oom_entries(m);
  std::uint64_t recorded = 0;  // OOMs the trace records, with or without an entry
  for (const auto& d : m.devices) recorded += d.oom_count.ooms;
  bool contradict = false;
  for (const OomCase& c : cases) contradict = contradict || c.diagnosis.code == DiagnosisCode::inconsistent;

  std::optional<FullTraceFacts> full;
  if (!options.full_path.empty())
    full = check_full_trace(path, options.full_path, run);
  else if (!entries.empty() && cov.ends_at_failure)
    note_to_failure(cov, run);
  const TraceSupport support =
      trace_support(m, run.capacity, run.covers == WhatIfCovers::to_failure, full ? &*full : nullptr, contradict);
  run.withheld = support.none;
  run.partial = support.partial;
  const std::vector<std::optional<AllocatorSettings>> parsed = plan_rows(m, options, recorded > 0, run);
  if (!support.replayable) {
    merge_devices(run);  // withheld, without figures: a replay would model nothing that happened
    return run;
  }
  // One pass when every device has the same capacity (one device, most often); else one a device.
  const std::map<std::int32_t, WhatIfCapacity> caps = device_capacities(m, cases, options.capacity_bytes);
  std::vector<std::vector<std::int32_t>> passes;
  std::vector<std::int32_t> all;
  bool same = true;
  for (const auto& [d, c] : caps) {
    all.push_back(d);
    same = same && c.bytes == caps.begin()->second.bytes && c.recorded_bytes == caps.begin()->second.recorded_bytes;
  }
  if (same || all.size() <= 1)
    passes.push_back(all);
  else
    for (std::int32_t d : all) passes.push_back({d});
  std::optional<Withheld> not_reproduced;
  for (const auto& devices : passes) {
    const WhatIfCapacity& pass_cap = devices.empty() ? run.capacity : caps.at(devices.front());
    const std::vector<ReplayConfig> lanes = pass_configs(parsed, run, pass_cap);
    // The OOMs of this trace are put back by their index; a --full trace is another recording,
    // whose OOMs (if any) are all put back.
    auto reader = open_trace(full ? options.full_path : path);
    OomAsAllocReader wrapped(*reader, full ? std::nullopt : std::optional<std::vector<std::uint64_t>>(entries));
    std::optional<DeviceFilter> one;
    if (passes.size() > 1) one.emplace(wrapped, devices.front());
    const ReplayReport rep = replay(one ? static_cast<TraceReader&>(*one) : wrapped, lanes, options.replay);
    run.header = rep.header;
    run.events = passes.size() > 1 ? m.events : rep.events;
    run.alloc_requests += rep.alloc_requests;
    run.incomplete = rep.incomplete;
    run.lost_events = rep.lost_events;
    if (run.replay_notes.empty()) run.replay_notes = rep.notes;
    // The devices the replay saw, in order (a device with no event has no result).
    std::vector<std::int32_t> seen;
    for (const ReplayResult& r : rep.results)
      if (std::find(seen.begin(), seen.end(), r.device) == seen.end()) seen.push_back(r.device);
    std::sort(seen.begin(), seen.end());
    for (std::int32_t d : seen) {
      DeviceFacts f;
      f.device = d;
      f.capacity = caps.count(d) ? caps.at(d) : pass_cap;
      for (const DeviceModel& dm : m.devices)
        f.recorded_oom = f.recorded_oom || (dm.device == d && dm.oom_count.ooms > 0);
      const auto why = judge_device(run, parsed, rep, f, entries.size(), recorded, path);
      if (why && !not_reproduced) not_reproduced = why;
    }
  }
  // Rule (6) of Note [what a verdict needs]: the trace's own settings must run out of memory where
  // the trace did.
  if (!run.withheld && not_reproduced) {
    run.reproduces = false;
    withhold_all(run, *not_reproduced);
  }
  merge_devices(run);
  return run;
}

}  // namespace vramtrace
