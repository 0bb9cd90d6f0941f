#include "analyses/summary.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>

#include "analyses/ledger_report.h"
#include "analyses/oom/diagnosis.h"
#include "analyses/printable.h"
#include "analyses/sites.h"
#include "model/unfinished_run.h"
#include "vramtrace/units.h"

namespace vramtrace {

namespace {

using i64 = std::int64_t;

// torch/cuda/memory.py _format_size: the unit is chosen from the "all" row's value (pref).
std::string format_size_col(i64 sz, i64 pref) {
  static const char* prefixes[] = {"B  ", "KiB", "MiB", "GiB", "TiB", "PiB"};
  const char* prefix = prefixes[0];
  double p = static_cast<double>(pref);
  for (int i = 1; i < 6; ++i) {
    if (p < 768 * 1024) break;
    prefix = prefixes[i];
    sz /= 1024;
    p /= 1024;
  }
  return fmt::format("{:6d} {}", sz, prefix);
}

std::string format_count_col(i64 cnt, i64 pref) {
  static const char* prefixes[] = {" ", "K", "M"};
  const char* prefix = prefixes[0];
  double p = static_cast<double>(pref);
  for (int i = 1; i < 3; ++i) {
    if (p < 750 * 1000) break;
    prefix = prefixes[i];
    cnt /= 1000;
    p /= 1000;
  }
  return fmt::format("{:7d} {} ", cnt, prefix);
}

std::string row(const std::string& name, const std::string& a, const std::string& b, const std::string& c,
                const std::string& d) {
  return fmt::format(" {:<21} | {} | {} | {} | {} ", name, a, b, c, d);
}

std::string hex(std::uint64_t v) { return fmt::format("0x{:x}", v); }

std::string rel_time(const DeviceModel& d, i64 t) { return "+" + format_duration(t - d.first_time_ns); }

/// What the trace recorded at its end for `key` on `device` (each device against its own figures).
std::optional<i64> recorded(const TraceModel& m, std::int32_t device, const std::string& key) {
  const auto* stats = m.header.recorded_stats_of(device);
  if (stats == nullptr) return std::nullopt;
  for (const auto& [k, v] : *stats)
    if (k == key) return v;
  return std::nullopt;
}

/// The figures PyTorch recorded at the end of the run that the model computes too.
const char* kCheckedKeys[] = {"allocated_bytes.all.peak",
                              "reserved_bytes.all.peak",
                              "active_bytes.all.peak",
                              "requested_bytes.all.peak",
                              "allocated_bytes.all.current",
                              "reserved_bytes.all.current",
                              "inactive_split_bytes.all.peak",
                              "segment.all.peak",
                              "allocation.all.allocated",
                              "num_device_alloc",
                              "num_device_free",
                              "num_ooms"};

i64 stat_value(const DeviceStats& s, const std::string& key) {
  for (const auto& [k, v] : flatten_stats(s))
    if (k == key) return v;
  return 0;
}

/// The last column of the recorded-vs-computed table. num_ooms counted from the events is the
/// `oom` entries; a history without an entry for a recorded OOM is not a disagreement the reader
/// has to resolve: the count of OOMs already includes it (Note [one OOM per failed request]).
std::string check_verdict(std::string_view key, i64 recorded_value, i64 computed, const DeviceModel& d) {
  if (recorded_value == computed) return "same";
  if (key == "num_ooms" && computed < recorded_value && !d.oom_count.without_entry.empty() &&
      static_cast<i64>(d.oom_count.ooms) >= recorded_value)
    return fmt::format("no oom entry for {} of them (counted in the OOMs)", recorded_value - computed);
  // Why the two can disagree without either being wrong: PyTorch reads its statistics when the
  // program asks (often after an OOM's exception unwound and freed tensors, or with a history
  // ring that dropped its oldest entries), while the events cover only the recorded history.
  const bool current = key.find(".current") != std::string_view::npos;
  const bool peak = key.find(".peak") != std::string_view::npos;
  // Event indices count the trace's records of every device: the device's last one is its end state's.
  const bool ended_at_oom = !d.ooms.empty() && d.ooms.back().event_index == d.at_end.event_index;
  if (current)
    return recorded_value < computed
               ? std::string(ended_at_oom ? "DIFFERENT: read after the history ended at its OOM; memory freed "
                                            "afterwards (the exception unwinding) is not in the events"
                                          : "DIFFERENT: read after the history's last event; memory freed "
                                            "afterwards is not in the events")
               : std::string(
                     "DIFFERENT: read after the history's last event; memory allocated afterwards is "
                     "not in the events");
  if (recorded_value > computed)
    return std::string(peak ? "DIFFERENT: the peak was reached outside the recorded history (before it began or "
                              "after it ended)"
                            : "DIFFERENT: events outside the recorded history (before it began or after it "
                              "ended) are counted by PyTorch only");
  return "DIFFERENT: the events count more than PyTorch recorded (a damaged or edited trace?)";
}

/// The ledger of one device in the summary: at the end, then at the peak (`d` gives the times'
/// origin; a default DeviceModel for a device PyTorch's history does not have).
std::string ledger_text(const MemoryLedger& ledger, const DeviceLedger& dl, const DeviceModel& d) {
  std::string out;
  for (LedgerAt::Moment kind : {LedgerAt::Moment::end, LedgerAt::Moment::peak}) {
    const LedgerAt* at = dl.at(kind);
    if (!at) continue;
    const std::string when = d.first_time_ns ? ", " + rel_time(d, at->time_ns) : std::string();
    out += "\n" + render_ledger_text(ledger, *at,
                                     fmt::format("Memory ledger of device {} at {}{} ({}):", dl.device,
                                                 ledger_moment_name(*at), when, ledger_levels(ledger)),
                                     "");
  }
  return out;
}

std::string live_table(const std::vector<LiveAllocation>& v, const DeviceModel& d) {
  std::string out = fmt::format("    {:>3}  {:>12}  {:>12}  {:>8}  {:>12}  {}\n", "#", "size", "requested", "stream",
                                "allocated at", "address");
  int i = 1;
  for (const auto& a : v) {
    out += fmt::format("    {:>3}  {:>12}  {:>12}  {:>8}  {:>12}  {}{}\n", i++,
                       format_bytes(static_cast<i64>(a.size), ByteStyle::pytorch),
                       format_bytes(static_cast<i64>(a.requested_size), ByteStyle::pytorch), a.stream,
                       a.before_trace ? "before" : rel_time(d, a.alloc_time_ns), hex(a.address),
                       a.pending_free ? "  (freed, pending on a stream)" : "");
  }
  return out;
}

}  // namespace

std::string format_duration(std::int64_t ns) {
  double v = static_cast<double>(ns);
  if (ns < 0) return "-" + format_duration(-ns);
  if (ns >= 1000000000) return fmt::format("{:.3f} s", v / 1e9);
  if (ns >= 1000000) return fmt::format("{:.3f} ms", v / 1e6);
  if (ns >= 1000) return fmt::format("{:.3f} us", v / 1e3);
  return fmt::format("{} ns", ns);
}

namespace {

// PyTorch's table; `retries` is its number, or "unknown" where the trace does not record it.
// `segments`: the trace holds a framework allocator's segments (Note [the level of a trace]), so
// the table is the device level's, not PyTorch's summary, and its first row is those segments.
std::string summary_table(const DeviceStats& s, int device, bool abbreviated, const std::string& retries,
                          bool segments = false) {
  std::vector<std::string> lines;
  lines.push_back(std::string(75, '='));
  if (segments)
    lines.push_back(
        fmt::format(" {:<73} ", fmt::format("   Device level (a caching allocator's segments, not tensors), "
                                            "device ID {}",
                                            device)));
  else
    lines.push_back(fmt::format(" {:16} PyTorch CUDA memory summary, device ID {:<17d} ", "", device));
  lines.push_back(std::string(75, '-'));
  lines.push_back(
      fmt::format("  {:9} CUDA OOMs: {:<12d} | {:6} cudaMalloc retries: {:<8}  ", "", s.num_ooms, "", retries));
  lines.push_back(std::string(75, '='));
  lines.push_back("        Metric         | Cur Usage  | Peak Usage | Tot Alloc  | Tot Freed  ");
  struct Metric {
    const StatArray DeviceStats::*field;
    const char* name;
    bool bytes;
  };
  const Metric metrics[] = {
      {&DeviceStats::allocated_bytes, segments ? "Held in segments" : "Allocated memory", true},
      {&DeviceStats::active_bytes, "Active memory", true},
      {&DeviceStats::requested_bytes, "Requested memory", true},
      {&DeviceStats::reserved_bytes, "GPU reserved memory", true},
      {&DeviceStats::inactive_split_bytes, "Non-releasable memory", true},
      {&DeviceStats::allocation, "Allocations", false},
      {&DeviceStats::active, "Active allocs", false},
      {&DeviceStats::segment, "GPU reserved segments", false},
      {&DeviceStats::inactive_split, "Non-releasable allocs", false},
  };
  for (const auto& m : metrics) {
    lines.push_back(std::string(75, '-'));
    const StatArray& a = s.*(m.field);
    const Stat& all = a[kStatAll];
    auto fmtv = [&](i64 v, i64 pref) { return m.bytes ? format_size_col(v, pref) : format_count_col(v, pref); };
    std::pair<int, const char*> subs[] = {
        {kStatAll, m.name}, {kStatLarge, "      from large pool"}, {kStatSmall, "      from small pool"}};
    for (const auto& [idx, name] : subs) {
      if (abbreviated && idx != kStatAll) break;
      const Stat& st = a[idx];
      lines.push_back(row(name, fmtv(st.current, all.current), fmtv(st.peak, all.peak),
                          fmtv(st.allocated, all.allocated), fmtv(st.freed(), all.freed())));
    }
  }
  lines.push_back(std::string(75, '-'));
  for (const auto& [st, name] : {std::pair<const Stat*, const char*>{&s.oversize_allocations, "Oversize allocations"},
                                 {&s.oversize_segments, "Oversize GPU segments"}}) {
    lines.push_back(row(name, format_count_col(st->current, st->current), format_count_col(st->peak, st->peak),
                        format_count_col(st->allocated, st->allocated), format_count_col(st->freed(), st->freed())));
  }
  lines.push_back(std::string(75, '='));
  std::string out;
  for (const auto& l : lines) out += "|" + l + "|\n";
  return out;
}

std::string plural(std::uint64_t n, const char* one, const char* many) {
  return fmt::format("{} {}", n, n == 1 ? one : many);
}

}  // namespace

std::string memory_summary_table(const DeviceStats& s, int device, bool abbreviated) {
  return summary_table(s, device, abbreviated, std::to_string(s.num_alloc_retries));
}

std::string memory_summary_table(const DeviceModel& d, bool abbreviated, const AllocationLevelFinding* level) {
  DeviceStats shown = d.stats;
  shown.num_ooms = static_cast<i64>(d.oom_count.ooms);
  shown.num_alloc_retries = d.oom_count.retries ? static_cast<i64>(*d.oom_count.retries) : 0;
  return summary_table(shown, d.device, abbreviated,
                       d.oom_count.retries ? std::to_string(*d.oom_count.retries) : std::string("unknown"),
                       level && level->level == AllocationLevel::allocator_segments);
}

std::string allocation_level_text(const TraceModel& m) {
  if (m.level.level != AllocationLevel::allocator_segments) return {};
  return fmt::format(
      "Device level: {} ran above the shim ({}). Each allocation below is one of its segments: \"Held in "
      "segments\" is the memory it reserved, not its tensors, and what it held free inside them is not in this "
      "trace.{}\n",
      m.level.allocator, m.level.evidence,
      m.level.pytorch ? " Its tensors are in PyTorch's own history: `vramtrace run` records it (without --no-torch)."
                      : "");
}

nlohmann::json allocation_level_json(const TraceModel& m) {
  return {{"allocations", m.level.level == AllocationLevel::allocator_segments ? "allocator_segments" : "requests"},
          {"allocator", m.level.allocator.empty() ? nlohmann::json(nullptr) : nlohmann::json(m.level.allocator)},
          {"evidence", m.level.evidence}};
}

std::string oom_count_text(const OomCount& c) {
  std::string out = fmt::format("OOMs {}", c.ooms);
  if (!c.without_entry.empty()) {
    // Where the OOMs without an entry are known from, each source once.
    std::vector<std::string> sources;
    for (const auto& w : c.without_entry)
      if (std::find(sources.begin(), sources.end(), w.source) == sources.end()) sources.push_back(w.source);
    std::string from;
    for (std::size_t i = 0; i < sources.size(); ++i) from += (i ? ", " : "") + sources[i];
    out += fmt::format(
        " ({} without an oom entry in the history, known from {}: the state at the failure was not "
        "recorded)",
        c.without_entry.size(), from);
  }
  if (!c.retries) return out + ", cudaMalloc retries unknown (not recorded in this trace)";
  out += fmt::format(", cudaMalloc retries {}", *c.retries);
  if (c.retries_from == RetriesFrom::oom_entries) {
    if (c.survived + c.repeated > 0) {
      std::vector<std::string> parts;
      if (c.survived) parts.push_back(fmt::format("{} the program survived (the request then succeeded)", c.survived));
      if (c.repeated) parts.push_back(fmt::format("{} it tried again before the error", c.repeated));
      std::string joined;
      for (std::size_t i = 0; i < parts.size(); ++i) joined += (i ? " and " : "") + parts[i];
      out += fmt::format(" ({} of the traced allocator: {})",
                         plural(c.entries, "failed allocation", "failed allocations"), joined);
    }
  } else if (c.retries_from != RetriesFrom::unknown) {
    out += fmt::format(" ({})", retries_from_text(c.retries_from));
  }
  return out;
}

nlohmann::json oom_count_json(const OomCount& c) {
  nlohmann::json j;
  j["ooms"] = c.ooms;
  j["num_alloc_retries"] = c.retries ? nlohmann::json(*c.retries) : nlohmann::json(nullptr);
  j["retries_source"] = retries_from_text(c.retries_from);
  j["oom_entries"] = c.entries;
  j["survived"] = c.survived;
  j["repeated"] = c.repeated;
  nlohmann::json w = nlohmann::json::array();
  for (const auto& x : c.without_entry) {
    nlohmann::json o = {{"source", x.source}};
    if (x.recorded) {
      const RecordedOom& r = *x.recorded;
      if (!r.message.empty()) o["message"] = r.message;
      if (r.time_ns) o["time_ns"] = r.time_ns;
      if (r.alloc_bytes) o["alloc_bytes"] = *r.alloc_bytes;
      if (r.allowed_bytes) o["allowed_bytes"] = *r.allowed_bytes;
      if (r.device_free_bytes) o["device_free_bytes"] = *r.device_free_bytes;
    }
    w.push_back(o);
  }
  j["without_entry"] = w;
  return j;
}

SummaryText summary_text_of(const TraceModel& m) {
  SummaryText parts;
  // Note [a run that did not finish]: said before anything else (join_summary_text).
  if (const std::string why = unfinished_reason(m.incomplete, m.incomplete_reason, m.lost_events); !why.empty())
    parts.unfinished = unfinished_run_line(printable(m.header.path), why) + "\n";
  std::string out;  // the block being written: one per device, then one per ledger-only device
  auto next_block = [&] {
    if (!out.empty()) parts.blocks.push_back(std::move(out));
    out.clear();
  };
  {
    // Empty for traces without stacks: their text stays as it was.
    const std::vector<DeviceSites> sites = trace_sites(m);
    auto sites_of_device = [&](std::int32_t device) -> const DeviceSites* {
      for (const auto& s : sites)
        if (s.device == device) return &s;
      return nullptr;
    };
    for (const auto& d : m.devices) {
      const DeviceSites* ds = sites_of_device(d.device);
      next_block();
      out += fmt::format("Trace {} ({}{}{}), device {}\n", printable(m.header.path), m.header.format,
                         m.header.workload.empty() ? "" : ", ", printable(m.header.workload), d.device);
      if (!m.header.settings.empty()) out += fmt::format("Settings: {}\n", printable(m.header.settings));
      if (m.incomplete) {
        out += fmt::format("The trace ends abruptly ({}): figures are up to its last complete event.\n",
                           m.incomplete_reason);
      }
      if (m.lost_events) out += lost_events_warning(m.lost_events) + "\n";
      // PyTorch's own table, with the OOMs and retries every command counts; at the segment level
      // it says whose segments its rows are.
      out += allocation_level_text(m);
      out += memory_summary_table(d, false, &m.level);
      out += fmt::format("Duration {}, {} events\n", format_duration(d.last_time_ns - d.first_time_ns), d.events);
      out += oom_count_text(d.oom_count) + "\n";
      if (d.history == DeviceModel::History::none)
        out +=
            "No allocator history: the figures are the end state recorded in the snapshot's segments; "
            "each peak is at least its end value.\n";
      else if (d.history == DeviceModel::History::late)
        out += fmt::format(
            "The history starts late: memory alive before its first event is counted from the start; figures "
            "before {} and every peak are lower bounds (at least the values shown).\n",
            rel_time(d, d.lower_bound_until_ns));
      if (d.at_peak.captured) {
        const auto& p = d.at_peak;
        const auto& st = p.stats;
        i64 alloc = st.allocated_bytes[kStatAll].current, req = st.requested_bytes[kStatAll].current;
        out +=
            fmt::format("\nAt the peak of allocated memory ({}, event {}):\n", rel_time(d, p.time_ns), p.event_index);
        out += fmt::format(
            "  allocated {}  reserved {}  requested {}  active {}\n", format_bytes(alloc, ByteStyle::pytorch),
            format_bytes(st.reserved_bytes[kStatAll].current, ByteStyle::pytorch),
            format_bytes(req, ByteStyle::pytorch), format_bytes(st.active_bytes[kStatAll].current, ByteStyle::pytorch));
        out += fmt::format("  reserved but unallocated {}  non-releasable (inactive split) {}\n",
                           format_bytes(p.cache_free_bytes(), ByteStyle::pytorch),
                           format_bytes(st.inactive_split_bytes[kStatAll].current, ByteStyle::pytorch));
        out += fmt::format("  rounding waste (allocated - requested) {}  largest free block in the cache {}\n",
                           format_bytes(alloc - req, ByteStyle::pytorch),
                           format_bytes(static_cast<i64>(p.largest_free_block), ByteStyle::pytorch));
        if (!p.biggest.empty()) {
          out += fmt::format("  The {} biggest allocations alive at the peak:\n", p.biggest.size());
          out += live_table(p.biggest, d);
        }
        if (ds)
          out += render_sites_text(ds->at_peak, fmt::format("Top allocation sites at the peak (device {}):", d.device),
                                   "  ");
      }
      const auto& e = d.at_end;
      i64 live_bytes = e.stats.active_bytes[kStatAll].current;
      i64 live_n = e.stats.active[kStatAll].current;
      out += fmt::format("\nStill allocated at the end: {} blocks, {} (reserved {})\n", live_n,
                         format_bytes(live_bytes, ByteStyle::pytorch),
                         format_bytes(e.stats.reserved_bytes[kStatAll].current, ByteStyle::pytorch));
      if (!e.biggest.empty()) out += live_table(e.biggest, d);
      if (ds)
        out +=
            render_sites_text(ds->at_end, fmt::format("Top allocation sites at the end (device {}):", d.device), "  ");
      if (const DeviceLedger* dl = m.ledger ? m.ledger->device(d.device) : nullptr)
        out += ledger_text(*m.ledger, *dl, d);
      // Cross-check against the figures PyTorch recorded, when the trace has them.
      std::string check;
      for (const char* key : kCheckedKeys) {
        auto r = recorded(m, d.device, key);
        if (!r) continue;
        i64 mine = stat_value(d.stats, key);
        check += fmt::format("  {:<30} {:>16} {:>16}  {}\n", key, *r, mine, check_verdict(key, *r, mine, d));
      }
      // The trailer's num_alloc_retries counts the traced allocator's own releases of its cache
      // before trying the device again; the retries of the OOM line are the program's (the
      // failed allocations it tried again). Two counts under one name: shown side by side.
      if (m.header.format == "vramtrace")
        if (auto r = recorded(m, d.device, "num_alloc_retries"))
          check += fmt::format(
              "  {:<30} {:>16} {:>16}  {}\n", "num_alloc_retries", *r, "-",
              d.oom_count.retries
                  ? fmt::format("the traced allocator's releases of its cache before trying again; the program "
                                "tried again {} times (cudaMalloc retries above)",
                                *d.oom_count.retries)
                  : std::string("the traced allocator's releases of its cache before trying again"));
      if (!check.empty()) {
        // Our traces carry the shim allocator's figures in their trailer; PyTorch's, its own.
        const char* by = m.header.format == "vramtrace" ? "the traced allocator" : "PyTorch";
        out += fmt::format("\nRecorded by {} vs computed from the events:\n  {:<30} {:>16} {:>16}\n", by, "statistic",
                           "recorded", "computed");
        out += check;
      }
      std::vector<std::string> notes = m.notes;
      notes.insert(notes.end(), d.notes.begin(), d.notes.end());
      if (m.ledger && &d == &m.devices.front())
        notes.insert(notes.end(), m.ledger->notes.begin(), m.ledger->notes.end());
      if (!notes.empty()) {
        out += "\nNotes:\n";
        for (const auto& n : notes) out += fmt::format("  - {}\n", n);
      }
    }
    // Devices where PyTorch holds nothing but the process does (a CUDA context, another library).
    if (m.ledger)
      for (const auto& dl : m.ledger->devices) {
        bool modelled = false;
        for (const auto& d : m.devices) modelled = modelled || d.device == dl.device;
        if (modelled) continue;
        next_block();
        out += fmt::format("Trace {} ({}), device {}: PyTorch's history holds nothing on this device\n", m.header.path,
                           m.header.format, dl.device);
        out += ledger_text(*m.ledger, dl, DeviceModel{});
        if (m.devices.empty() && !m.ledger->notes.empty()) {
          out += "\nNotes:\n";
          for (const auto& n : m.ledger->notes) out += fmt::format("  - {}\n", n);
        }
      }
  }
  next_block();
  if (m.devices.empty() && !(m.ledger && !m.ledger->devices.empty())) {
    std::string e = fmt::format("Trace {}: no events", m.header.path);
    if (m.incomplete) e += fmt::format("; the trace ends abruptly ({})", m.incomplete_reason);
    e += ".\n";
    if (m.lost_events) e += lost_events_warning(m.lost_events) + "\n";
    // A snapshot with an empty history still records who holds the blocks of its end state.
    for (const auto& s : trace_sites(m))
      e += render_sites_text(
          s.at_end, fmt::format("Top allocation sites in the recorded end state (device {}):", s.device), "  ");
    parts.empty = std::move(e);
  }
  return parts;
}

std::string join_summary_text(const std::vector<SummaryText>& traces, const std::string& first_block) {
  std::string out;
  for (const auto& t : traces) out += t.unfinished;
  auto add = [&out](const std::string& block) {
    if (!out.empty()) out += "\n";
    out += block;
  };
  if (!first_block.empty()) add(first_block);
  for (const auto& t : traces)
    for (const auto& b : t.blocks) add(b);
  for (const auto& t : traces)
    if (!t.empty.empty()) add(t.empty);
  if (out.empty()) out = "No events in the trace(s).\n";
  return out;
}

std::string render_summary_text(const std::vector<TraceModel>& models) {
  std::vector<SummaryText> parts;
  parts.reserve(models.size());
  for (const auto& m : models) parts.push_back(summary_text_of(m));
  return join_summary_text(parts);
}

namespace {

nlohmann::json live_json(const std::vector<LiveAllocation>& v) {
  nlohmann::json a = nlohmann::json::array();
  for (const auto& l : v)
    a.push_back({{"address", l.address},
                 {"size", l.size},
                 {"requested_size", l.requested_size},
                 {"stream", l.stream},
                 {"time_ns", l.alloc_time_ns},
                 {"event", l.alloc_event},
                 {"pending_free", l.pending_free}});
  // Only where it holds, so that documents of complete histories stay as they were.
  for (std::size_t i = 0; i < v.size(); ++i)
    if (v[i].before_trace) a[i]["before_trace"] = true;
  return a;
}

nlohmann::json stats_json(const DeviceStats& s) {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& [k, v] : flatten_stats(s)) j[k] = v;
  // How often the allocator synchronised every stream is in no trace's events (PyTorch records it
  // only in memory_stats()): unknown, not 0.
  j["num_sync_all_streams"] = nullptr;
  return j;
}

}  // namespace

nlohmann::json trace_identity_json(const TraceModel& m) {
  nlohmann::json t;
  t["path"] = m.header.path;
  t["format"] = m.header.format;
  t["workload"] = m.header.workload;
  t["settings"] = m.header.settings;
  t["incomplete"] = m.incomplete;
  t["lost_events"] = m.lost_events;
  if (m.incomplete) t["incomplete_reason"] = m.incomplete_reason;
  t["events"] = m.events;
  t["notes"] = m.notes;
  // The process, when the trace names it (vramtrace traces): diff pairs processes by rank.
  if (m.header.pid != 0) t["pid"] = m.header.pid;
  if (!m.header.host.empty()) t["host"] = m.header.host;
  if (!m.header.rank.empty()) t["rank"] = m.header.rank;
  return t;
}

nlohmann::json summary_trace_json(const TraceModel& m) {
  {
    nlohmann::json t = trace_identity_json(m);
    t["has_segment_events"] = m.has_segment_events;
    t["level"] = allocation_level_json(m);
    t["sites"] = trace_sites_json(m, trace_sites(m));
    if (m.ledger) t["ledger"] = ledger_json(m);  // only where there is one: other documents stay as they were
    nlohmann::json devs = nlohmann::json::array();
    for (const auto& d : m.devices) {
      nlohmann::json j;
      j["device"] = d.device;
      DeviceStats shown = d.stats;
      shown.num_ooms = static_cast<i64>(d.oom_count.ooms);
      shown.num_alloc_retries = d.oom_count.retries ? static_cast<i64>(*d.oom_count.retries) : 0;
      j["stats"] = stats_json(shown);
      if (!d.oom_count.retries) j["stats"]["num_alloc_retries"] = nullptr;  // not in the trace: unknown, not 0
      j["events"] = d.events;
      j["first_time_ns"] = d.first_time_ns;
      j["duration_ns"] = d.last_time_ns - d.first_time_ns;
      // Absent for a complete history (documents stay as they were): "late" or "none" says that
      // every peak is a lower bound (Note [a history that begins late]).
      if (d.history == DeviceModel::History::late) {
        j["history"] = "late";
        j["lower_bound_until_ns"] = d.lower_bound_until_ns;
      } else if (d.history == DeviceModel::History::none) {
        j["history"] = "none";
      }
      if (d.at_peak.captured) {
        const auto& st = d.at_peak.stats;
        j["peak"] = {
            {"event", d.at_peak.event_index},
            {"time_ns", d.at_peak.time_ns},
            {"allocated_bytes", st.allocated_bytes[kStatAll].current},
            {"reserved_bytes", st.reserved_bytes[kStatAll].current},
            {"requested_bytes", st.requested_bytes[kStatAll].current},
            {"active_bytes", st.active_bytes[kStatAll].current},
            {"inactive_split_bytes", st.inactive_split_bytes[kStatAll].current},
            {"rounding_waste_bytes", st.allocated_bytes[kStatAll].current - st.requested_bytes[kStatAll].current},
            {"largest_free_block_bytes", d.at_peak.largest_free_block},
            {"biggest", live_json(d.at_peak.biggest)}};
      }
      j["end"] = {{"live_blocks", d.at_end.stats.active[kStatAll].current},
                  {"live_bytes", d.at_end.stats.active_bytes[kStatAll].current},
                  {"allocated_bytes", d.at_end.stats.allocated_bytes[kStatAll].current},
                  {"reserved_bytes", d.at_end.stats.reserved_bytes[kStatAll].current},
                  {"largest_free_block_bytes", d.at_end.largest_free_block},
                  {"biggest", live_json(d.at_end.biggest)}};
      j["ooms"] = d.oom_count.ooms;
      if (const std::uint64_t cap = m.header.usable_bytes_of(d.device))
        j["capacity_bytes"] = cap;
      else
        j["capacity_bytes"] = nullptr;
      j["oom_count"] = oom_count_json(d.oom_count);
      nlohmann::json check = nlohmann::json::array();
      for (const char* key : kCheckedKeys) {
        auto r = recorded(m, d.device, key);
        if (!r) continue;
        i64 mine = stat_value(d.stats, key);
        check.push_back({{"name", key},
                         {"recorded", *r},
                         {"computed", mine},
                         {"same", mine == *r},
                         {"verdict", check_verdict(key, *r, mine, d)}});
      }
      j["recorded_check"] = check;
      j["notes"] = d.notes;
      devs.push_back(j);
    }
    t["devices"] = devs;
    return t;
  }
}

nlohmann::json unfinished_runs_json(const std::vector<TraceModel>& models) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& m : models) {
    const std::string why = unfinished_reason(m.incomplete, m.incomplete_reason, m.lost_events);
    if (why.empty()) continue;
    out.push_back({{"path", m.header.path},
                   {"reason", why},
                   {"incomplete", m.incomplete},
                   {"lost_events", m.lost_events},
                   {"message", unfinished_run_line(m.header.path, why)}});
  }
  return out;
}

nlohmann::json summary_json(const std::vector<TraceModel>& models) {
  nlohmann::json traces = nlohmann::json::array();
  for (const auto& m : models) traces.push_back(summary_trace_json(m));
  return {{"unfinished_runs", unfinished_runs_json(models)}, {"traces", traces}};
}

}  // namespace vramtrace
