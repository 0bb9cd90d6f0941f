#include "analyses/oom/oom_report.h"

#include <fmt/format.h>

#include <algorithm>

#include "analyses/ledger_report.h"
#include "analyses/oom/explain.h"
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

namespace {

std::string settings_label(const WhatIf& w) { return w.settings.empty() ? "(trace's own)" : printable(w.settings); }

// The last column of the table: the spare below what the setting allows, how short it was, or
// its OOMs.
std::string spare_cell(const Judgement& j) {
  if (j.margin_bytes) return fb(static_cast<i64>(*j.margin_bytes));
  if (j.shortfall_bytes) return "short " + fb(static_cast<i64>(*j.shortfall_bytes));
  if (j.ooms) return fmt::format("{} OOM{}", j.ooms, j.ooms == 1 ? "" : "s");
  return "-";
}

// What the replays cover, in words.
std::string covers_words(const WhatIfRun& run) {
  switch (run.covers) {
    case WhatIfCovers::to_failure:
      return "the trace up to its failure (it ends there)";
    case WhatIfCovers::full_trace:
      return fmt::format("{} (a complete trace of the same program, --full)", printable(run.full_path));
    case WhatIfCovers::whole_trace:
      break;
  }
  return "the whole trace";
}

}  // namespace

std::string render_withheld_text(const WhatIfRun& run) {
  std::string out;
  if (run.withheld) {
    out += fmt::format("NO VERDICT on any setting: {}.\n", run.withheld->why);
    if (!run.withheld->how.empty()) out += fmt::format("  To get one: {}.\n", run.withheld->how);
  } else if (run.partial) {
    out += fmt::format(
        "PART OF THE RUN: {}. A setting that runs out of memory before that point does not fit; one "
        "that gets through it has no verdict.\n",
        run.partial->why);
    if (!run.partial->how.empty()) out += fmt::format("  To judge the whole run: {}.\n", run.partial->how);
  }
  return out;
}

std::string render_whatif_text(const WhatIfRun& run) {
  const std::vector<const WhatIf*> rows = run.shown_rows();
  if (rows.empty()) return {};
  const bool replayed = std::any_of(rows.begin(), rows.end(), [](const WhatIf* w) { return w->judgement.replayed; });
  std::string out =
      replayed
          ? fmt::format(
                "\nReplays of {}, each failed request put back at its moment,\non a simulated device of {} "
                "({}).\nError bound: {}.\n",
                covers_words(run), fb(static_cast<i64>(run.capacity.bytes)), run.capacity.source, whatif_bound_source())
          : std::string("\nThe allocator settings, not replayed:\n");
  out += render_withheld_text(run);
  for (const auto& w : run.warnings) out += fmt::format("WARNING: {}\n", w);
  out += fmt::format("  {:<44} {:>12} {:>14} {:>14} {:>16}\n", "settings", "verdict", "peak reserved", "peak allocated",
                     "spare / short");
  for (const WhatIf* w : rows) {
    if (!w->error.empty()) {
      out += fmt::format("  {:<44} replay failed: {}\n", settings_label(*w), printable(w->error));
      continue;
    }
    const Judgement& j = w->judgement;
    // Not replayed (the trace supports no replay): no figure to show.
    out += fmt::format("  {:<44} {:>12} {:>14} {:>14} {:>16}\n", settings_label(*w), whatif_verdict_words(j.verdict),
                       j.replayed ? fb(j.peak_reserved_bytes) : "-", j.replayed ? fb(j.peak_allocated_bytes) : "-",
                       spare_cell(j));
  }
  out +=
      "(spare = what the setting allows - peak reserved; fits = spare above the bound; marginal = within the bound\n"
      " either way, or short by more than the replay's measured error; does not fit = out of memory even with the\n"
      " bound added)\n";
  for (const WhatIf* w : rows) {
    if (!w->error.empty() || (run.withheld && w->settings.empty())) continue;
    const Judgement& j = w->judgement;
    std::string line = fmt::format("  {}: {}", settings_label(*w), judgement_text(j));
    // A verdict withheld for this setting alone says why here; one withheld for the whole trace
    // said it above.
    if (j.verdict == WhatIfVerdict::withheld && !run.withheld && !run.partial && j.withheld)
      line += fmt::format(": {}; to get one: {}", j.withheld->why, j.withheld->how);
    out += line + ".\n";
  }
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
  const nlohmann::json w = whatif_json(run);
  j["replays"] = w.value("rows", nlohmann::json::array());
  j["capacity_bytes"] = run.capacity.bytes;
  if (!run.rows.empty()) {
    j["whatif"] = w;
    j["whatif"].erase("rows");
  }
  return j;
}

nlohmann::json whatif_json(const WhatIfRun& run) {
  auto withheld = [](const std::optional<Withheld>& w) {
    return w ? nlohmann::json{{"why", w->why}, {"how", w->how}} : nlohmann::json(nullptr);
  };
  nlohmann::json j = {{"capacity_bytes", run.capacity.bytes},
                      {"capacity_source", run.capacity.source},
                      {"bound_source", whatif_bound_source()},
                      {"covers", whatif_covers_name(run.covers)},
                      {"full_trace", run.full_path.empty() ? nlohmann::json(nullptr) : nlohmann::json(run.full_path)},
                      {"allocs_after_failure", run.allocs_after_failure},
                      {"marks_before_failure", run.marks_before_failure},
                      {"reproduces", run.reproduces},
                      {"withheld", withheld(run.withheld)},
                      {"partial", withheld(run.partial)},
                      {"notes", run.notes},
                      {"warnings", run.warnings}};
  nlohmann::json rows = nlohmann::json::array();
  for (const WhatIf* w : run.shown_rows()) {
    nlohmann::json r = {{"settings", w->settings}, {"conf", w->conf}, {"own", w->own}};
    put_judgement(r, w->judgement);
    rows.push_back(std::move(r));
  }
  j["rows"] = std::move(rows);
  return j;
}

}  // namespace vramtrace
