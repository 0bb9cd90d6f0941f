#include "analyses/oom/oom_report.h"

#include <fmt/format.h>

#include "analyses/oom/explain.h"
#include "analyses/ledger_report.h"
#include "analyses/oom/memory_kinds.h"
#include "analyses/printable.h"
#include "analyses/sites.h"
#include "analyses/summary.h"
#include "vramtrace/size_rules.h"
#include "vramtrace/units.h"

namespace vramtrace {

namespace {
using i64 = std::int64_t;
using u64 = std::uint64_t;

OomFigures figures_for(const TraceModel& m, std::int32_t device, const StateAt& st, std::optional<u64> request,
                       std::optional<u64> device_free) {
  OomFigures f;
  if (request) {
    f.request = *request;
    f.device_request = allocation_size(*request);
  }
  if (u64 total = m.header.total_bytes_of(device)) f.device_total = total;
  f.device_free = device_free;
  f.allocated = static_cast<u64>(st.stats.allocated_bytes[kStatAll].current);
  f.reserved = static_cast<u64>(st.stats.reserved_bytes[kStatAll].current);
  // Blocks pending on another stream are neither allocated nor free: count only inactive bytes.
  // Blocks in no known segment are active but not reserved (StateAt::outside_segments_bytes).
  i64 cached_free = st.stats.reserved_bytes[kStatAll].current -
                    (st.stats.active_bytes[kStatAll].current - static_cast<i64>(st.outside_segments_bytes));
  f.reserved_unallocated = static_cast<u64>(cached_free > 0 ? cached_free : 0);
  f.largest_free_block = st.largest_free_block;
  f.inactive_split = static_cast<u64>(st.stats.inactive_split_bytes[kStatAll].current);
  return f;
}

std::string fb(i64 v) { return format_bytes(v, ByteStyle::pytorch); }

// The sites alive at a post-mortem's moment: its OOM's state, or the end for the last state.
// Null when the trace has no stacks or the model kept no layout for that OOM.
const SitesAt* sites_of_case(const TraceModel& m, const std::vector<DeviceSites>& sites, const OomCase& c) {
  for (const auto& s : sites) {
    if (s.device != c.device) continue;
    if (c.last_state) return s.at_end.empty() ? nullptr : &s.at_end;
    for (const auto& d : m.devices) {
      if (d.device != c.device) continue;
      for (std::size_t i = 0; i < d.ooms.size() && i < s.at_oom.size(); ++i)
        if (&d.ooms[i].state == c.state) return s.at_oom[i].empty() ? nullptr : &s.at_oom[i];
    }
  }
  return nullptr;
}

// What is known of an OOM without an entry (Note [one OOM per failed request]): the message's
// figures and their diagnosis (as `vramtrace explain` reads it), else the figures PyTorch's OOM
// observer recorded with its statistics at the failure; nothing at all when only num_ooms says it.
OomCase case_without_entry(const TraceModel& m, const DeviceModel& d, const OomWithoutEntry& w) {
  OomCase c;
  c.device = d.device;
  c.without_entry = &w;
  c.event_index = d.at_end.event_index;
  if (!w.recorded) {
    c.diagnosis.headline = "the trace records this OOM only in its statistics (num_ooms): no figure of it is known";
    return c;
  }
  const RecordedOom& r = *w.recorded;
  if (r.time_ns != 0) c.time_ns = r.time_ns - d.first_time_ns;
  if (!r.message.empty()) {
    const Explanation e = explain_message(r.message);
    c.figures = figures_from_message(e.message);
    c.diagnosis = e.diagnosis;
    return c;
  }
  auto stat = [&](std::string_view key) -> std::optional<u64> {
    for (const auto& [k, v] : r.stats)
      if (k == key && v >= 0) return static_cast<u64>(v);
    return std::nullopt;
  };
  c.figures.request = r.alloc_bytes;
  c.figures.device_free = r.device_free_bytes;
  if (u64 total = m.header.total_bytes_of(d.device)) c.figures.device_total = total;
  // The observer's third figure is the device's total, or the cap of a memory fraction below it.
  if (r.allowed_bytes && (!c.figures.device_total || *r.allowed_bytes < *c.figures.device_total))
    c.figures.allowed = r.allowed_bytes;
  if (!c.figures.device_total) c.figures.device_total = r.allowed_bytes;
  c.figures.allocated = stat("allocated_bytes.all.current");
  c.figures.reserved = stat("reserved_bytes.all.current");
  c.figures.inactive_split = stat("inactive_split_bytes.all.current");
  if (c.figures.allocated && c.figures.reserved && *c.figures.reserved >= *c.figures.allocated)
    c.figures.reserved_unallocated = *c.figures.reserved - *c.figures.allocated;
  if (auto retries = stat("num_alloc_retries")) c.retries = retries;
  c.diagnosis = diagnose(c.figures);
  return c;
}

// Every limit known on `device` besides its total: the trace's smallest cap, then --capacity
// when it is smaller. The diagnosis compares reserved memory with it (cap_headroom).
void apply_limits(const TraceModel& m, std::int32_t device, const OomOptions& options, OomFigures& f) {
  if (const TraceHeader::Cap* cap = m.header.cap_of(device)) {
    f.allowed = cap->bytes;
    f.allowed_name = cap->what;
  }
  if (options.capacity_bytes && (!f.allowed || *options.capacity_bytes < *f.allowed)) {
    f.allowed = *options.capacity_bytes;
    f.allowed_name = "--capacity";
  }
}

// The ledger at a post-mortem's OOM (model/ledger.h); null without a ledger, and for the last
// state of an abrupt end.
const LedgerAt* ledger_of_case(const TraceModel& m, const OomCase& c) {
  if (!m.ledger || c.last_state) return nullptr;
  const DeviceLedger* dl = m.ledger->device(c.device);
  if (!dl) return nullptr;
  for (const auto& d : m.devices) {
    if (d.device != c.device) continue;
    for (std::size_t i = 0; i < d.ooms.size(); ++i)
      if (&d.ooms[i].state == c.state) return dl->at(LedgerAt::Moment::oom, i);
  }
  return nullptr;
}

// The OOMs PyTorch's observer recorded (the sidecar) that the history holds no entry for.
std::vector<std::pair<std::int32_t, const LedgerAt*>> observer_only_ooms(const TraceModel& m) {
  std::vector<std::pair<std::int32_t, const LedgerAt*>> out;
  if (!m.ledger) return out;
  for (const auto& dl : m.ledger->devices)
    for (const auto& at : dl.moments)
      if (at.moment == LedgerAt::Moment::oom && !at.oom_in_history) out.emplace_back(dl.device, &at);
  return out;
}

}  // namespace

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

std::vector<OomCase> oom_cases(const TraceModel& m, const OomOptions& options) {
  std::vector<OomCase> out;
  const bool counts_retries = m.header.format == "vramtrace";  // Note [one OOM per failed request]
  for (const auto& d : m.devices) {
    std::uint64_t retried = 0;  // failed allocations the program tried again, so far
    for (const auto& o : d.ooms) {
      if (o.fate != OomFate::oom) {
        ++retried;
        continue;
      }
      OomCase c;
      c.device = d.device;
      c.event_index = o.event_index;
      c.time_ns = o.time_ns - d.first_time_ns;
      c.figures = figures_for(m, d.device, o.state, o.request_bytes, o.device_free_bytes);
      c.attempts = o.attempts;
      apply_limits(m, d.device, options, c.figures);
      if (counts_retries) c.retries = retried;
      c.allocator_retries = o.retries;
      c.request_stack = o.stack;
      c.diagnosis = diagnose(c.figures);
      c.state = &o.state;
      out.push_back(std::move(c));
    }
    for (const auto& w : d.oom_count.without_entry) out.push_back(case_without_entry(m, d, w));
    if (m.incomplete && (d.ooms.empty() || d.ooms.back().event_index + 1 < d.at_end.event_index + 1)) {
      OomCase c;
      c.device = d.device;
      c.last_state = true;
      c.event_index = d.at_end.event_index;
      c.time_ns = d.at_end.time_ns - d.first_time_ns;
      c.figures = figures_for(m, d.device, d.at_end, std::nullopt, std::nullopt);
      apply_limits(m, d.device, options, c.figures);
      c.diagnosis = diagnose(c.figures);
      c.diagnosis.headline = "the trace ends abruptly; the request that failed (if any) is not in it";
      c.state = &d.at_end;
      out.push_back(std::move(c));
    }
  }
  return out;
}

std::vector<RetriedFailure> retried_failures(const TraceModel& m) {
  std::vector<RetriedFailure> out;
  for (const auto& d : m.devices)
    for (const auto& o : d.ooms)
      if (o.fate != OomFate::oom)
        out.push_back({d.device, o.event_index, o.time_ns - d.first_time_ns, o.request_bytes, o.fate});
  return out;
}

namespace {

std::string settings_label(const WhatIf& w) { return w.settings.empty() ? "(trace's own)" : printable(w.settings); }

// One sentence per setting: its verdict, what it rests on, and what the replay covers.
std::string verdict_sentence(const WhatIfRun& run, const WhatIf& w) {
  const std::string bound = fb(static_cast<i64>(run.bound_bytes));
  const bool to_failure = run.covers == WhatIfCovers::to_failure;
  switch (w.verdict) {
    case WhatIfVerdict::fits:
      return to_failure ? fmt::format(
                              "gets past the failure with {} spare (above the {} bound); the rest of the run "
                              "was never recorded",
                              fb(w.margin_bytes), bound)
                        : fmt::format("fits, {} spare (above the {} bound)", fb(w.margin_bytes), bound);
    case WhatIfVerdict::marginal:
      if (w.ooms == 0)
        return fmt::format("marginal: {} {} spare, within the {} bound: verify on the real program{}",
                           to_failure ? "gets past the failure with" : "fits with", fb(w.margin_bytes), bound,
                           to_failure ? "; the rest of the run was never recorded" : "");
      return fmt::format("marginal: {} OOM{} on this capacity, none with {} more{}: verify on the real program", w.ooms,
                         w.ooms == 1 ? "" : "s", bound,
                         w.shortfall_bytes && *w.shortfall_bytes > 0
                             ? fmt::format(" (short by about {})", fb(static_cast<i64>(*w.shortfall_bytes)))
                             : "");
    case WhatIfVerdict::does_not_fit:
      return fmt::format("does not fit: {} OOM{}, also with {} more", w.ooms, w.ooms == 1 ? "" : "s", bound);
    case WhatIfVerdict::failed:
      break;
  }
  return "replay failed: " + printable(w.error);
}

}  // namespace

std::string render_whatif_text(const WhatIfRun& run) {
  if (run.rows.empty()) return {};
  std::string what;
  switch (run.covers) {
    case WhatIfCovers::whole_trace:
      what = "the whole trace";
      break;
    case WhatIfCovers::to_failure:
      what = "the trace up to its failure (it ends there)";
      break;
    case WhatIfCovers::full_trace:
      what = fmt::format("{} (a complete trace of the same program, --full)", run.full_path);
      break;
  }
  std::string out = fmt::format(
      "\nReplays of {}, each failed request put back at its moment,\non a simulated device of {} ({}).\n"
      "Error bound {} ({}).\n",
      what, fb(static_cast<i64>(run.capacity_bytes)), run.capacity_source, fb(static_cast<i64>(run.bound_bytes)),
      whatif_bound_source());
  for (const auto& w : run.warnings) out += fmt::format("WARNING: {}\n", w);
  out += fmt::format("  {:<44} {:>12} {:>14} {:>14} {:>14}\n", "settings", "verdict", "peak reserved", "peak allocated",
                     "spare");
  for (const auto& w : run.rows) {
    if (!w.error.empty()) {
      out += fmt::format("  {:<44} replay failed: {}\n", settings_label(w), printable(w.error));
      continue;
    }
    out += fmt::format("  {:<44} {:>12} {:>14} {:>14} {:>14}\n", settings_label(w), whatif_verdict_words(w.verdict),
                       fb(w.peak_reserved), fb(w.peak_allocated),
                       w.ooms == 0 ? fb(w.margin_bytes) : fmt::format("{} OOM{}", w.ooms, w.ooms == 1 ? "" : "s"));
  }
  out +=
      "(spare = capacity - peak reserved; fits = spare above the bound; marginal = within the bound either way;\n"
      " does not fit = out of memory even with the bound added)\n";
  for (const auto& w : run.rows)
    if (!w.settings.empty() && w.error.empty()) out += fmt::format("  {}: {}.\n", w.settings, verdict_sentence(run, w));
  for (const auto& n : run.notes) out += fmt::format("Note: {}\n", n);
  return out;
}

std::string render_oom_text(const TraceModel& m, const std::vector<OomCase>& cases, const WhatIfRun& run) {
  std::string out = fmt::format("Trace {} ({}{}{})\n", printable(m.header.path), m.header.format,
                                m.header.workload.empty() ? "" : ", ", printable(m.header.workload));
  if (m.lost_events) out += lost_events_warning(m.lost_events) + "\n";
  if (m.ledger) out += "Levels: " + ledger_levels(*m.ledger) + "\n";
  auto observed = observer_only_ooms(m);
  if (cases.empty() && !observed.empty()) {
    out +=
        fmt::format("PyTorch's history holds no OOM, but its OOM observer recorded {} (see below).\n", observed.size());
  } else if (cases.empty() && m.incomplete) {
    // Incomplete with a device gives a last-state case; here the trace has no event at all.
    out += fmt::format("No OOM and no allocation in this trace: it ends abruptly before its first event ({}).\n",
                       m.incomplete_reason);
  } else if (cases.empty()) {
    const auto retried = retried_failures(m);
    if (retried.empty())
      out += "No OOM in this trace, and it ends normally.\n";
    else
      out += fmt::format(
          "No OOM in this trace, and it ends normally: {} failed allocation{} the program retried, each with "
          "success.\n",
          retried.size(), retried.size() == 1 ? "" : "s");
  }
  // The count every command reports (Note [one OOM per failed request]), per device that failed.
  for (const auto& d : m.devices)
    if (d.oom_count.ooms || d.oom_count.entries)
      out += fmt::format("Device {}: {}\n", d.device, oom_count_text(d.oom_count));
  const std::vector<DeviceSites> sites = trace_sites(m);  // empty without stacks
  int n = 1;
  for (const auto& c : cases) {
    const auto& f = c.figures;
    out += "\n";
    if (c.last_state)
      out += fmt::format("Last state (the trace ends abruptly), device {}, +{}, event {}\n", c.device,
                         format_duration(c.time_ns), c.event_index);
    else if (c.without_entry) {
      const bool timed = c.without_entry->recorded && c.without_entry->recorded->time_ns;
      out += fmt::format("OOM {} on device {}{}: not in the history (known from {}); {} not recorded\n", n++, c.device,
                         timed ? ", +" + format_duration(c.time_ns) : "", c.without_entry->source,
                         timed ? "the allocator's state at it was" : "its moment and the allocator's state at it were");
    } else
      out +=
          fmt::format("OOM {} on device {}, +{}, event {}\n", n++, c.device, format_duration(c.time_ns), c.event_index);
    if (c.without_entry && c.without_entry->recorded && !c.without_entry->recorded->message.empty()) {
      // PyTorch's messages are a few hundred characters; a header may hold anything.
      constexpr std::size_t kShown = 1000;
      const std::string& msg = c.without_entry->recorded->message;
      out += fmt::format("  message: {}{}\n", printable(msg.substr(0, kShown)), msg.size() > kShown ? " ..." : "");
    }
    auto line = [&](const char* name, std::optional<u64> v, const char* extra = "") {
      if (v) out += fmt::format("  {:<38} {:>12}  ({} B){}\n", name, fb(static_cast<i64>(*v)), *v, extra);
    };
    line("request (rounded)", f.request);
    if (m.stacks && c.request_stack)
      out += fmt::format("  {:<38} {}\n", "requested at", stack_site_label(*m.stacks, c.request_stack));
    if (f.device_request && f.request && *f.device_request != *f.request)
      line("new segment it needs", f.device_request);
    if (f.device_total)
      line("device capacity", f.device_total);
    else
      out += fmt::format("  {:<38} {:>12}\n", "device capacity", "not in the trace");
    line("free on the device", f.device_free);
    line("allocated", f.allocated);
    line("reserved", f.reserved);
    line("free in the cache (reserved - active)", f.reserved_unallocated);
    if (f.allowed) {
      const std::string name = f.allowed_name.empty() ? std::string("allowed (a cap below the device)")
                                                      : fmt::format("cap ({})", f.allowed_name);
      line(name.c_str(), f.allowed);
    }
    line("largest free block in the cache", f.largest_free_block);
    line("inactive split (non-releasable)", f.inactive_split);
    if (c.state) out += fmt::format("  {:<38} {:>12}\n", "active", fb(c.state->stats.active_bytes[kStatAll].current));
    if (c.attempts > 1)
      out += fmt::format("  {:<38} {:>12}  (the program released memory and tried again)\n",
                         "failed attempts of this request", c.attempts);
    const OomCount* count = nullptr;
    for (const auto& d : m.devices)
      if (d.device == c.device) count = &d.oom_count;
    if (c.retries) {
      out += fmt::format("  {:<38} {:>12}\n", "cudaMalloc retries so far", *c.retries);
    } else if (!c.last_state && count && count->retries) {
      // Not known at this OOM, only for the run (Note [one OOM per failed request]).
      out += fmt::format("  {:<38} {:>12}  ({})\n", "cudaMalloc retries in the whole run", *count->retries,
                         retries_from_text(count->retries_from));
    } else if (!c.last_state) {
      out += fmt::format("  {:<38} {:>12}\n", "cudaMalloc retries before it", "not recorded in this trace");
    }
    for (const auto& a : c.diagnosis.arithmetic) out += fmt::format("  {}\n", a.formula);
    out += fmt::format("  Diagnosis: {} - {}\n", diagnosis_code_name(c.diagnosis.code), c.diagnosis.headline);
    for (const auto& r : c.diagnosis.reasons) out += fmt::format("    because {}\n", r);
    if (!c.diagnosis.next_step.empty()) out += fmt::format("  Next step: {}\n", c.diagnosis.next_step);
    if (const SitesAt* s = sites_of_case(m, sites, c))
      out += render_sites_text(*s, "Top allocation sites alive at this moment:", "  ");
    if (m.stacks && c.state && !c.state->stacks.empty())
      out += render_memory_uses_text(
          memory_uses(c.state->stacks, *m.stacks),
          "Memory of the tensors alive at this moment, by kind (from their call stacks):", "  ");
    if (const LedgerAt* at = ledger_of_case(m, c)) {
      out += render_ledger_text(*m.ledger, *at, "Memory ledger of the device at this OOM:", "  ");
    } else if (c.without_entry && c.without_entry->recorded) {
      // An OOM only the observer saw is a case here and a ledger moment there: the same record.
      const RecordedOom& r = *c.without_entry->recorded;
      for (auto& [device, at] : observed) {
        if (!at || device != c.device || at->time_ns != r.time_ns || at->request_bytes != r.alloc_bytes.value_or(0))
          continue;
        out += render_ledger_text(*m.ledger, *at, "Memory ledger of the device at this OOM:", "  ");
        at = nullptr;
        break;
      }
    }
  }
  for (const auto& [device, at] : observed) {
    if (!at) continue;
    out += fmt::format(
        "\nOOM {} on device {}, recorded by PyTorch's OOM observer only (not in the history): request {} ({} B)\n",
        at->oom + 1, device, fb(static_cast<i64>(at->request_bytes)), at->request_bytes);
    out += render_ledger_text(*m.ledger, *at, "Memory ledger of the device at this OOM:", "  ");
  }
  if (m.ledger && !m.ledger->notes.empty()) {
    out += "\nNotes on the memory ledger:\n";
    for (const auto& n : m.ledger->notes) out += "  - " + n + "\n";
  }
  if (const auto retried = retried_failures(m); !retried.empty() && !cases.empty()) {
    // Not post-mortems: the program went on (Note [one OOM per failed request]).
    constexpr std::size_t kShown = 10;
    out += fmt::format("\nFailed allocations the program tried again (cudaMalloc retries, not OOMs):\n");
    for (std::size_t i = 0; i < retried.size() && i < kShown; ++i) {
      const auto& r = retried[i];
      out += fmt::format("  device {}, +{}, event {}: {} ({}), {}\n", r.device, format_duration(r.time_ns),
                         r.event_index, fb(static_cast<i64>(r.request_bytes)), r.request_bytes,
                         r.fate == OomFate::survived ? "the next attempt succeeded" : "the next attempt failed too");
    }
    if (retried.size() > kShown) out += fmt::format("  ... and {} more\n", retried.size() - kShown);
  }
  out += render_whatif_text(run);
  return out;
}

nlohmann::json oom_json(const TraceModel& m, const std::vector<OomCase>& cases, const WhatIfRun& run) {
  nlohmann::json j;
  j["path"] = m.header.path;
  j["format"] = m.header.format;
  j["incomplete"] = m.incomplete;
  j["lost_events"] = m.lost_events;
  const std::vector<DeviceSites> sites = trace_sites(m);
  if (!m.stacks) j["sites"] = trace_sites_json(m, sites);  // says why the OOMs name no code
  nlohmann::json arr = nlohmann::json::array();
  for (const auto& c : cases) {
    nlohmann::json o;
    o["device"] = c.device;
    o["last_state"] = c.last_state;
    // An OOM without an entry has no event and, unless recorded, no time (Note [one OOM per failed
    // request]); "without_entry" says where it is known from.
    if (c.without_entry) {
      nlohmann::json w = {{"source", c.without_entry->source}};
      if (c.without_entry->recorded && !c.without_entry->recorded->message.empty())
        w["message"] = c.without_entry->recorded->message;
      o["without_entry"] = w;
      o["event"] = nullptr;
      o["time_ns"] = c.without_entry->recorded && c.without_entry->recorded->time_ns ? nlohmann::json(c.time_ns)
                                                                                     : nlohmann::json(nullptr);
    } else {
      o["event"] = c.event_index;
      o["time_ns"] = c.time_ns;
    }
    o["attempts"] = c.attempts;
    const auto& f = c.figures;
    nlohmann::json fig = nlohmann::json::object();
    auto put = [&](const char* k, std::optional<u64> v) {
      if (v) fig[k] = *v;
    };
    put("request_bytes", f.request);
    put("segment_bytes", f.device_request);
    put("device_total_bytes", f.device_total);
    put("device_free_bytes", f.device_free);
    put("allocated_bytes", f.allocated);
    put("reserved_bytes", f.reserved);
    put("cache_free_bytes", f.reserved_unallocated);
    put("largest_free_block_bytes", f.largest_free_block);
    put("inactive_split_bytes", f.inactive_split);
    put("cap_bytes", f.allowed);
    if (f.allowed && !f.allowed_name.empty()) fig["cap_source"] = f.allowed_name;
    if (c.state) fig["active_bytes"] = c.state->stats.active_bytes[kStatAll].current;
    if (c.retries)
      fig["num_alloc_retries"] = *c.retries;
    else
      fig["num_alloc_retries"] = nullptr;
    if (c.allocator_retries) fig["allocator_num_alloc_retries"] = *c.allocator_retries;
    o["figures"] = fig;
    o["diagnosis"] = diagnosis_code_name(c.diagnosis.code);
    o["headline"] = c.diagnosis.headline;
    nlohmann::json derived = nlohmann::json::object();
    for (const auto& a : c.diagnosis.arithmetic) derived[a.name + "_bytes"] = a.bytes;
    o["derived"] = derived;
    o["reasons"] = c.diagnosis.reasons;
    o["next_step"] = c.diagnosis.next_step;
    if (const SitesAt* s = sites_of_case(m, sites, c)) o["sites"] = sites_json(*s);
    if (m.stacks && c.state && !c.state->stacks.empty())
      if (const MemoryUses u = memory_uses(c.state->stacks, *m.stacks); u.telling())
        o["memory_kinds"] = memory_uses_json(u);
    if (m.stacks && c.request_stack) o["request_site"] = stack_site_label(*m.stacks, c.request_stack);
    if (const LedgerAt* at = ledger_of_case(m, c)) o["ledger"] = ledger_at_json(*m.ledger, *at);
    arr.push_back(o);
  }
  j["ooms"] = arr;
  nlohmann::json counts = nlohmann::json::array();
  for (const auto& d : m.devices) {
    nlohmann::json cj = oom_count_json(d.oom_count);
    cj["device"] = d.device;
    counts.push_back(std::move(cj));
  }
  j["oom_counts"] = counts;
  nlohmann::json retried = nlohmann::json::array();
  for (const auto& r : retried_failures(m))
    retried.push_back({{"device", r.device},
                       {"event", r.event_index},
                       {"time_ns", r.time_ns},
                       {"request_bytes", r.request_bytes},
                       {"fate", oom_fate_name(r.fate)}});
  j["retried_failures"] = retried;
  if (m.ledger) {
    j["levels"] = ledger_levels(*m.ledger);
    nlohmann::json observed = nlohmann::json::array();
    for (const auto& [device, at] : observer_only_ooms(m))
      observed.push_back({{"device", device}, {"ledger", ledger_at_json(*m.ledger, *at)}});
    j["observer_only_ooms"] = observed;
    j["ledger_notes"] = m.ledger->notes;
  }
  nlohmann::json w = nlohmann::json::array();
  for (const auto& x : run.rows) {
    nlohmann::json r = {{"settings", x.settings},
                        {"verdict", whatif_verdict_name(x.verdict)},
                        {"fits", x.fits},
                        {"peak_reserved_bytes", x.peak_reserved},
                        {"peak_allocated_bytes", x.peak_allocated},
                        {"margin_bytes", x.margin_bytes},
                        {"bound_bytes", run.bound_bytes},
                        {"ooms", x.ooms},
                        {"error", x.error}};
    r["shortfall_bytes"] = x.shortfall_bytes ? nlohmann::json(*x.shortfall_bytes) : nlohmann::json(nullptr);
    w.push_back(std::move(r));
  }
  j["replays"] = w;
  j["capacity_bytes"] = run.capacity_bytes;
  if (!run.rows.empty()) {
    j["whatif"] = {{"capacity_bytes", run.capacity_bytes},
                   {"capacity_source", run.capacity_source},
                   {"bound_bytes", run.bound_bytes},
                   {"bound_source", whatif_bound_source()},
                   {"covers", whatif_covers_name(run.covers)},
                   {"full_trace", run.full_path.empty() ? nlohmann::json(nullptr) : nlohmann::json(run.full_path)},
                   {"allocs_after_failure", run.allocs_after_failure},
                   {"marks_before_failure", run.marks_before_failure},
                   {"reproduces", run.reproduces},
                   {"notes", run.notes},
                   {"warnings", run.warnings}};
  }
  return j;
}

}  // namespace vramtrace
