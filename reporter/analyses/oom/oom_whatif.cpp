#include "analyses/oom/oom_whatif.h"

#include <fmt/format.h>

#include <algorithm>

#include "analyses/printable.h"
#include "analyses/replay.h"
#include "model/ledger.h"
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
  // The device of the first case: a process's devices may differ in size (or cap).
  const std::int32_t device = cases.empty() ? 0 : cases.front().device;
  const std::uint64_t total = m.header.total_bytes_of(device);
  if (capacity) {
    // What the trace says the program had, for WhatIfCapacity::within_recorded.
    WhatIfCapacity given = whatif_capacity(m, cases, std::nullopt);
    given.recorded_bytes = given.bytes;
    given.bytes = *capacity;
    given.source = "--capacity";
    given.kind = WhatIfCapacity::Kind::given;
    given.pytorch_fraction_cap = false;
    return given;
  }
  WhatIfCapacity best;
  best.device_total_bytes = total;
  const TraceHeader::Cap* cap = m.header.cap_of(device);
  auto consider = [&](std::uint64_t bytes, std::string source, WhatIfCapacity::Kind kind) {
    if (bytes && (!best.bytes || bytes < best.bytes)) {
      best.bytes = bytes;
      best.source = std::move(source);
      best.kind = kind;
    }
  };
  for (const auto& c : cases) {
    if (c.last_state || !c.figures.reserved || !c.figures.device_free) continue;
    consider(*c.figures.reserved + *c.figures.device_free,
             "what the allocator could reach at the first OOM: reserved + free on the device",
             WhatIfCapacity::Kind::reached_at_oom);
    break;
  }
  if (cap) consider(cap->bytes, cap->what, WhatIfCapacity::Kind::recorded_cap);
  consider(total, "the trace's device total", WhatIfCapacity::Kind::device_total);
  // Under PyTorch's own fraction the allocator knew its cap, whichever figure is the smaller.
  best.pytorch_fraction_cap = cap && cap->pytorch_fraction && best.kind != WhatIfCapacity::Kind::device_total;
  best.recorded_bytes = best.bytes;
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
  r.withheld = run.withheld.has_value();
  for (const WhatIf* w : run.shown_rows()) {
    if (w->own || !w->error.empty()) continue;
    ++r.tried;
    if (packs_free_memory(w->conf)) r.layout_tried = true;
    const Judgement& j = w->judgement;
    if (j.margin_bytes && *j.margin_bytes > j.bound_bytes) r.any_room = true;
    // The words of the table: a setting that got past the failure, with its verdict and spare, or
    // one that ran out on the capacity but not with the bound.
    if (j.margin_bytes)
      r.passing.push_back(fmt::format("{} ({}, {} spare)", printable(w->settings), whatif_verdict_words(j.verdict),
                                      fb(static_cast<std::int64_t>(*j.margin_bytes))));
    else if (j.verdict == WhatIfVerdict::marginal && j.shortfall_bytes)
      r.short_by.push_back(*j.shortfall_bytes);
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
  if (run.withheld || limit_bytes == 0) return {};
  std::vector<std::string> settings;
  for (const WhatIf* w : run.shown_rows())
    if (!w->settings.empty() && !w->own && w->error.empty() && tune_candidate(w->judgement))
      settings.push_back(w->settings);
  if (settings.empty()) return {};
  std::string joined;
  for (const auto& x : settings) joined += (joined.empty() ? "" : ";") + x;
  return fmt::format("vramtrace tune --limit {} --candidates {} -- {}", limit_bytes, shell_word(joined),
                     command.empty() ? std::string("YOUR_COMMAND...") : command);
}

std::string tune_command_for(const WhatIfRun& run, const TraceModel& m, const std::vector<OomCase>& cases,
                             std::optional<std::uint64_t> capacity) {
  // The cap the program ran under: --capacity, else the one the trace records, else the device's.
  std::uint64_t limit = 0;
  if (!cases.empty()) {
    limit = m.header.usable_bytes_of(cases.front().device);
    if (const TraceHeader::Cap* cap = m.header.cap_of(cases.front().device)) limit = cap->bytes;
  }
  if (capacity) limit = *capacity;
  // The program's command line: the shim's trace names it (the snapshot's own level does not).
  std::string command = m.header.format == "vramtrace" ? m.header.workload : std::string();
  if (command.empty() && m.ledger && !m.ledger->device_trace.empty()) {
    try {
      auto shim = open_trace(m.ledger->device_trace);
      if (shim->header().format == "vramtrace") command = shim->header().workload;
    } catch (const TraceError&) {
      // The placeholder then: the line is a convenience, the report stands without it.
    }
  }
  return tune_command(run, limit, command);
}

}  // namespace vramtrace
