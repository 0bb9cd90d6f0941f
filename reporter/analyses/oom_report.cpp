#include "analyses/oom_report.h"

#include <fmt/format.h>

#include "analyses/ledger_report.h"
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
  i64 cached_free = st.stats.reserved_bytes[kStatAll].current - st.stats.active_bytes[kStatAll].current;
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

std::vector<OomCase> oom_cases(const TraceModel& m) {
  std::vector<OomCase> out;
  for (const auto& d : m.devices) {
    for (const auto& o : d.ooms) {
      OomCase c;
      c.device = d.device;
      c.event_index = o.event_index;
      c.time_ns = o.time_ns - d.first_time_ns;
      c.figures = figures_for(m, d.device, o.state, o.request_bytes, o.device_free_bytes);
      c.retries = o.retries;
      c.request_stack = o.stack;
      c.diagnosis = diagnose(c.figures);
      c.state = &o.state;
      out.push_back(std::move(c));
    }
    if (m.incomplete && (d.ooms.empty() || d.ooms.back().event_index + 1 < d.at_end.event_index + 1)) {
      OomCase c;
      c.device = d.device;
      c.last_state = true;
      c.event_index = d.at_end.event_index;
      c.time_ns = d.at_end.time_ns - d.first_time_ns;
      c.figures = figures_for(m, d.device, d.at_end, std::nullopt, std::nullopt);
      c.diagnosis = diagnose(c.figures);
      c.diagnosis.headline = "the trace ends abruptly; the request that failed (if any) is not in it";
      c.state = &d.at_end;
      out.push_back(std::move(c));
    }
  }
  return out;
}

std::string render_oom_text(const TraceModel& m, const std::vector<OomCase>& cases, const std::vector<WhatIf>& whatifs,
                            std::uint64_t capacity) {
  std::string out = fmt::format("Trace {} ({}{}{})\n", m.header.path, m.header.format,
                                m.header.workload.empty() ? "" : ", ", m.header.workload);
  if (m.ledger) out += "Levels: " + ledger_levels(*m.ledger) + "\n";
  const auto observed = observer_only_ooms(m);
  if (cases.empty() && !observed.empty()) {
    out +=
        fmt::format("PyTorch's history holds no OOM, but its OOM observer recorded {} (see below).\n", observed.size());
  } else if (cases.empty() && m.incomplete) {
    // Incomplete with a device gives a last-state case; here the trace has no event at all.
    out += fmt::format("No OOM and no allocation in this trace: it ends abruptly before its first event ({}).\n",
                       m.incomplete_reason);
  } else if (cases.empty()) {
    out += "No OOM in this trace, and it ends normally.\n";
  }
  const std::vector<DeviceSites> sites = trace_sites(m);  // empty without stacks
  int n = 1;
  for (const auto& c : cases) {
    const auto& f = c.figures;
    const auto& st = c.state->stats;
    out += "\n";
    if (c.last_state)
      out += fmt::format("Last state (the trace ends abruptly), device {}, +{}, event {}\n", c.device,
                         format_duration(c.time_ns), c.event_index);
    else
      out +=
          fmt::format("OOM {} on device {}, +{}, event {}\n", n++, c.device, format_duration(c.time_ns), c.event_index);
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
    line("largest free block in the cache", f.largest_free_block);
    line("inactive split (non-releasable)", f.inactive_split);
    out += fmt::format("  {:<38} {:>12}\n", "active", fb(st.active_bytes[kStatAll].current));
    if (c.retries) {
      out += fmt::format("  {:<38} {:>12}\n", "cudaMalloc retries (this one included)", *c.retries);
    } else if (!c.last_state) {
      out += fmt::format("  {:<38} {:>12}\n", "cudaMalloc retries before it", "not recorded in this trace");
    }
    for (const auto& a : c.diagnosis.arithmetic) out += fmt::format("  {}\n", a.formula);
    out += fmt::format("  Diagnosis: {} - {}\n", diagnosis_code_name(c.diagnosis.code), c.diagnosis.headline);
    for (const auto& r : c.diagnosis.reasons) out += fmt::format("    because {}\n", r);
    if (!c.diagnosis.next_step.empty()) out += fmt::format("  Next step: {}\n", c.diagnosis.next_step);
    if (const SitesAt* s = sites_of_case(m, sites, c))
      out += render_sites_text(*s, "Top allocation sites alive at this moment:", "  ");
    if (const LedgerAt* at = ledger_of_case(m, c))
      out += render_ledger_text(*m.ledger, *at, "Memory ledger of the device at this OOM:", "  ");
  }
  for (const auto& [device, at] : observed) {
    out += fmt::format(
        "\nOOM {} on device {}, recorded by PyTorch's OOM observer only (not in the history): request {} ({} B)\n",
        at->oom + 1, device, fb(static_cast<i64>(at->request_bytes)), at->request_bytes);
    out += render_ledger_text(*m.ledger, *at, "Memory ledger of the device at this OOM:", "  ");
  }
  if (m.ledger && !m.ledger->notes.empty()) {
    out += "\nNotes on the memory ledger:\n";
    for (const auto& n : m.ledger->notes) out += "  - " + n + "\n";
  }
  if (!whatifs.empty()) {
    out += fmt::format(
        "\nReplays of the whole trace, each failed request put back at its moment, on a simulated device of {}\n"
        "(spare = capacity - peak reserved; a row that does not fit gives its number of OOMs):\n",
        fb(static_cast<i64>(capacity)));
    out += fmt::format("  {:<44} {:>6} {:>14} {:>14} {:>14}\n", "settings", "fits", "peak reserved", "peak allocated",
                       "spare");
    for (const auto& w : whatifs) {
      if (!w.error.empty()) {
        out += fmt::format("  {:<44} replay failed: {}\n", w.settings.empty() ? "(trace's own)" : w.settings, w.error);
        continue;
      }
      out += fmt::format("  {:<44} {:>6} {:>14} {:>14} {:>14}\n", w.settings.empty() ? "(trace's own)" : w.settings,
                         w.fits ? "yes" : "no", fb(w.peak_reserved), fb(w.peak_allocated),
                         w.fits ? fb(w.margin_bytes) : fmt::format("{} OOM{}", w.ooms, w.ooms == 1 ? "" : "s"));
    }
  }
  return out;
}

nlohmann::json oom_json(const TraceModel& m, const std::vector<OomCase>& cases, const std::vector<WhatIf>& whatifs,
                        std::uint64_t capacity) {
  nlohmann::json j;
  j["path"] = m.header.path;
  j["format"] = m.header.format;
  j["incomplete"] = m.incomplete;
  const std::vector<DeviceSites> sites = trace_sites(m);
  if (!m.stacks) j["sites"] = trace_sites_json(m, sites);  // says why the OOMs name no code
  nlohmann::json arr = nlohmann::json::array();
  for (const auto& c : cases) {
    nlohmann::json o;
    o["device"] = c.device;
    o["last_state"] = c.last_state;
    o["event"] = c.event_index;
    o["time_ns"] = c.time_ns;
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
    fig["active_bytes"] = c.state->stats.active_bytes[kStatAll].current;
    if (c.retries)
      fig["num_alloc_retries"] = *c.retries;
    else
      fig["num_alloc_retries"] = nullptr;
    o["figures"] = fig;
    o["diagnosis"] = diagnosis_code_name(c.diagnosis.code);
    o["headline"] = c.diagnosis.headline;
    nlohmann::json derived = nlohmann::json::object();
    for (const auto& a : c.diagnosis.arithmetic) derived[a.name + "_bytes"] = a.bytes;
    o["derived"] = derived;
    o["reasons"] = c.diagnosis.reasons;
    o["next_step"] = c.diagnosis.next_step;
    if (const SitesAt* s = sites_of_case(m, sites, c)) o["sites"] = sites_json(*s);
    if (m.stacks && c.request_stack) o["request_site"] = stack_site_label(*m.stacks, c.request_stack);
    if (const LedgerAt* at = ledger_of_case(m, c)) o["ledger"] = ledger_at_json(*m.ledger, *at);
    arr.push_back(o);
  }
  j["ooms"] = arr;
  if (m.ledger) {
    j["levels"] = ledger_levels(*m.ledger);
    nlohmann::json observed = nlohmann::json::array();
    for (const auto& [device, at] : observer_only_ooms(m))
      observed.push_back({{"device", device}, {"ledger", ledger_at_json(*m.ledger, *at)}});
    j["observer_only_ooms"] = observed;
    j["ledger_notes"] = m.ledger->notes;
  }
  nlohmann::json w = nlohmann::json::array();
  for (const auto& x : whatifs)
    w.push_back({{"settings", x.settings},
                 {"fits", x.fits},
                 {"peak_reserved_bytes", x.peak_reserved},
                 {"peak_allocated_bytes", x.peak_allocated},
                 {"margin_bytes", x.margin_bytes},
                 {"ooms", x.ooms},
                 {"error", x.error}});
  j["replays"] = w;
  j["capacity_bytes"] = capacity;
  return j;
}

}  // namespace vramtrace
