// `vramtrace diff`: see diff.h.
//
// Note [diff explanation]: one sentence per device, from the first rule that applies
// (M = the noise margin, 2 MiB by default). OOMs are counted as every command counts them
// (Note [one OOM per failed request], reporter/model/oom_count.h).
//  1. NEW ran out of memory and BASE did not. The failed request is lined up with BASE first:
//     right before BASE's allocation of the same index, when both runs made the same requests up
//     to there (the hash of their sizes agrees), else right before BASE's allocation of the same
//     request (as many allocations of its size before it). Without such a point (BASE is a
//     summary document, never made that request) no cause is named. At the point:
//     - the same live (requested) bytes, within M or 1 %: the program did not need more. If NEW
//       could use less of its device than BASE (a cap), or less than BASE reserved at its peak,
//       the cap explains it (capacity). Else, with NEW's largest free block smaller than the
//       request while enough memory was free in its cache and on the device, it is
//       fragmentation, from load order when NEW freed more temporary blocks than BASE before that
//       point (case C11). Else the device had less room.
//     - more live bytes: capacity, NEW holds more. Fewer: the device had less room.
//     An OOM known without an entry (its moment not recorded) is named with what is known, and
//     its peaks are said to stop at the failure.
//  2. BASE ran out of memory and NEW did not: the mirror sentence.
//  3. A run that died (a trace that ends abruptly, or at its last OOM: at most 1 % more
//     allocations after it) has peaks that are lower bounds. Against a whole run, NEW is said to
//     need more memory only when BASE's peak is whole, less only when NEW's is; otherwise the
//     sentence says whose peaks stop early. Two runs that both died are compared as recorded (up
//     to their ends). A run that caught its OOM and went on has whole peaks.
//  4. Peak allocated changed by more than M: NEW needs more (or less) memory, and the size whose
//     count changed most is named.
//  5. Peak allocated within M but peak reserved changed by more than M: the cache differs
//     (fragmentation or caching), with the largest free block at the end.
//  6. Otherwise: no difference beyond the margin.
// When both runs record call stacks and the site whose bytes changed most (Note [diff sites]) at
// the peak or at the end changed by more than M, the sentence names it with both runs' bytes.
//
// Note [diff sites]: at each moment (each run's own peak of allocated memory, and the end), the
// sites of both runs are matched by their label (the user's line, sites.h), a site missing from
// a run counting 0 bytes there: every site is listed (SitesAt::all), not only the top ten. The
// site named is the one with the largest |NEW - BASE| bytes; ties go to the larger of its two
// figures, then to the first label. No site is named when no site's bytes changed.
#include "analyses/diff.h"
#include "vramtrace/units.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <map>
#include <optional>
#include <set>

#include <fmt/format.h>

namespace vramtrace {

namespace {

// The device's figures in the input's first trace (the first entry, should it repeat).
const DeviceFigures* figures_of(const CheckInput& in, std::int32_t device) {
  if (in.traces.empty()) return nullptr;
  for (const auto& d : in.traces.front().devices)
    if (d.device == device) return &d;
  return nullptr;
}

using Figure = std::optional<std::int64_t> DeviceFigures::*;

// A figure of a device, unset when the input has not the device.
template <class T>
std::optional<T> figure(const DeviceFigures* dev, std::optional<T> DeviceFigures::*f) {
  if (!dev) return std::nullopt;
  return dev->*f;
}

const DeviceEventFacts* facts_of(const CheckInput& in, std::int32_t device) {
  for (const auto& f : in.facts)
    if (f.device == device) return &f;
  return nullptr;
}

std::string bytes(std::optional<std::int64_t> v) {
  return v ? format_bytes(static_cast<double>(*v), ByteStyle::binary) : "-";
}

std::string signed_bytes(std::int64_t v) {
  return (v > 0 ? "+" : "") + format_bytes(static_cast<double>(v), ByteStyle::binary);
}

// Rule 6's sentence: the one explanation of a device that did not change.
std::string no_difference(std::uint64_t margin) {
  return fmt::format("No difference beyond the noise margin of {} in the peaks.",
                     format_bytes(static_cast<double>(margin), ByteStyle::binary));
}

bool same_bytes(std::int64_t a, std::int64_t b, std::uint64_t margin) {
  auto diff = static_cast<double>(std::llabs(a - b));
  return diff <= static_cast<double>(margin) ||
         diff <= 0.01 * static_cast<double>(std::max(std::llabs(a), std::llabs(b)));
}

std::string b2(std::uint64_t v) { return format_bytes(static_cast<double>(v), ByteStyle::binary); }

// One side of the comparison.
struct Side {
  const char* who;  // "NEW" or "BASE"
  const CheckInput& in;
  const DeviceEventFacts* facts;
  const DeviceFigures* fig;
};

// Rule 1 (and its mirror 2): `f` ran out of memory, `o` did not.
std::string oom_sentence(const Side& f, const Side& o, std::int32_t device, std::uint64_t margin) {
  const std::int64_t ooms = figure(f.fig, &DeviceFigures::num_ooms).value_or(0);
  if (!f.facts || !f.facts->has_oom) {
    // Known from the recorded figures only: there is no moment to line up.
    std::string s = fmt::format(
        "{} ran out of memory ({} OOM{}; the trace holds no oom entry for {}, so its moment "
        "is not known)",
        f.who, ooms, ooms == 1 ? "" : "s", ooms == 1 ? "it" : "them");
    if (f.facts && o.facts)
      s += fmt::format(" after {} allocations, where {} made {}", f.facts->allocs, o.who, o.facts->allocs);
    return s + ": its peaks stop at the failure, so they are no measure of what it needs.";
  }
  const DeviceEventFacts& ff = *f.facts;
  const auto req = ff.oom_request_bytes;
  std::string head =
      fmt::format("{} ran out of memory asking for {} (its allocation #{})", f.who, b2(req), ff.allocs_before_oom);
  if (o.in.is_summary)
    return head + fmt::format(
                      "; {} is a summary document, without the events to line the runs up at that "
                      "request, so no cause is named.",
                      o.who);
  AlignmentPoints pts;
  try {
    pts = alignment_points(o.in.path, device, ff.allocs_before_oom, req, ff.same_size_before_oom);
  } catch (const TraceError&) {
    return head + fmt::format("; {} could not be read again to line the runs up, so no cause is named.", o.who);
  }
  const AllocationPoint* at = nullptr;
  std::string where;
  if (pts.at_index && pts.at_index->sizes_hash == ff.sizes_hash_at_oom) {
    at = &*pts.at_index;
    where = "at the same allocation (both runs made the same requests up to it)";
  } else if (pts.at_same_size) {
    at = &*pts.at_same_size;
    where = fmt::format("at {}'s allocation of the same request (#{}, after {} of that size)", o.who, at->allocs,
                        ff.same_size_before_oom);
  } else {
    return head + fmt::format(
                      "; {} never made that request (nor as many allocations before it), so the runs cannot "
                      "be lined up there and no cause is named.",
                      o.who);
  }
  const auto own_live = static_cast<std::int64_t>(ff.live_bytes_at_oom);
  const auto other_live = static_cast<std::int64_t>(at->live_bytes);
  const std::uint64_t cache_free = ff.oom_reserved_bytes > ff.oom_allocated_bytes
                                       ? static_cast<std::uint64_t>(ff.oom_reserved_bytes - ff.oom_allocated_bytes)
                                       : 0;
  if (same_bytes(own_live, other_live, margin)) {
    const std::string both = head + fmt::format(" with the same live bytes as {} ({} vs {}) {}", o.who,
                                                b2(ff.live_bytes_at_oom), b2(at->live_bytes), where);
    const auto cap_own = figure(f.fig, &DeviceFigures::capacity_bytes);
    const auto cap_other = figure(o.fig, &DeviceFigures::capacity_bytes);
    const auto other_reserved = figure(o.fig, &DeviceFigures::reserved_bytes_peak);
    const bool lower_cap = cap_own && cap_other && *cap_own + margin < *cap_other;
    const bool below_need = cap_own && other_reserved && static_cast<std::int64_t>(*cap_own) < *other_reserved;
    if (lower_cap || below_need) {
      std::string s = both + fmt::format(": {} could use {} of its device", f.who, b2(*cap_own));
      if (cap_other) s += fmt::format(", {} {}", o.who, b2(*cap_other));
      if (other_reserved) s += fmt::format(", and {} reserved up to {}", o.who, bytes(other_reserved));
      return s + fmt::format(": the lower capacity explains it (capacity), not the program.");
    }
    const bool fragmented = ff.oom_largest_free_block_bytes < req && cache_free + ff.oom_device_free_bytes >= req;
    if (fragmented) {
      std::string s = both + fmt::format(
                                 ": its largest free block was {}, smaller than the request, although {} of its "
                                 "reserved memory was free and {} more on the device, so the difference is "
                                 "fragmentation",
                                 b2(ff.oom_largest_free_block_bytes), b2(cache_free), b2(ff.oom_device_free_bytes));
      if (ff.frees_before_oom > at->frees)
        s += fmt::format(
            " from load order: {} allocated and freed {} temporary blocks among its long-lived allocations "
            "before that request, {} {}",
            f.who, ff.frees_before_oom, o.who, at->frees);
      return s + ".";
    }
    return both + fmt::format(
                      "; its largest free block was {} and {} were free on the device: the device had less room "
                      "(another process, or a lower memory cap).",
                      b2(ff.oom_largest_free_block_bytes), b2(ff.oom_device_free_bytes));
  }
  if (own_live > other_live)
    return head + fmt::format(" holding {} live against {} in {} {}: {} live bytes explain it (capacity).",
                              b2(ff.live_bytes_at_oom), b2(at->live_bytes), o.who, where,
                              signed_bytes(own_live - other_live));
  return head + fmt::format(" holding less live than {} {} ({} vs {}): the device had less room for it.", o.who, where,
                            b2(ff.live_bytes_at_oom), b2(at->live_bytes));
}

const DeviceSiteTotals* sites_of(const CheckInput& in, std::int32_t device) {
  for (const auto& s : in.sites)
    if (s.device == device) return &s;
  return nullptr;
}

// Note [diff sites]. nullopt when no site's bytes changed.
std::optional<SiteChange> most_changed_site(const std::vector<SiteBytes>& base, const std::vector<SiteBytes>& now) {
  std::map<std::string, SiteChange> by;
  for (const auto& s : base) {
    auto& c = by[s.label];
    c.site = s.label;
    c.base_bytes += s.bytes;
    c.base_blocks += s.blocks;
  }
  for (const auto& s : now) {
    auto& c = by[s.label];
    c.site = s.label;
    c.new_bytes += s.bytes;
    c.new_blocks += s.blocks;
  }
  const SiteChange* best = nullptr;
  for (const auto& [label, c] : by) {  // in label order: the first label wins a full tie
    if (c.change() == 0) continue;
    if (!best) {
      best = &c;
      continue;
    }
    const auto a = std::llabs(c.change()), b = std::llabs(best->change());
    if (a > b || (a == b && std::max(c.base_bytes, c.new_bytes) > std::max(best->base_bytes, best->new_bytes)))
      best = &c;
  }
  if (!best) return std::nullopt;
  return *best;
}

std::string site_figures(const SiteChange& c) {
  return fmt::format("{} in NEW vs {} in BASE, {}", format_bytes(static_cast<double>(c.new_bytes), ByteStyle::binary),
                     format_bytes(static_cast<double>(c.base_bytes), ByteStyle::binary), signed_bytes(c.change()));
}

// The clause of the explanation that names the site (Note [diff explanation]); "" when no site
// changed by more than the margin.
std::string site_clause(const DeviceDiff& d, std::uint64_t margin) {
  auto beyond = [&](const std::optional<SiteChange>& c) {
    return c && !same_bytes(static_cast<std::int64_t>(c->new_bytes), static_cast<std::int64_t>(c->base_bytes), margin);
  };
  const bool peak = beyond(d.site_at_peak), end = beyond(d.site_at_end);
  if (peak && end && d.site_at_peak->site == d.site_at_end->site)
    return fmt::format("; the site whose bytes changed most is {}: at the peak {}, at the end {}", d.site_at_peak->site,
                       site_figures(*d.site_at_peak), site_figures(*d.site_at_end));
  if (peak && end)
    return fmt::format("; the site whose bytes changed most is {} at the peak ({}) and {} at the end ({})",
                       d.site_at_peak->site, site_figures(*d.site_at_peak), d.site_at_end->site,
                       site_figures(*d.site_at_end));
  if (peak)
    return fmt::format("; the site whose bytes changed most at the peak is {} ({})", d.site_at_peak->site,
                       site_figures(*d.site_at_peak));
  if (end)
    return fmt::format("; the site whose bytes changed most at the end is {} ({})", d.site_at_end->site,
                       site_figures(*d.site_at_end));
  return "";
}

// Whether a side's peaks are only lower bounds: the run died (a trace that ends abruptly, or one
// that ends at its last OOM), so it may have needed more than it reached. A run that caught its
// OOM and went on allocating (more than 1 % of the allocations before it, the rule of the what-if
// replays for a trace that ends at its OOM) has whole peaks; without the events (a summary
// document, an OOM without an entry) an OOM counts as the end.
bool stopped_early(const Side& s) {
  const TraceFigures* t = s.in.traces.empty() ? nullptr : &s.in.traces.front();
  if (t && t->incomplete) return true;
  if (figure(s.fig, &DeviceFigures::num_ooms).value_or(0) == 0) return false;
  if (!s.facts || !s.facts->has_oom) return true;
  const std::uint64_t before = s.facts->allocs_before_last_oom, after = s.facts->allocs - before;
  return after * 100 <= before;
}

// Rule 3: why a run's peaks are no measure of what it needs, in words.
std::string stopped_sentence(const Side& s) {
  const std::int64_t ooms = figure(s.fig, &DeviceFigures::num_ooms).value_or(0);
  const TraceFigures* t = s.in.traces.empty() ? nullptr : &s.in.traces.front();
  if (ooms > 0) return fmt::format("{} ran out of memory ({} OOM{})", s.who, ooms, ooms == 1 ? "" : "s");
  return fmt::format("{}'s trace ends abruptly ({})", s.who, t ? t->incomplete_reason : "");
}

std::string explain(const DeviceDiff& d, const CheckInput& base, const CheckInput& now, std::uint64_t margin,
                    const DeviceFigures* fig_base, const DeviceFigures* fig_new) {
  const Side sb{"BASE", base, facts_of(base, d.device), fig_base};
  const Side sn{"NEW", now, facts_of(now, d.device), fig_new};
  const std::optional<std::int64_t> ooms_base = figure(fig_base, &DeviceFigures::num_ooms);
  const std::optional<std::int64_t> ooms_new = figure(fig_new, &DeviceFigures::num_ooms);
  if (ooms_new.value_or(0) > 0 && ooms_base.value_or(0) == 0) return oom_sentence(sn, sb, d.device, margin);
  if (ooms_base.value_or(0) > 0 && ooms_new.value_or(0) == 0) return oom_sentence(sb, sn, d.device, margin);

  const auto alloc_base = figure(fig_base, &DeviceFigures::allocated_bytes_peak);
  const auto alloc_now = figure(fig_new, &DeviceFigures::allocated_bytes_peak);
  if (alloc_base && alloc_now && !same_bytes(*alloc_now, *alloc_base, margin)) {
    std::int64_t change = *alloc_now - *alloc_base;
    // Rule 3: "more" needs BASE's peak to be whole, "less" NEW's (when the other run's is).
    const Side& partial = change > 0 ? sb : sn;
    const Side& other = change > 0 ? sn : sb;
    if (stopped_early(partial) && !stopped_early(other))
      return fmt::format(
          "Peak allocated {} ({} vs {}), but {}: its peaks stop there, so they are no measure of what "
          "the program needs.",
          signed_bytes(change), bytes(alloc_now), bytes(alloc_base), stopped_sentence(partial));
    std::string s = fmt::format("NEW needs {} memory: peak allocated {} ({} vs {})", change > 0 ? "more" : "less",
                                signed_bytes(change), bytes(alloc_now), bytes(alloc_base));
    if (!d.sizes.empty()) {
      const auto& top = d.sizes.front();
      auto dc = static_cast<std::int64_t>(top.now) - static_cast<std::int64_t>(top.base);
      s += fmt::format("; the size whose count changed most is {} ({:+} allocations)",
                       format_bytes(static_cast<double>(top.size), ByteStyle::binary), dc);
    }
    return s + ".";
  }
  const auto res_base = figure(fig_base, &DeviceFigures::reserved_bytes_peak);
  const auto res_now = figure(fig_new, &DeviceFigures::reserved_bytes_peak);
  if (res_base && res_now && !same_bytes(*res_now, *res_base, margin)) {
    std::int64_t change = *res_now - *res_base;
    std::string s =
        fmt::format("Peak allocated is the same, but peak reserved changed by {} ({} vs {}): the cache {} ",
                    signed_bytes(change), bytes(res_now), bytes(res_base), change > 0 ? "holds more" : "holds less");
    s += change > 0 ? "(blocks that could not be reused: fragmentation or a different allocation order)"
                    : "(better reuse of cached blocks)";
    const auto end_base = figure(fig_base, &DeviceFigures::largest_free_block_at_end_bytes);
    const auto end_now = figure(fig_new, &DeviceFigures::largest_free_block_at_end_bytes);
    if (end_base && end_now)
      s += fmt::format("; largest free block at the end {} vs {}",
                       format_bytes(static_cast<double>(*end_now), ByteStyle::binary),
                       format_bytes(static_cast<double>(*end_base), ByteStyle::binary));
    return s + ".";
  }
  return no_difference(margin);
}

}  // namespace

TraceDiff diff_inputs(const CheckInput& base, const CheckInput& now, std::uint64_t margin) {
  TraceDiff out;
  out.base_path = base.path;
  out.new_path = now.path;
  out.base_has_stacks = base.has_stacks;
  out.new_has_stacks = now.has_stacks;
  if (!base.traces.empty()) out.base_lost_events = base.traces.front().lost_events;
  if (!now.traces.empty()) out.new_lost_events = now.traces.front().lost_events;
  out.sites_compared = base.has_stacks && now.has_stacks;
  if (!base.has_stacks && !now.has_stacks)
    out.sites_reason = "neither run records call stacks";
  else if (!base.has_stacks)
    out.sites_reason = "BASE: " + base.no_stacks_reason;
  else if (!now.has_stacks)
    out.sites_reason = "NEW: " + now.no_stacks_reason;
  std::set<std::int32_t> devices;
  for (const auto* in : {&base, &now})
    for (const auto& m : in->measures)
      if (m.trace_index == in->measures.front().trace_index) devices.insert(m.device);
  // The figures side by side, named as PyTorch's memory_stats() names them.
  struct Peak {
    const char* name;
    Figure figure;
    bool bytes;
  };
  static const Peak kPeaks[] = {
      {"allocated_bytes.all.peak", &DeviceFigures::allocated_bytes_peak, true},
      {"reserved_bytes.all.peak", &DeviceFigures::reserved_bytes_peak, true},
      {"active_bytes.all.peak", &DeviceFigures::active_bytes_peak, true},
      {"requested_bytes.all.peak", &DeviceFigures::requested_bytes_peak, true},
      {"inactive_split_bytes.all.peak", &DeviceFigures::inactive_split_bytes_peak, true},
      {"segment.all.peak", &DeviceFigures::segment_peak, false},
      {"allocation.all.allocated", &DeviceFigures::allocations, false},
      {"num_ooms", &DeviceFigures::num_ooms, false},
  };
  for (std::int32_t dev : devices) {
    DeviceDiff d;
    d.device = dev;
    const DeviceFigures* fig_base = figures_of(base, dev);
    const DeviceFigures* fig_new = figures_of(now, dev);
    for (const auto& p : kPeaks)
      d.peaks.push_back({p.name, figure(fig_base, p.figure), figure(fig_new, p.figure), p.bytes});
    const DeviceEventFacts* fb = facts_of(base, dev);
    const DeviceEventFacts* fn = facts_of(now, dev);
    // Counts by size need the events of both runs: a summary document has none, which is not a
    // count of zero (a device one trace never used is).
    if ((fb || fn) && !base.is_summary && !now.is_summary) {
      std::map<std::uint64_t, std::pair<std::uint64_t, std::uint64_t>> counts;
      if (fb)
        for (const auto& [size, c] : fb->alloc_count_by_size) counts[size].first = c;
      if (fn)
        for (const auto& [size, c] : fn->alloc_count_by_size) counts[size].second = c;
      for (const auto& [size, c] : counts)
        if (c.first != c.second) d.sizes.push_back({size, c.first, c.second});
      std::sort(d.sizes.begin(), d.sizes.end(), [](const SizeCountChange& a, const SizeCountChange& b) {
        auto da = std::llabs(static_cast<std::int64_t>(a.now) - static_cast<std::int64_t>(a.base));
        auto db = std::llabs(static_cast<std::int64_t>(b.now) - static_cast<std::int64_t>(b.base));
        if (da != db) return da > db;
        if (a.size != b.size) return a.size > b.size;
        return false;
      });
      if (d.sizes.size() > 10) d.sizes.resize(10);
    }
    d.largest_free_block.push_back({"peak", figure(fig_base, &DeviceFigures::largest_free_block_at_peak_bytes),
                                    figure(fig_new, &DeviceFigures::largest_free_block_at_peak_bytes)});
    d.largest_free_block.push_back({"end", figure(fig_base, &DeviceFigures::largest_free_block_at_end_bytes),
                                    figure(fig_new, &DeviceFigures::largest_free_block_at_end_bytes)});
    FreeBlockFigure oom{"oom", std::nullopt, std::nullopt};
    if (fb && fb->has_oom) oom.base = fb->oom_largest_free_block_bytes;
    if (fn && fn->has_oom) oom.now = fn->oom_largest_free_block_bytes;
    if (oom.base || oom.now) d.largest_free_block.push_back(oom);
    if (out.sites_compared) {
      // A device a run never used has no sites there: none of its bytes, at both moments.
      static const std::vector<SiteBytes> kNone;
      const DeviceSiteTotals* sb = sites_of(base, dev);
      const DeviceSiteTotals* sn = sites_of(now, dev);
      const std::vector<SiteBytes>* peak_base = sb ? (sb->at_peak ? &*sb->at_peak : nullptr) : &kNone;
      const std::vector<SiteBytes>* peak_new = sn ? (sn->at_peak ? &*sn->at_peak : nullptr) : &kNone;
      const std::vector<SiteBytes>* end_base = sb ? (sb->at_end ? &*sb->at_end : nullptr) : &kNone;
      const std::vector<SiteBytes>* end_new = sn ? (sn->at_end ? &*sn->at_end : nullptr) : &kNone;
      d.peak_sites_known = peak_base && peak_new;
      d.end_sites_known = end_base && end_new;
      if (d.peak_sites_known) d.site_at_peak = most_changed_site(*peak_base, *peak_new);
      if (d.end_sites_known) d.site_at_end = most_changed_site(*end_base, *end_new);
    }
    d.explanation = explain(d, base, now, margin, fig_base, fig_new);
    // Changed: a rule other than 6 applied, the OOM counts differ (rules 1 and 2 need one run
    // without), or one run has no figures for the device.
    const auto ooms_base = figure(fig_base, &DeviceFigures::num_ooms);
    const auto ooms_new = figure(fig_new, &DeviceFigures::num_ooms);
    d.changed = d.explanation != no_difference(margin) || ooms_base != ooms_new || !fig_base != !fig_new;
    if (const std::string clause = site_clause(d, margin); !clause.empty()) {
      d.changed = true;
      d.explanation.pop_back();  // every sentence ends in '.'
      d.explanation += clause + ".";
    }
    out.devices.push_back(std::move(d));
  }
  return out;
}

std::string render_diff_text(const TraceDiff& t) {
  std::string out = fmt::format("vramtrace diff\n  BASE {}\n  NEW  {}\n", t.base_path, t.new_path);
  if (t.base_lost_events) out += "BASE: " + lost_events_warning(t.base_lost_events) + "\n";
  if (t.new_lost_events) out += "NEW: " + lost_events_warning(t.new_lost_events) + "\n";
  for (const auto& d : t.devices) {
    out += fmt::format("\ndevice {}\n  {:<32} {:>14} {:>14} {:>24}\n", d.device, "", "BASE", "NEW", "change");
    for (const auto& f : d.peaks) {
      auto show = [&](std::optional<std::int64_t> v) {
        if (!v) return std::string("-");
        return f.bytes ? format_bytes(static_cast<double>(*v), ByteStyle::binary) : std::to_string(*v);
      };
      std::string change = "-";
      if (f.base && f.now) {
        std::int64_t c = *f.now - *f.base;
        change = f.bytes ? signed_bytes(c) : fmt::format("{:+}", c);
        if (*f.base != 0)
          change += fmt::format(" ({:+.1f}%)", 100.0 * static_cast<double>(c) / static_cast<double>(*f.base));
      }
      out += fmt::format("  {:<32} {:>14} {:>14} {:>24}\n", f.name, show(f.base), show(f.now), change);
    }
    if (!d.sizes.empty()) {
      out += fmt::format("  allocation sizes whose counts changed most\n  {:>14} {:>8} {:>8} {:>8}\n", "size", "BASE",
                         "NEW", "change");
      for (const auto& s : d.sizes)
        out +=
            fmt::format("  {:>14} {:>8} {:>8} {:>+8}\n", format_bytes(static_cast<double>(s.size), ByteStyle::binary),
                        s.base, s.now, static_cast<std::int64_t>(s.now) - static_cast<std::int64_t>(s.base));
    }
    if (t.sites_compared) {
      out += "  allocation site whose bytes changed most (BASE -> NEW)\n";
      auto line = [&](const char* when, bool known, const std::optional<SiteChange>& c) {
        if (!known)
          out += fmt::format("    {:<12} not known for both runs\n", when);
        else if (!c)
          out += fmt::format("    {:<12} no site's bytes changed\n", when);
        else
          out += fmt::format("    {:<12} {}: {} in {} blocks -> {} in {} blocks ({})\n", when, c->site,
                             format_bytes(static_cast<double>(c->base_bytes), ByteStyle::binary), c->base_blocks,
                             format_bytes(static_cast<double>(c->new_bytes), ByteStyle::binary), c->new_blocks,
                             signed_bytes(c->change()));
      };
      line("at the peak:", d.peak_sites_known, d.site_at_peak);
      line("at the end:", d.end_sites_known, d.site_at_end);
    } else if (t.base_has_stacks != t.new_has_stacks) {
      out += "  allocation sites not compared: " + t.sites_reason + "\n";
    }
    out += "  largest free block";
    for (const auto& f : d.largest_free_block) {
      auto show = [](std::optional<std::uint64_t> v) {
        return v ? format_bytes(static_cast<double>(*v), ByteStyle::binary) : std::string("-");
      };
      out += fmt::format("  at {}: {} vs {}", f.when, show(f.base), show(f.now));
    }
    out += "\n  " + d.explanation + "\n";
  }
  return out;
}

nlohmann::json diff_json(const TraceDiff& t) {
  auto opt = [](const auto& v) { return v ? nlohmann::json(*v) : nlohmann::json(nullptr); };
  nlohmann::json devs = nlohmann::json::array();
  for (const auto& d : t.devices) {
    nlohmann::json peaks = nlohmann::json::array();
    for (const auto& f : d.peaks) {
      nlohmann::json j = {{"name", f.name}, {"base", opt(f.base)}, {"new", opt(f.now)}};
      if (f.base && f.now) {
        j["change"] = *f.now - *f.base;
        j["change_percent"] =
            *f.base != 0 ? nlohmann::json(100.0 * static_cast<double>(*f.now - *f.base) / static_cast<double>(*f.base))
                         : nlohmann::json(nullptr);
      }
      peaks.push_back(std::move(j));
    }
    nlohmann::json sizes = nlohmann::json::array();
    for (const auto& s : d.sizes)
      sizes.push_back({{"size", s.size},
                       {"base", s.base},
                       {"new", s.now},
                       {"change", static_cast<std::int64_t>(s.now) - static_cast<std::int64_t>(s.base)}});
    nlohmann::json lfb = nlohmann::json::array();
    for (const auto& f : d.largest_free_block)
      lfb.push_back({{"when", f.when}, {"base", opt(f.base)}, {"new", opt(f.now)}});
    nlohmann::json sites = {{"compared", t.sites_compared}};
    if (t.sites_compared) {
      auto change = [](const std::optional<SiteChange>& c) -> nlohmann::json {
        if (!c) return nullptr;
        return {{"site", c->site},       {"base_bytes", c->base_bytes},   {"new_bytes", c->new_bytes},
                {"change", c->change()}, {"base_blocks", c->base_blocks}, {"new_blocks", c->new_blocks}};
      };
      sites["at_peak"] = change(d.site_at_peak);
      sites["at_end"] = change(d.site_at_end);
      sites["peak_known"] = d.peak_sites_known;
      sites["end_known"] = d.end_sites_known;
    } else {
      sites["reason"] = t.sites_reason;
    }
    devs.push_back({{"device", d.device},
                    {"peaks", peaks},
                    {"sizes", sizes},
                    {"largest_free_block", lfb},
                    {"sites", sites},
                    {"explanation", d.explanation},
                    {"changed", d.changed}});
  }
  return {{"base", t.base_path},
          {"new", t.new_path},
          {"base_lost_events", t.base_lost_events},
          {"new_lost_events", t.new_lost_events},
          {"changed", diff_changed(t)},
          {"devices", devs}};
}

bool diff_changed(const TraceDiff& d) {
  return std::any_of(d.devices.begin(), d.devices.end(), [](const DeviceDiff& dev) { return dev.changed; });
}

}  // namespace vramtrace
