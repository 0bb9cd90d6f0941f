#include "analyses/oom/oom_whatif.h"

#include <fmt/format.h>

#include <algorithm>

#include "analyses/replay.h"
#include "vramtrace/settings.h"
#include "vramtrace/units.h"

namespace vramtrace {

namespace {
constexpr DevicePtr kInjectedBase = 0xfff0000000000000ull;  // far above any device address
std::string fb(std::int64_t v) { return format_bytes(v, ByteStyle::pytorch); }
}  // namespace

bool OomAsAllocReader::next(TraceRecord& out) {
  if (!queue_.empty()) {
    out = queue_.front();
    queue_.erase(queue_.begin());
    return true;
  }
  if (!inner_.next(out)) return false;
  const std::uint64_t index = read_++;
  if (out.action != Action::oom || out.size == 0) return true;
  if (put_back_ && !std::binary_search(put_back_->begin(), put_back_->end(), index)) return true;
  TraceRecord a = out;
  a.action = Action::alloc;
  a.addr = kInjectedBase + (injected_++) * (1ull << 40);
  TraceRecord fr = a;
  fr.action = Action::free_requested;
  TraceRecord fc = a;
  fc.action = Action::free_completed;
  out = a;
  queue_.push_back(fr);
  queue_.push_back(fc);
  return true;
}

std::vector<std::string> whatif_settings() {
  return {"",
          "expandable_segments:True",
          "max_split_size_mb:20",
          "max_split_size_mb:128",
          "max_split_size_mb:512",
          "roundup_power2_divisions:4"};
}

WhatIfCapacity whatif_capacity(const TraceModel& m, const std::vector<OomCase>& cases,
                               std::optional<std::uint64_t> capacity) {
  if (capacity) return {*capacity, "--capacity"};
  // The device of the first case: a process's devices may differ in size (or cap).
  const std::int32_t device = cases.empty() ? 0 : cases.front().device;
  WhatIfCapacity best;
  auto consider = [&](std::uint64_t bytes, std::string source) {
    if (bytes && (!best.bytes || bytes < best.bytes)) best = {bytes, std::move(source)};
  };
  for (const auto& c : cases) {
    if (c.last_state || !c.figures.reserved || !c.figures.device_free) continue;
    consider(*c.figures.reserved + *c.figures.device_free,
             "what the allocator could reach at the first OOM: reserved + free on the device");
    break;
  }
  if (const TraceHeader::Cap* cap = m.header.cap_of(device)) consider(cap->bytes, cap->what);
  consider(m.header.total_bytes_of(device), "the device total");
  return best;
}

FailureCoverage failure_coverage(const TraceModel& m) {
  FailureCoverage cov;
  const DeviceModel* last = nullptr;
  for (const auto& d : m.devices)
    if (!d.ooms.empty() && (!last || d.ooms.back().event_index > last->ooms.back().event_index)) last = &d;
  if (!last) return cov;
  const OomRecord& o = last->ooms.back();
  const std::int64_t before = o.state.stats.allocation[kStatAll].allocated;
  const std::int64_t end = last->stats.allocation[kStatAll].allocated;
  cov.allocs_before = static_cast<std::uint64_t>(std::max<std::int64_t>(before, 0));
  cov.allocs_after = static_cast<std::uint64_t>(std::max<std::int64_t>(end - before, 0));
  // Note [a trace that ends at its OOM]: at most 1 % of the allocations before it follow it.
  cov.ends_at_failure = ends_at_failure(cov.allocs_before, cov.allocs_after);
  for (const auto& d : m.devices) {
    std::uint64_t marks = 0;
    for (const auto& k : d.markers) marks += k.kind == "mark" && k.time_ns <= o.time_ns;
    cov.marks_before = std::max(cov.marks_before, marks);
  }
  return cov;
}

TraceMatch match_traces(const std::string& trace, const std::string& full) {
  TraceMatch out;
  auto a = open_trace(trace);
  auto b = open_trace(full);
  // The next alloc entry of `r`; false at the end, or at the first oom when `stop_at_oom`.
  auto next_alloc = [](TraceReader& r, TraceRecord& rec, bool stop_at_oom, std::uint64_t* ooms) {
    while (r.next(rec)) {
      if (rec.action == Action::oom) {
        if (ooms) ++*ooms;
        if (stop_at_oom) return false;
      }
      if (rec.action == Action::alloc) return true;
    }
    return false;
  };
  TraceRecord ra, rb;
  bool a_done = false, b_done = false, diverged = false;
  for (;;) {
    const bool have_a = !a_done && next_alloc(*a, ra, true, nullptr);
    const bool have_b = !b_done && next_alloc(*b, rb, false, &out.full_ooms);
    a_done = !have_a;
    b_done = !have_b;
    if (a_done && b_done) break;
    if (have_a) ++out.compared;
    if (have_b) ++out.full_allocs;
    if (diverged || !have_a) continue;
    if (!have_b) {
      diverged = true;
      out.first_difference =
          fmt::format("allocation #{}: the full trace has only {}", out.compared - 1, out.full_allocs);
    } else if (ra.device == rb.device && ra.size == rb.size) {
      ++out.matching;
    } else {
      diverged = true;
      out.first_difference = fmt::format("allocation #{} ({} B on device {} here, {} B on device {} in the full trace)",
                                         out.compared - 1, ra.size, ra.device, rb.size, rb.device);
    }
  }
  out.full_incomplete = b->incomplete();
  return out;
}

namespace {

// The worst verdict of a setting's devices, and its figures.
void merge_device(WhatIf& w, const ReplayResult& r, const Judgement& j, bool first) {
  w.peak_reserved = std::max(w.peak_reserved, r.stats.reserved_bytes[kStatAll].peak);
  w.peak_allocated = std::max(w.peak_allocated, r.stats.allocated_bytes[kStatAll].peak);
  w.ooms += r.failed_allocs;
  if (first || static_cast<int>(j.verdict) > static_cast<int>(w.verdict)) {
    w.verdict = j.verdict;
    w.shortfall_bytes = j.shortfall_bytes;
  }
  w.margin_bytes = first ? j.margin_bytes : std::min(w.margin_bytes, j.margin_bytes);
}

}  // namespace

WhatIfRun run_whatifs(const std::string& path, const TraceModel& m, const WhatIfCapacity& capacity,
                      const WhatIfOptions& options) {
  WhatIfRun run;
  run.capacity_bytes = capacity.bytes;
  run.capacity_source = capacity.source;
  run.bound_bytes = options.bound_bytes ? options.bound_bytes : whatif_error_bound(capacity.bytes);
  const FailureCoverage cov = failure_coverage(m);
  run.allocs_after_failure = cov.allocs_after;
  run.marks_before_failure = cov.marks_before;
  bool has_oom = false;       // an oom entry: the failed request is put back at its moment
  bool recorded_oom = false;  // any OOM the trace records, with or without an entry
  for (const auto& d : m.devices) {
    has_oom = has_oom || !d.ooms.empty();
    recorded_oom = recorded_oom || !d.ooms.empty() || d.oom_count.ooms > 0;
  }

  std::string replayed = path;
  if (!options.full_path.empty()) {
    replayed = options.full_path;
    run.covers = WhatIfCovers::full_trace;
    run.full_path = options.full_path;
    const TraceMatch match = match_traces(path, options.full_path);
    if (match.first_difference.empty())
      run.notes.push_back(
          fmt::format("the full trace makes the same {} allocations as this one up to its failure", match.compared));
    else
      run.warnings.push_back(fmt::format(
          "the full trace differs from this one at {} ({} of {} allocations before the failure match): it may not be "
          "the same program or input, and the verdicts judge the full trace only",
          match.first_difference, match.matching, match.compared));
    if (match.full_ooms > 0)
      run.warnings.push_back(fmt::format(
          "the full trace records {} OOM{} itself: it is not a complete run, so it covers no more than this one",
          match.full_ooms, match.full_ooms == 1 ? "" : "s"));
    if (match.full_incomplete)
      run.warnings.push_back(
          "the full trace ends abruptly (cut, or its process did not finish): it is not a complete run");
  } else if (has_oom && cov.ends_at_failure) {
    run.covers = WhatIfCovers::to_failure;
    std::string steps = cov.marks_before
                            ? fmt::format(
                                  " The trace records {} mark{} (steps) before the failure; the replays cover "
                                  "those and the failing step up to the failed request.",
                                  cov.marks_before, cov.marks_before == 1 ? "" : "s")
                            : "";
    run.notes.push_back(fmt::format(
        "the trace ends at its OOM ({} allocation{} after it, {} before): the replays cover the run up to the failed "
        "request, and \"fits\" means it gets past the failure; the rest of the run was never recorded.{} To judge the "
        "whole run, give a complete trace of the same program (a run without the cap, or on a larger device) with "
        "--full TRACE.",
        cov.allocs_after, cov.allocs_after == 1 ? "" : "s", cov.allocs_before, steps));
  }

  if (options.full_path.empty() && m.incomplete)
    run.notes.push_back(fmt::format(
        "the trace ends abruptly ({}): the replays cover it up to its last event, and the request that failed, if "
        "any, is not in it; the rest of the run was never recorded",
        m.incomplete_reason));

  std::vector<ReplayConfig> configs;
  std::vector<std::string> names;
  std::vector<WhatIf> refused;
  std::vector<std::string> settings = whatif_settings();
  if (!options.settings.empty()) {
    settings = {""};
    for (const auto& x : options.settings)
      if (!x.empty()) settings.push_back(x);
  }
  for (const auto& extra : settings) {
    std::string conf = m.header.settings;
    if (!extra.empty()) conf = conf.empty() ? extra : conf + "," + extra;
    ReplayConfig c;
    std::string err;
    if (!AllocatorSettings::parse(conf, c.settings, err)) {
      WhatIf w;
      w.settings = extra;
      w.error = err;
      refused.push_back(w);
      continue;
    }
    c.capacity_bytes = capacity.bytes;
    configs.push_back(c);
    names.push_back(extra);
  }
  // The OOMs only: a failed attempt the program retried is followed by its allocation already.
  // The indices are the model's, so they pick out this trace's records; a --full trace is
  // another recording, whose OOMs (if any) are all put back.
  std::optional<std::vector<std::uint64_t>> put_back;
  if (replayed == path) {
    put_back.emplace();
    for (const auto& d : m.devices)
      for (const auto& o : d.ooms)
        if (o.fate == OomFate::oom) put_back->push_back(o.event_index);
    std::sort(put_back->begin(), put_back->end());
  }
  const std::vector<ReplayConfig> lanes = with_bound_lanes(configs, run.bound_bytes);
  auto reader = open_trace(replayed);
  OomAsAllocReader wrapped(*reader, std::move(put_back));
  ReplayReport rep = replay(wrapped, lanes);
  for (std::size_t i = 0; i < configs.size(); ++i) {
    WhatIf w;
    w.settings = names[i];
    bool first = true;
    for (const auto& r : rep.results) {
      if (r.config.settings.text != configs[i].settings.text || r.config.capacity_bytes != capacity.bytes) continue;
      const ReplayResult* wide = result_of(rep.results, lanes[configs.size() + i], r.device);
      merge_device(w, r, judge_replay(r, wide, capacity.bytes, run.bound_bytes), first);
      first = false;
    }
    if (first) {
      w.error = "no replay result";
      w.verdict = WhatIfVerdict::failed;
    }
    w.fits = !first && w.ooms == 0;
    run.rows.push_back(w);
  }
  for (auto& w : refused) run.rows.push_back(std::move(w));
  // The trace's own row must reproduce the trace's OOM (docs/reports.md). The bound stands for
  // what a replay cannot know about another setting; for the trace's own settings the recorded
  // run has answered, so an OOM on the capacity is "does not fit" whatever the bound would add.
  // When it does not reproduce the OOM, the capacity or the trace misses memory the program could
  // not use, and every verdict is suspect.
  WhatIf* own = !run.rows.empty() && run.rows.front().settings.empty() && run.rows.front().error.empty()
                    ? &run.rows.front()
                    : nullptr;
  if (own && own->ooms > 0) {
    own->verdict = WhatIfVerdict::does_not_fit;
    own->shortfall_bytes.reset();
  }
  if (!has_oom && recorded_oom && own && own->ooms == 0) {
    // Note [one OOM per failed request]: an OOM known only from a message, the statistics or the
    // observer has no moment in the history, so no replay can put its request back.
    run.reproduces = false;
    run.warnings.push_back(fmt::format(
        "the trace records its OOM without an entry in the history (only a message, the statistics or PyTorch's OOM "
        "observer say it), so the failed request cannot be put back at its moment: the replay of the trace's own "
        "settings runs without an OOM ({}, {} spare) and the other verdicts are not to be trusted. A trace with the "
        "OOM's entry (PyTorch's history kept to the failure, or the shim's trace with --level device) can be "
        "replayed.",
        whatif_verdict_words(own->verdict), fb(own->margin_bytes)));
  } else if (has_oom && own && own->ooms == 0) {
    run.reproduces = false;
    run.warnings.push_back(fmt::format(
        "the replay of the trace's own settings runs without an OOM ({}, {} spare) although the trace recorded one: "
        "the simulated capacity of {} is more than the program could use (a cap the trace does not record, memory "
        "outside the allocator), or "
        "the trace misses allocations. The other verdicts are not to be trusted; give the real limit with "
        "--capacity SIZE (a size or a card name).",
        whatif_verdict_words(own->verdict), fb(own->margin_bytes), fb(static_cast<std::int64_t>(capacity.bytes))));
  }
  return run;
}

namespace {
// Whether a setting lets the allocator use any free page whatever the split: expandable segments
// map and unmap pages, so the free memory of a fragmented cache can serve one large request.
bool packs_free_memory(const std::string& settings) {
  return AllocatorSettings::parse_recorded(settings).expandable_segments;
}
}  // namespace

void note_replays_in_cases(std::vector<OomCase>& cases, const WhatIfRun& run) {
  if (run.rows.empty()) return;
  ReplayOutcome r;
  r.reproduces = run.reproduces;
  for (const auto& w : run.rows) {
    if (w.settings.empty() || !w.error.empty()) continue;
    ++r.tried;
    if (packs_free_memory(w.settings)) r.layout_tried = true;
    if (w.ooms == 0 && w.verdict == WhatIfVerdict::fits) r.any_fits = true;
    // Got past the failure on the capacity itself: a marginal row that ran out there did not.
    if (w.ooms == 0 && (w.verdict == WhatIfVerdict::fits || w.verdict == WhatIfVerdict::marginal))
      r.passing.push_back(
          fmt::format("{} ({}, {} spare)", w.settings, whatif_verdict_words(w.verdict), fb(w.margin_bytes)));
  }
  for (auto& c : cases) {
    if (c.last_state) continue;
    note_replays_in_diagnosis(c.diagnosis, r);
  }
}

namespace {

// `s` as one word of a POSIX shell command line: as is when it holds only safe characters, else
// in single quotes.
std::string shell_word(const std::string& s) {
  if (!s.empty() && s.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./=:,+@%") ==
                        std::string::npos)
    return s;
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

}  // namespace

std::string tune_command(const WhatIfRun& run, std::uint64_t limit_bytes, const std::string& command) {
  std::vector<std::string> settings;
  for (const auto& w : run.rows)
    if (!w.settings.empty() && w.error.empty() && w.verdict != WhatIfVerdict::does_not_fit)
      settings.push_back(w.settings);
  if (settings.empty() || limit_bytes == 0) return {};
  std::string joined;
  for (const auto& x : settings) joined += (joined.empty() ? "" : ";") + x;
  return fmt::format("vramtrace tune --limit {} --candidates {} -- {}", limit_bytes, shell_word(joined),
                     command.empty() ? std::string("YOUR_COMMAND...") : command);
}

}  // namespace vramtrace
