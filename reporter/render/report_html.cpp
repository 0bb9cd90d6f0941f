#include "render/report_html.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <unordered_map>

#include "analyses/ledger_report.h"
#include "analyses/oom/diagnosis.h"
#include "analyses/oom/oom_report.h"
#include "analyses/processes.h"
#include "analyses/sites.h"
#include "analyses/summary.h"
#include "render/report_page.h"
#include "render/report_verdicts.h"

namespace vramtrace {

namespace {

using i64 = std::int64_t;
using u64 = std::uint64_t;

double ms(i64 ns) { return static_cast<double>(ns) / 1e6; }

// Note [stacks in the page]: the page shows the call stack of every site and of every biggest
// allocation on hover. Each distinct stack goes into the trace's data once ("stacks": {"frames",
// "list"}), and sites and allocations refer to it by its index in "list"; each distinct frame
// label goes into "frames" once, and a stack is a list of frame indices, innermost first, where a
// negative entry -N stands for N frames left out. Frames are labelled as the sites tables label
// them (frame_label). Three caps keep the page small whatever the trace:
//  - the first max_stacks distinct stacks referred to are embedded, in the page's order (at the
//    peak its biggest allocations, then its sites; each OOM; the end); later references are null
//    and "stacks_left_out" counts the stacks left out;
//  - a stack of more than max_stack_frames frames keeps its innermost frames and the frames
//    around the user's line;
//  - a label longer than max_frame_chars is cut.
// The page says where each cap applied.
class PageStacks {
 public:
  PageStacks(const StackTable* table, const ReportOptions& o) : table_(table), o_(o) {}

  // The index of stack `id` in the page's list; null for no stack, an unknown id, or past the cap.
  nlohmann::json ref(std::uint32_t id) {
    const std::vector<Frame>* st = table_ ? table_->get(id) : nullptr;
    if (!st || st->empty()) return nullptr;
    if (auto it = index_.find(id); it != index_.end()) return it->second;
    if (list_.size() >= o_.max_stacks) {
      left_out_.insert(id);
      return nullptr;
    }
    const SiteFrames where = site_frames(*st);
    nlohmann::json f = nlohmann::json::array();
    std::size_t user_at = 0, via_at = SiteFrames::none;
    auto keep = [&](std::size_t from, std::size_t to) {  // frames [from, to)
      for (std::size_t i = from; i < to; ++i) {
        if (i == where.user) user_at = f.size();
        if (i == where.via) via_at = f.size();
        f.push_back(frame((*st)[i]));
      }
    };
    auto gap = [&](std::size_t n) {
      if (n) f.push_back(-static_cast<std::int64_t>(n));
    };
    const std::size_t n = st->size(), max = std::max<std::size_t>(o_.max_stack_frames, 8);
    if (n <= max) {
      keep(0, n);
    } else if (where.user < max) {
      keep(0, max);
      gap(n - max);
    } else {
      // The user's line lies deeper than the cap (C++ frames of stacks="all"): the innermost
      // frames, then the user's line with a few frames inside it and the callers above it.
      const std::size_t head = max / 4, from = where.user - 3, to = std::min(n, from + (max - head));
      keep(0, head);
      gap(from - head);
      keep(from, to);
      gap(n - to);
    }
    nlohmann::json e = {{"f", std::move(f)}, {"u", user_at}, {"n", n}};
    if (via_at != SiteFrames::none) e["v"] = via_at;
    list_.push_back(std::move(e));
    index_.emplace(id, list_.size() - 1);
    return list_.size() - 1;
  }

  // The label of stack `id`'s user frame ("" without one): what a table names as the site.
  std::string site(std::uint32_t id) const {
    const std::vector<Frame>* st = table_ ? table_->get(id) : nullptr;
    if (!st) return "";
    const SiteFrames where = site_frames(*st);
    return where.user == SiteFrames::none ? "" : cut(frame_label((*st)[where.user]));
  }

  // The index of frame `f`'s label in the page's "frames" (added once, as a stack's frames are).
  std::size_t frame_ref(const Frame& f) { return frame(f); }

  // {"frames": [[label, kind]], "list": [{"f", "u", "v", "n"}], "max_stacks", "max_frames",
  // "stacks_left_out"}; null when the trace records no stacks.
  nlohmann::json json() const {
    if (!table_) return nullptr;
    return {{"frames", frames_},
            {"list", list_},
            {"max_stacks", o_.max_stacks},
            {"max_frames", std::max<std::size_t>(o_.max_stack_frames, 8)},
            {"stacks_left_out", left_out_.size()}};
  }

 private:
  std::string cut(std::string s) const {
    if (s.size() <= o_.max_frame_chars) return s;
    std::size_t at = o_.max_frame_chars;
    while (at > 0 && (static_cast<unsigned char>(s[at]) & 0xC0) == 0x80) --at;  // not inside a UTF-8 sequence
    s.resize(at);
    return s + "...";
  }

  std::size_t frame(const Frame& f) {
    std::string label = cut(frame_label(f));
    const char* kind = frame_kind_name(frame_kind(f));  // by module for native frames of vramtrace traces
    std::string key = label + '\0' + kind;
    if (auto it = frame_index_.find(key); it != frame_index_.end()) return it->second;
    frames_.push_back({label, kind});
    frame_index_.emplace(std::move(key), frames_.size() - 1);
    return frames_.size() - 1;
  }

  const StackTable* table_;
  const ReportOptions& o_;
  nlohmann::json frames_ = nlohmann::json::array();
  nlohmann::json list_ = nlohmann::json::array();
  std::unordered_map<std::uint32_t, std::size_t> index_;
  std::unordered_map<std::string, std::size_t> frame_index_;
  std::set<std::uint32_t> left_out_;
};

// A sites table for the page: each site with its largest framework line and its stack (an index
// into the trace's "stacks", Note [stacks in the page]).
nlohmann::json page_sites_json(const SitesAt& s, PageStacks& stacks) {
  nlohmann::json a = nlohmann::json::array();
  for (const auto& x : s.sites) {
    std::string via;
    for (const auto& v : x.via)
      if (!v.label.empty()) {
        via = v.label;
        break;
      }
    a.push_back({{"site", x.label},
                 {"bytes", x.bytes},
                 {"blocks", x.blocks},
                 {"via", via},
                 {"stack", stacks.ref(x.stack)},
                 {"stacks", x.stacks}});
  }
  return a;
}

nlohmann::json layout_json(const Snapshot& s, const ReportOptions& o) {
  // Keep the largest segments, drawn in address order.
  std::vector<const SegmentSnapshot*> segs;
  segs.reserve(s.segments.size());
  for (const auto& g : s.segments) segs.push_back(&g);
  if (segs.size() > o.max_segments_drawn) {
    std::partial_sort(segs.begin(), segs.begin() + static_cast<std::ptrdiff_t>(o.max_segments_drawn), segs.end(),
                      [](auto* a, auto* b) { return a->total_size > b->total_size; });
    segs.resize(o.max_segments_drawn);
    std::sort(segs.begin(), segs.end(), [](auto* a, auto* b) { return a->address < b->address; });
  }
  nlohmann::json arr = nlohmann::json::array();
  for (const auto* g : segs) {
    nlohmann::json blocks = nlohmann::json::array();
    std::size_t n = 0;
    for (const auto& b : g->blocks) {
      int state = b.state == BlockState::active_allocated ? 0 : b.state == BlockState::active_pending_free ? 1 : 2;
      if (n + 1 >= o.max_blocks_per_segment && n + 1 < g->blocks.size()) {
        // merge the rest into one run, marked state 3 ("many blocks")
        u64 rest = g->address + g->total_size - b.address;
        blocks.push_back({b.address - g->address, rest, 3, 0});
        break;
      }
      blocks.push_back({b.address - g->address, b.size, state, b.requested_size});
      ++n;
    }
    arr.push_back({{"addr", fmt::format("0x{:x}", g->address)},
                   {"size", g->total_size},
                   {"large", g->is_large},
                   {"expandable", g->is_expandable},
                   {"blocks", blocks}});
  }
  return arr;
}

nlohmann::json biggest_json(const std::vector<LiveAllocation>& v, i64 t0, PageStacks& stacks) {
  nlohmann::json a = nlohmann::json::array();
  for (const auto& l : v) {
    nlohmann::json b = {{"addr", fmt::format("0x{:x}", l.address)},
                        {"size", l.size},
                        {"requested", l.requested_size},
                        {"stream", l.stream},
                        {"t", ms(l.alloc_time_ns - t0)},
                        {"pending", l.pending_free}};
    if (l.before_trace) b["before_trace"] = true;
    if (l.stack != 0) {
      b["site"] = stacks.site(l.stack);
      b["stack"] = stacks.ref(l.stack);
    }
    a.push_back(std::move(b));
  }
  return a;
}

nlohmann::json state_json(const StateAt& st, i64 t0, const ReportOptions& o, PageStacks& stacks) {
  const auto& s = st.stats;
  return {{"t", ms(st.time_ns - t0)},
          {"event", st.event_index},
          {"allocated", s.allocated_bytes[kStatAll].current},
          {"reserved", s.reserved_bytes[kStatAll].current},
          {"active", s.active_bytes[kStatAll].current},
          {"requested", s.requested_bytes[kStatAll].current},
          {"inactive_split", s.inactive_split_bytes[kStatAll].current},
          {"largest_free", st.largest_free_block},
          {"segments_total", st.layout.segments.size() + st.segments_left_out},
          {"segments", layout_json(st.layout, o)},
          {"biggest", biggest_json(st.biggest, t0, stacks)}};
}

// Note [the icicle at the peak]: the bytes allocated at the peak by call stack, as a tree from the
// outermost caller down (a flame graph upside down): a node is a frame under its caller's node,
// its bytes those of the blocks whose stacks pass through it. Only blocks with a recorded stack
// count; the root is their sum. To keep the page small the tree keeps its largest nodes, at most
// max_icicle_nodes and none below 1/1000 of the root (under a pixel of a 1,000-pixel-wide view):
// a kept node's bytes stay exact, and what its children do not show is drawn as its own. Nodes
// go out parent first: {"f": frame index (Note [stacks in the page]), "p": parent node (-1 for
// the root's children), "b": bytes}, plus "total" and "left_out" (nodes not kept).
nlohmann::json icicle_json(const StateAt& st, const StackTable* table, const ReportOptions& o, PageStacks& stacks) {
  if (!table || st.stacks.empty()) return nullptr;
  struct Node {
    std::size_t parent;  // index in `all`; npos for a root child
    const Frame* frame;
    u64 bytes = 0;
  };
  constexpr std::size_t kNone = static_cast<std::size_t>(-1);
  std::vector<Node> all;
  std::map<std::pair<std::size_t, std::string>, std::size_t> index;  // (parent, label) -> node
  u64 total = 0;
  for (const StackBytes& sb : st.stacks) {
    const std::vector<Frame>* frames = sb.stack ? table->get(sb.stack) : nullptr;
    if (!frames || frames->empty()) continue;
    total += sb.bytes;
    std::size_t parent = kNone;
    for (auto f = frames->rbegin(); f != frames->rend(); ++f) {
      auto [it, added] = index.try_emplace({parent, frame_label(*f)}, all.size());
      if (added) all.push_back({parent, &*f});
      all[it->second].bytes += sb.bytes;
      parent = it->second;
    }
  }
  if (total == 0) return nullptr;
  // The largest nodes first, each after its parent (a parent holds at least its child's bytes).
  std::vector<std::size_t> order(all.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t a, std::size_t b) { return all[a].bytes > all[b].bytes; });
  std::vector<std::size_t> out_index(all.size(), kNone);
  std::vector<std::size_t> kept;
  for (std::size_t i : order) {
    if (kept.size() >= o.max_icicle_nodes || all[i].bytes * 1000 < total) break;
    if (all[i].parent != kNone && out_index[all[i].parent] == kNone) continue;
    out_index[i] = kept.size();
    kept.push_back(i);
  }
  nlohmann::json f = nlohmann::json::array(), p = nlohmann::json::array(), b = nlohmann::json::array();
  for (std::size_t i : kept) {
    f.push_back(stacks.frame_ref(*all[i].frame));
    p.push_back(all[i].parent == kNone ? -1 : static_cast<std::int64_t>(out_index[all[i].parent]));
    b.push_back(all[i].bytes);
  }
  return {{"f", std::move(f)},
          {"p", std::move(p)},
          {"b", std::move(b)},
          {"total", total},
          {"left_out", all.size() - kept.size()}};
}

// Note [the timeline in the page]: the buckets as whole numbers that mostly stay short, decoded
// by the page (common.js, decodeTimeline) into its arrays t, te (ms since the device's first
// event) and, per series k (a, c, r, q: allocated, active, reserved, requested), kmin, kmax,
// klast. Per bucket i: "b" its begin minus the previous bucket's end (the first: minus 0) and "d"
// its end minus its begin, both in ns; "kl" its last value minus the previous bucket's last
// value; "kn" last - min; "kx" max - last (bytes). Every number is an integer below 2^53, exact
// in JSON's doubles, and the page's times are ns / 1e6 as ms() computes them here. About 0.44
// of the arrays written out, so the page holds twice the buckets for the same size.
//
// The page's share of buckets: a device whose timeline has more than `max_buckets` merges
// neighbours two by two until it fits (as the model coarsens: the minimum and maximum of the pair,
// the second's last value), so no peak is lost and the whole page stays bounded
// (ReportOptions::max_page_buckets). Its exact points (Note [the timeline's exact points around
// the peak]), at most `max_exact` centred on the peak, go in "x": "t" each point's time minus the
// previous one's (the first: minus t0) and per series k "k" its value minus the previous one's.
std::vector<TimelineBucket> merged_pairs(const std::vector<TimelineBucket>& in) {
  std::vector<TimelineBucket> out;
  out.reserve(in.size() / 2 + 1);
  for (std::size_t i = 0; i < in.size(); i += 2) {
    TimelineBucket m = in[i];
    if (i + 1 < in.size()) {
      const TimelineBucket& b = in[i + 1];
      m.t_end_ns = std::max(m.t_end_ns, b.t_end_ns);
      for (int k = 0; k < 4; ++k) {
        m.min[k] = std::min(m.min[k], b.min[k]);
        m.max[k] = std::max(m.max[k], b.max[k]);
      }
      m.last = b.last;
    }
    out.push_back(m);
  }
  return out;
}

nlohmann::json encoded_timeline(const std::vector<TimelineBucket>& buckets, const DeviceModel& d, i64 t0,
                                std::size_t max_exact) {
  std::vector<i64> begin, dur;
  std::array<std::vector<i64>, 4> dl, dn, dx;
  i64 prev_end = 0;
  std::array<i64, 4> prev_last{};
  for (const auto& b : buckets) {
    begin.push_back(b.t_begin_ns - t0 - prev_end);
    dur.push_back(b.t_end_ns - b.t_begin_ns);
    prev_end = b.t_end_ns - t0;
    for (int k = 0; k < 4; ++k) {
      dl[k].push_back(b.last[k] - prev_last[k]);
      dn[k].push_back(b.last[k] - b.min[k]);
      dx[k].push_back(b.max[k] - b.last[k]);
      prev_last[k] = b.last[k];
    }
  }
  nlohmann::json tl = {{"b", begin}, {"d", dur}};
  const char* keys[4] = {"a", "c", "r", "q"};  // allocated, active, reserved, requested
  for (int k = 0; k < 4; ++k) {
    tl[std::string(keys[k]) + "l"] = dl[k];
    tl[std::string(keys[k]) + "n"] = dn[k];
    tl[std::string(keys[k]) + "x"] = dx[k];
  }
  // A history that begins late has lower bounds for figures, not exact ones (Note [a history that
  // begins late]): no exact points then.
  if (!d.exact.empty() && max_exact > 0 && d.history == DeviceModel::History::complete) {
    // Centred on the peak: the first point at the highest allocated value.
    std::size_t peak = 0;
    for (std::size_t i = 1; i < d.exact.size(); ++i)
      if (d.exact[i].value[0] > d.exact[peak].value[0]) peak = i;
    std::size_t lo = peak > max_exact / 2 ? peak - max_exact / 2 : 0;
    const std::size_t hi = std::min(d.exact.size(), lo + max_exact);
    if (hi - lo < max_exact) lo = hi > max_exact ? hi - max_exact : 0;
    std::vector<i64> xt;
    std::array<std::vector<i64>, 4> xv;
    i64 prev_t = t0;
    std::array<i64, 4> prev_v{};
    for (std::size_t i = lo; i < hi; ++i) {
      xt.push_back(d.exact[i].t_ns - prev_t);
      prev_t = d.exact[i].t_ns;
      for (int k = 0; k < 4; ++k) {
        xv[k].push_back(d.exact[i].value[k] - prev_v[k]);
        prev_v[k] = d.exact[i].value[k];
      }
    }
    nlohmann::json x = {{"t", xt}};
    for (int k = 0; k < 4; ++k) x[keys[k]] = xv[k];
    tl["x"] = std::move(x);
  }
  return tl;
}

// A device's timeline in at most `max_buckets` buckets and `max_bytes` bytes of JSON: pairs
// merged until both hold, down to `min_buckets` buckets; then fewer exact points.
nlohmann::json timeline_json(const DeviceModel& d, i64 t0, std::size_t max_buckets, std::size_t max_exact,
                             std::size_t max_bytes, std::size_t min_buckets) {
  std::vector<TimelineBucket> buckets = d.timeline;
  while (buckets.size() > std::max<std::size_t>(1, max_buckets)) buckets = merged_pairs(buckets);
  for (;;) {
    nlohmann::json tl = encoded_timeline(buckets, d, t0, max_exact);
    if (tl.dump().size() <= max_bytes) return tl;
    if (buckets.size() > min_buckets)
      buckets = merged_pairs(buckets);
    else if (max_exact > 1)
      max_exact /= 2;
    else
      return tl;  // the least the page keeps of a device
  }
}

// Note [checkpoints of the state] (model/trace_model.h) in the page: each device's checkpoints,
// then its end state, as states (state_json). Most segments do not change from one checkpoint to
// the next: a segment equal to the one at its address in the checkpoint before is written
// {"addr", "same": true}, and the page takes the earlier one. Within `budget` bytes of JSON: over
// it, one in k is kept (the end always) for the smallest k that fits. Writes the count taken and
// k into `dj`.
void checkpoints_json(const DeviceModel& d, nlohmann::json& dj, std::size_t budget, const ReportOptions& o,
                      PageStacks& stacks) {
  const i64 t0 = d.first_time_ns;
  std::vector<const StateAt*> states;
  for (const auto& c : d.checkpoints) states.push_back(&c);
  if (!d.checkpoints.empty() && d.at_end.captured && d.at_end.event_index > d.checkpoints.back().event_index)
    states.push_back(&d.at_end);
  // Each state's segments as text, by address, and the size of the rest of it.
  std::vector<std::map<std::string, std::string>> segs(states.size());
  std::vector<std::size_t> rest(states.size());
  for (std::size_t i = 0; i < states.size(); ++i) {
    PageStacks none(nullptr, o);  // sized without stack references, which are small
    nlohmann::json j = state_json(*states[i], t0, o, none);
    // Sized as the page writes them: text that is not UTF-8 replaced, not thrown on.
    const auto text = [](const nlohmann::json& v) {
      return v.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    };
    for (const auto& g : j["segments"]) segs[i][g["addr"].get<std::string>()] = text(g);
    j["segments"] = nlohmann::json::array();
    rest[i] = text(j).size();
  }
  auto same = [&](std::size_t prev, const std::string& addr, const std::string& text) {
    if (prev == states.size()) return false;
    auto it = segs[prev].find(addr);
    return it != segs[prev].end() && it->second == text;
  };
  auto kept = [&](std::size_t k, std::size_t i) { return i % k == 0 || i + 1 == states.size(); };
  auto cost = [&](std::size_t k) {
    std::size_t sum = 0, prev = states.size();
    for (std::size_t i = 0; i < states.size(); ++i) {
      if (!kept(k, i)) continue;
      sum += rest[i];
      for (const auto& [addr, text] : segs[i]) sum += 1 + (same(prev, addr, text) ? addr.size() + 24 : text.size());
      prev = i;
    }
    return sum;
  };
  std::size_t every = 1;
  while (every < states.size() && cost(every) > budget) ++every;
  nlohmann::json arr = nlohmann::json::array();
  if (states.empty() || cost(every) <= budget) {
    std::size_t prev = states.size();
    for (std::size_t i = 0; i < states.size(); ++i) {
      if (!kept(every, i)) continue;
      nlohmann::json j = state_json(*states[i], t0, o, stacks);
      if (states[i] == &d.at_end) j["end"] = true;
      for (auto& g : j["segments"]) {
        const std::string addr = g["addr"].get<std::string>();
        if (same(prev, addr, segs[i][addr])) g = {{"addr", addr}, {"same", true}};
      }
      arr.push_back(std::move(j));
      prev = i;
    }
  }
  dj["checkpoints"] = std::move(arr);
  dj["checkpoints_taken"] = states.size();
  dj["checkpoints_every"] = every;
}

// Note [devices in the page]: a device's own states and tables (the peak's layout, sites and
// icicle, each OOM's state, the summary table, the end) are the part of the page that grows with
// each device beyond its timeline, 10 to 15 KB for a rank of a job: a job of 256 ranks wrote 5 MB.
// So all devices share ReportOptions::max_detail_bytes: devices with an OOM first (the reason a
// job's report is opened), then the highest peak reserved; each as long as it fits, the first
// whatever its size. The others keep their figures (peak allocated and reserved, OOM count,
// capacity) and their timeline, "detail": false, and the page names the commands that give the
// rest (vramtrace summary and oom on that trace).
//
// A drawn device's section (its timeline, marks and notes) costs 4 to 8 KB more, so past
// ReportOptions::max_device_sections devices (in the same order) a device has no section: it is
// a row of "other_devices", columns {"p" (with several traces: the process's index in
// processes.labels and .paths) or "path" (one trace), "device",
// "peak_allocated", "peak_reserved", "capacity", "ooms", "duration_ms"}, sorted by peak reserved,
// at most max_process_rows rows ("more": how many more and their range). Its memory over time
// stays in the stacked chart of its device (processes.timelines); its marks are not in the page.
// A trace none of whose devices is drawn is not in "traces". "devices_left_out" gives the counts
// the page's note states: "count" devices without detail of "of", "drawn", "rows", and
// "marks_left_out".
nlohmann::json device_detail_json(const TraceModel& m, const DeviceModel& d, const std::vector<OomCase>& cases,
                                  const std::vector<DeviceSites>& sites, PageStacks& stacks, const ReportOptions& o) {
  const i64 t0 = d.first_time_ns;
  nlohmann::json dj = nlohmann::json::object();
  const DeviceSites* ds = nullptr;
  for (const auto& x : sites)
    if (x.device == d.device) ds = &x;
  if (d.at_peak.captured) dj["peak"] = state_json(d.at_peak, t0, o, stacks);
  if (ds && d.at_peak.captured && !ds->at_peak.empty()) dj["peak"]["sites"] = page_sites_json(ds->at_peak, stacks);
  nlohmann::json ooms = nlohmann::json::array();
  for (const auto& c : cases) {
    if (c.device != d.device) continue;
    nlohmann::json oj;
    oj["last_state"] = c.last_state;
    if (c.without_entry) {
      // Known without an entry (Note [one OOM per failed request]): no moment, no state.
      oj["without_entry"] = c.without_entry->source;
      if (c.without_entry->recorded && !c.without_entry->recorded->message.empty())
        oj["message"] = c.without_entry->recorded->message;
    }
    oj["diagnosis"] = diagnosis_code_name(c.diagnosis.code);
    oj["headline"] = c.diagnosis.headline;
    oj["reasons"] = c.diagnosis.reasons;
    oj["next_step"] = c.diagnosis.next_step;
    oj["request"] = c.figures.request ? nlohmann::json(*c.figures.request) : nlohmann::json(nullptr);
    oj["device_free"] = c.figures.device_free ? nlohmann::json(*c.figures.device_free) : nlohmann::json(nullptr);
    oj["state"] = c.state ? state_json(*c.state, t0, o, stacks) : nlohmann::json(nullptr);
    if (ds) {
      const SitesAt* cs = c.last_state ? &ds->at_end : nullptr;
      for (std::size_t i = 0; !cs && i < d.ooms.size() && i < ds->at_oom.size(); ++i)
        if (&d.ooms[i].state == c.state) cs = &ds->at_oom[i];
      if (cs && !cs->empty()) oj["sites"] = page_sites_json(*cs, stacks);
    }
    ooms.push_back(oj);
  }
  dj["ooms"] = ooms;
  dj["summary_table"] = memory_summary_table(d, false, &m.level);
  dj["end"] = {{"live_blocks", d.at_end.stats.active[kStatAll].current},
               {"live_bytes", d.at_end.stats.active_bytes[kStatAll].current},
               {"biggest", biggest_json(d.at_end.biggest, t0, stacks)}};
  if (ds && !ds->at_end.empty()) dj["end"]["sites"] = page_sites_json(ds->at_end, stacks);
  if (d.at_peak.captured) dj["peak"]["icicle"] = icicle_json(d.at_peak, m.stacks.get(), o, stacks);
  return dj;
}

// The count and the range of peak reserved bytes of the rows a table leaves out: {"count",
// "min", "median" (the middle one, the lower of two), "max"}. `peaks` is not empty.
nlohmann::json rows_left_out_json(std::vector<i64> peaks) {
  std::sort(peaks.begin(), peaks.end());
  return {{"count", peaks.size()},
          {"min", peaks.front()},
          {"median", peaks[(peaks.size() - 1) / 2]},
          {"max", peaks.back()}};
}

// The process x device view as the page holds it: columns, not one object per row, and at most
// ReportOptions::max_process_rows processes with their rows and cells (those with an OOM, then
// the highest peak reserved summed over their devices, shown in trace order), so that a job of
// thousands of ranks stays within the page's bound. "labels" and "paths" have an entry a
// process: its label (path) when it has a row here or a device in the page (`covered`: the
// stacked bands and the other devices' rows name it by index), else null:
//   {"labels": [...], "paths": [...], "rows": {"i", "own", "foreign"}, "more":
//    rows_left_out_json, "cells": {"p", "d", "a", "r"}, "devices": {"device", "label", "a", "r",
//    "n"}, "cross": [indices of rows], "cross_count", "devices_count", "imbalance", "notes"}
// where a, r are peak allocated and reserved bytes, "n" the processes on a device; "cells" are
// those of the processes with a row, "devices" those holding a process the page names. `summary
// --json` keeps the full objects (process_device_json).
nlohmann::json page_processes_json(const ProcessDeviceView& v, const std::vector<bool>& oom,
                                   const std::vector<bool>& covered, const ReportOptions& o) {
  const std::size_t n = v.processes.size();
  std::vector<i64> peak(n, 0);
  for (const auto& c : v.cells) peak[c.process] += c.peak_reserved;
  std::vector<std::size_t> by_rank(n);
  for (std::size_t i = 0; i < n; ++i) by_rank[i] = i;
  std::stable_sort(by_rank.begin(), by_rank.end(), [&](std::size_t a, std::size_t b) {
    return oom[a] != oom[b] ? static_cast<bool>(oom[a]) : peak[a] > peak[b];
  });
  const std::size_t keep = std::min(n, std::max<std::size_t>(1, o.max_process_rows));
  std::vector<bool> kept(n, false);
  std::vector<i64> more;
  for (std::size_t k = 0; k < n; ++k) {
    if (k < keep)
      kept[by_rank[k]] = true;
    else
      more.push_back(peak[by_rank[k]]);
  }
  // The processes the page names: those with a row, and those with a device in the page.
  auto named = [&](std::size_t i) { return kept[i] || covered[i]; };
  nlohmann::json labels = nlohmann::json::array(), paths = nlohmann::json::array(), cross = nlohmann::json::array();
  nlohmann::json ri = nlohmann::json::array(), rown = nlohmann::json::array(), rforeign = nlohmann::json::array();
  std::size_t cross_all = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const ProcessInfo& p = v.processes[i];
    labels.push_back(named(i) ? nlohmann::json(p.label) : nlohmann::json(nullptr));
    paths.push_back(named(i) ? nlohmann::json(p.path) : nlohmann::json(nullptr));
    cross_all += !p.foreign_devices.empty();
    if (!kept[i]) continue;
    if (!p.foreign_devices.empty()) cross.push_back(i);
    ri.push_back(i);
    rown.push_back(p.own_device ? nlohmann::json(*p.own_device) : nlohmann::json(nullptr));
    rforeign.push_back(p.foreign_devices);
  }
  // Each cell of a process with a row: its peaks, the figures the table shows.
  nlohmann::json cp = nlohmann::json::array(), cd = nlohmann::json::array(), ca = nlohmann::json::array(),
                 cr = nlohmann::json::array();
  std::set<std::int32_t> devices_named;
  for (const auto& c : v.cells) {
    if (named(c.process)) devices_named.insert(c.device);
    if (!kept[c.process]) continue;
    cp.push_back(c.process);
    cd.push_back(c.device);
    ca.push_back(c.peak_allocated);
    cr.push_back(c.peak_reserved);
  }
  nlohmann::json cells = {{"p", std::move(cp)}, {"d", std::move(cd)}, {"a", std::move(ca)}, {"r", std::move(cr)}};
  nlohmann::json dd = nlohmann::json::array(), dl = nlohmann::json::array(), da = nlohmann::json::array(),
                 dr = nlohmann::json::array(), dn = nlohmann::json::array();
  for (const auto& d : v.devices) {
    if (!devices_named.count(d.device)) continue;
    dd.push_back(d.device);
    dl.push_back(d.label);
    da.push_back(d.peak_allocated_sum);
    dr.push_back(d.peak_reserved_sum);
    dn.push_back(d.processes);
  }
  nlohmann::json j = {{"labels", std::move(labels)},
                      {"paths", std::move(paths)},
                      {"rows", {{"i", std::move(ri)}, {"own", std::move(rown)}, {"foreign", std::move(rforeign)}}},
                      {"cells", std::move(cells)},
                      {"devices",
                       {{"device", std::move(dd)},
                        {"label", std::move(dl)},
                        {"a", std::move(da)},
                        {"r", std::move(dr)},
                        {"n", std::move(dn)}}},
                      {"cross", std::move(cross)},
                      {"cross_count", cross_all},
                      {"devices_count", v.devices.size()},
                      {"notes", v.notes},
                      {"imbalance", imbalance_json(v)}};
  if (!more.empty()) j["more"] = rows_left_out_json(std::move(more));
  return j;
}

}  // namespace

ModelOptions report_model_options(const ReportOptions& options, std::size_t traces) {
  ModelOptions m;
  m.checkpoints = traces <= kMaxTracesWithCheckpoints ? options.checkpoints : 0;
  m.checkpoint_max_segments = options.max_segments_drawn;
  m.checkpoint_max_blocks = options.max_blocks_per_segment;
  m.exact_points = options.exact_points;
  // Note [the timeline in the page]: twice the buckets of other commands, in the same room.
  if (traces <= kMaxTracesWithCheckpoints) m.timeline_buckets = 2 * ModelOptions{}.timeline_buckets;
  return m;
}

std::string json_for_script(const nlohmann::json& j) {
  std::string s = j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  std::string out;
  out.reserve(s.size() + s.size() / 16);
  for (std::size_t i = 0; i < s.size(); ++i) {
    char c = s[i];
    if (c == '<') {
      out += "\\u003c";
    } else if (c == '>') {
      out += "\\u003e";
    } else if (c == '&') {
      out += "\\u0026";
    } else if (static_cast<unsigned char>(c) == 0xE2 && i + 2 < s.size() &&
               static_cast<unsigned char>(s[i + 1]) == 0x80 &&
               (static_cast<unsigned char>(s[i + 2]) == 0xA8 || static_cast<unsigned char>(s[i + 2]) == 0xA9)) {
      out += static_cast<unsigned char>(s[i + 2]) == 0xA8 ? "\\u2028" : "\\u2029";
      i += 2;
    } else {
      out.push_back(c);
    }
  }
  return out;
}

nlohmann::json report_data(const std::vector<TraceModel>& models, const ReportOptions& o) {
  nlohmann::json j;
  std::string title = o.title;
  if (title.empty()) {
    // Each distinct workload once (the ranks of a job share their command line).
    std::vector<std::string> seen;
    for (const auto& m : models) {
      std::string w = m.header.workload.empty() ? m.header.path : m.header.workload;
      if (std::find(seen.begin(), seen.end(), w) != seen.end()) continue;
      seen.push_back(w);
      title += (title.empty() ? "" : ", ") + w;
    }
    title = "vramtrace report: " + title;
    if (models.size() > 1 && seen.size() < models.size()) title += fmt::format(" ({} processes)", models.size());
  }
  j["title"] = title;
  j["generated_by"] = "vramtrace " VRAMTRACE_REPORT_VERSION " report";
  // Note [a run that did not finish]: a banner at the top of the page, one line per such trace.
  for (const auto& u : unfinished_runs_json(models)) j["unfinished"].push_back(u["message"]);
  std::size_t all_devices = 0;
  for (const auto& m : models) all_devices += m.devices.size();
  std::vector<std::vector<OomCase>> all_cases;
  std::vector<std::vector<DeviceSites>> all_sites;  // empty without stacks: the page as before
  for (const auto& m : models) {
    all_cases.push_back(oom_cases(m));
    all_sites.push_back(trace_sites(m));
  }
  // The first screen: each OOM's diagnosis and the settings' verdicts, as `vramtrace oom` gives
  // them (the replays' notes join the diagnoses shown further down too).
  if (nlohmann::json v = report_verdicts(models, all_cases, o.max_whatif_traces, o.replays); !v["traces"].empty())
    j["verdicts"] = std::move(v);
  // Note [devices in the page]: which devices are drawn, and which of those bring their detail.
  struct Rank {
    bool oom;
    i64 peak_reserved;
    std::size_t trace, device;
  };
  std::vector<Rank> order;
  for (std::size_t ti = 0; ti < models.size(); ++ti)
    for (std::size_t di = 0; di < models[ti].devices.size(); ++di) {
      const auto& d = models[ti].devices[di];
      bool oom = false;
      // An OOM, not the last state of a trace that ends abruptly (a case of its own, not a failure).
      for (const auto& c : all_cases[ti]) oom = oom || (c.device == d.device && !c.last_state);
      order.push_back({oom, d.stats.reserved_bytes[kStatAll].peak, ti, di});
    }
  std::stable_sort(order.begin(), order.end(), [](const Rank& a, const Rank& b) {
    return a.oom != b.oom ? a.oom : a.peak_reserved > b.peak_reserved;
  });
  const std::size_t sections = std::min(order.size(), std::max<std::size_t>(1, o.max_device_sections));
  std::set<std::pair<std::size_t, std::size_t>> drawn, chosen;
  {
    std::size_t spent = 0;
    for (std::size_t i = 0; i < sections; ++i) {
      const Rank& r = order[i];
      drawn.insert({r.trace, r.device});
      // Its size as the page would write it (the stack numbers of a scratch list have as many digits
      // or fewer than the page's).
      PageStacks scratch(models[r.trace].stacks.get(), o);
      const std::size_t size = device_detail_json(models[r.trace], models[r.trace].devices[r.device],
                                                  all_cases[r.trace], all_sites[r.trace], scratch, o)
                                   .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)
                                   .size() +
                               scratch.json().dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).size();
      // The first device always brings its detail, whatever its size (a page of one device as before).
      if (!chosen.empty() && spent + size > o.max_detail_bytes) continue;
      spent += size;
      chosen.insert({r.trace, r.device});
    }
  }
  // Note [the timeline in the page]: each drawn device's share of the page's buckets and exact
  // points. The floor is kMinPageBuckets up to 256 devices; beyond (max_device_sections raised),
  // each device's share of the page's buckets, down to kMinDeviceBuckets.
  const std::size_t per = std::max<std::size_t>(1, drawn.size());
  const std::size_t min_buckets = std::clamp(o.max_page_buckets / per, kMinDeviceBuckets, kMinPageBuckets);
  const std::size_t page_buckets = std::max(min_buckets, o.max_page_buckets / per);
  const std::size_t page_exact = std::min(2 * o.exact_points + 1, o.max_page_exact_points / per);
  const std::size_t page_timeline_bytes = o.max_timeline_bytes / per;
  // Marks are bounded so that the page stays small whatever the program marks: each drawn device
  // its share of the page's, every k-th in time order, names cut at kMaxMarkName bytes (a note
  // says so). OOM and retry markers are all kept (each is a case of the report).
  const std::size_t mark_share = std::clamp(o.max_page_marks / per, kMinDeviceMarks, kMaxDeviceMarks);
  constexpr std::size_t kMaxMarkName = 120;

  // Several processes: the process x device view (its labels name the rows of other devices too).
  std::optional<ProcessDeviceView> view;
  if (models.size() > 1) view = process_device_view(models);

  // Note [devices in the page]: the devices past max_device_sections, as the columns of one table.
  std::size_t rows_only = 0, marks_left_out = 0;
  // The processes the page shows a device of, as a section or a row: the stacked chart draws
  // their bands (a job's processes past both caps are counted only).
  std::vector<bool> covered(models.size(), false);
  for (const auto& [ti, di] : drawn) covered[ti] = true;
  {
    std::vector<const Rank*> rows;
    for (std::size_t i = sections; i < order.size(); ++i) rows.push_back(&order[i]);
    rows_only = rows.size();
    for (const Rank* r : rows)
      for (const auto& mk : models[r->trace].devices[r->device].markers) marks_left_out += mk.kind == "mark";
    if (!rows.empty()) {
      const std::size_t keep = std::min(rows.size(), std::max<std::size_t>(1, o.max_process_rows));
      std::vector<i64> more;
      for (std::size_t i = keep; i < rows.size(); ++i) more.push_back(rows[i]->peak_reserved);
      rows.resize(keep);
      for (const Rank* r : rows) covered[r->trace] = true;
      std::stable_sort(rows.begin(), rows.end(),
                       [](const Rank* a, const Rank* b) { return a->peak_reserved > b->peak_reserved; });
      nlohmann::json label = nlohmann::json::array(), path = nlohmann::json::array(), device = nlohmann::json::array(),
                     alloc = nlohmann::json::array(), reserved = nlohmann::json::array(),
                     capacity = nlohmann::json::array(), ooms = nlohmann::json::array(),
                     duration = nlohmann::json::array();
      for (const Rank* r : rows) {
        const TraceModel& m = models[r->trace];
        const DeviceModel& d = m.devices[r->device];
        // With several processes, the process's index (its label and path are in "processes").
        if (view)
          label.push_back(r->trace);
        else
          path.push_back(m.header.path);
        device.push_back(d.device);
        alloc.push_back(d.stats.allocated_bytes[kStatAll].peak);
        reserved.push_back(d.stats.reserved_bytes[kStatAll].peak);
        const std::uint64_t total = m.header.usable_bytes_of(d.device);
        capacity.push_back(total ? nlohmann::json(total) : nlohmann::json(nullptr));
        ooms.push_back(d.oom_count.ooms);
        duration.push_back(ms(d.last_time_ns - d.first_time_ns));
      }
      nlohmann::json od = {{"device", std::move(device)},
                           {"peak_allocated", std::move(alloc)},
                           {"peak_reserved", std::move(reserved)},
                           {"capacity", std::move(capacity)},
                           {"ooms", std::move(ooms)},
                           {"duration_ms", std::move(duration)}};
      if (view)
        od["p"] = std::move(label);
      else
        od["path"] = std::move(path);
      if (!more.empty()) od["more"] = rows_left_out_json(std::move(more));
      j["other_devices"] = std::move(od);
    }
  }
  const std::size_t left_out = all_devices - chosen.size();
  if (left_out)
    j["devices_left_out"] = {{"count", left_out},
                             {"of", all_devices},
                             {"drawn", drawn.size()},
                             {"rows", rows_only},
                             {"marks_left_out", marks_left_out},
                             {"max_detail_bytes", o.max_detail_bytes},
                             {"max_device_sections", o.max_device_sections}};

  // Each distinct workload once (a job's ranks share their command line); traces refer to it.
  nlohmann::json workloads = nlohmann::json::array();
  std::map<std::string, std::size_t> workload_index;
  nlohmann::json traces = nlohmann::json::array();
  for (std::size_t ti = 0; ti < models.size(); ++ti) {
    const auto& m = models[ti];
    bool any = false;
    for (std::size_t di = 0; di < m.devices.size(); ++di) any = any || drawn.count({ti, di});
    // A trace none of whose devices is drawn is in the rows of other devices only (a trace with
    // no device at all keeps its identity: it is no row).
    if (!any && !m.devices.empty()) continue;
    const auto& cases = all_cases[ti];
    const auto& sites = all_sites[ti];
    PageStacks stacks(m.stacks.get(), o);
    nlohmann::json t = trace_identity_json(m);
    // Only what is there: a job's ranks have no notes, no loss and few workloads.
    t.erase("workload");
    if (!m.header.workload.empty()) {
      auto [it, added] = workload_index.try_emplace(m.header.workload, workloads.size());
      if (added) workloads.push_back(m.header.workload);
      t["w"] = it->second;
    }
    if (t["notes"].empty()) t.erase("notes");
    if (!m.incomplete) t.erase("incomplete");
    if (!m.lost_events) t.erase("lost_events");
    if (m.lost_events) t["lost_warning"] = lost_events_warning(m.lost_events);
    nlohmann::json devs = nlohmann::json::array();
    std::vector<std::size_t> in_page;  // devs[k] is m.devices[in_page[k]]
    for (std::size_t di = 0; di < m.devices.size(); ++di) {
      if (!drawn.count({ti, di})) continue;
      in_page.push_back(di);
      const auto& d = m.devices[di];
      const i64 t0 = d.first_time_ns;
      nlohmann::json dj;
      dj["device"] = d.device;
      dj["peak_allocated"] = d.stats.allocated_bytes[kStatAll].peak;
      dj["peak_reserved"] = d.stats.reserved_bytes[kStatAll].peak;
      dj["duration_ms"] = ms(d.last_time_ns - t0);
      // What the process could use: a recorded cap below the device counts (the line of the
      // timeline is where the run runs out).
      if (const std::uint64_t total = m.header.usable_bytes_of(d.device))
        dj["capacity"] = total;
      else
        dj["capacity"] = nullptr;
      dj["oom_count"] = oom_count_text(d.oom_count);
      dj["tl"] = timeline_json(d, t0, page_buckets, page_exact, page_timeline_bytes, min_buckets);
      std::size_t n_marks = 0;
      for (const auto& mk : d.markers) n_marks += mk.kind == "mark";
      const std::size_t every = n_marks > mark_share ? (n_marks + mark_share - 1) / mark_share : 1;
      nlohmann::json markers = nlohmann::json::array();
      std::size_t mark_index = 0, marks_shown = 0;
      for (const auto& mk : d.markers) {
        nlohmann::json m = {{"t", ms(mk.time_ns - t0)}, {"kind", mk.kind}, {"value", mk.value}};
        if (mk.kind == "mark") {
          if (mark_index++ % every != 0) continue;
          ++marks_shown;
          if (!mk.name.empty()) m["name"] = mk.name.substr(0, kMaxMarkName);
        }
        markers.push_back(std::move(m));
      }
      dj["markers"] = markers;
      if (chosen.count({ti, di})) {
        nlohmann::json detail = device_detail_json(m, d, cases, sites, stacks, o);
        for (auto& [k, v] : detail.items()) dj[k] = std::move(v);
      } else {
        // Note [devices in the page]: its figures only.
        dj["detail"] = false;
        dj["ooms"] = nlohmann::json::array();
      }
      nlohmann::json notes = d.notes;
      if (every > 1)
        notes.push_back(fmt::format("{} marks; one in {} is drawn ({} in all) to keep the page small", n_marks, every,
                                    marks_shown));
      if (!notes.empty()) dj["notes"] = std::move(notes);
      devs.push_back(dj);
    }
    // After every other state, so that their stacks come first in the page's list.
    for (std::size_t k = 0; k < in_page.size(); ++k)
      if (chosen.count({ti, in_page[k]}))
        checkpoints_json(m.devices[in_page[k]], devs[k],
                         o.max_checkpoint_bytes / std::max<std::size_t>(1, chosen.size()), o, stacks);
    t["devices"] = devs;
    // A trace without stacks, or none that its drawn devices name, has no "stacks".
    if (nlohmann::json sj = stacks.json();
        !sj.is_null() && (!sj["list"].empty() || !sj["frames"].empty() || sj["stacks_left_out"] != 0))
      t["stacks"] = std::move(sj);
    if (m.ledger) t["ledger"] = ledger_json(m);
    traces.push_back(t);
  }
  j["traces"] = traces;
  if (!workloads.empty()) j["workloads"] = std::move(workloads);
  if (view) {
    // Several processes: the process x device view and per device one stacked band per process.
    std::vector<bool> oom(models.size(), false);
    for (std::size_t ti = 0; ti < models.size(); ++ti)
      for (const auto& c : all_cases[ti]) oom[ti] = oom[ti] || !c.last_state;
    nlohmann::json pj = page_processes_json(*view, oom, covered, o);
    // The table as text repeats the table, one line a process and one column a device: over
    // kMaxProcessText bytes (many ranks) `vramtrace summary` gives it instead.
    constexpr std::size_t kMaxProcessText = 64 * 1024;
    std::string text = render_process_device_text(*view);
    if (text.size() <= kMaxProcessText) pj["text"] = std::move(text);
    // The stacked bands of all devices share o.max_process_values values (each device's time axis
    // and each band's two series): each device's axis at most the page's share, at least 4 points.
    // Only the bands of the processes the page shows a device of, and the devices that hold one.
    ProcessDeviceView shown = *view;
    std::erase_if(shown.cells, [&](const ProcessDeviceCell& c) { return !covered[c.process]; });
    std::erase_if(shown.devices, [&](const DeviceLoad& d) {
      return std::none_of(shown.cells.begin(), shown.cells.end(),
                          [&](const ProcessDeviceCell& c) { return c.device == d.device; });
    });
    const std::size_t per_point = shown.devices.size() + 2 * shown.cells.size();
    const std::size_t points =
        std::clamp<std::size_t>(o.max_process_values / std::max<std::size_t>(1, per_point), 4, 1500);
    nlohmann::json timelines = process_device_timelines_json(models, shown, points);
    // Each band refers to its process by index (processes.labels), its series "r" reserved and
    // "a" allocated each value minus the one before (the first minus 0): a job's thousands of
    // bands do not repeat their labels, and a step is shorter than the bytes it reaches.
    auto differences = [](const nlohmann::json& v) {
      std::vector<i64> out;
      i64 prev = 0;
      for (const auto& x : v) {
        out.push_back(x.get<i64>() - prev);
        prev = x.get<i64>();
      }
      return out;
    };
    for (auto& dt : timelines)
      for (auto& b : dt["bands"])
        b = {{"p", b["process"]}, {"r", differences(b["reserved"])}, {"a", differences(b["allocated"])}};
    pj["timelines"] = std::move(timelines);
    j["processes"] = std::move(pj);
  }
  return j;
}

std::string render_report_html(const std::vector<TraceModel>& models, const ReportOptions& options) {
  // The page (render/report/report.html). Placeholders: @DATA@ (escaped JSON).
  const std::string page(report_page_template());
  const std::string marker = "@DATA@";
  auto pos = page.find(marker);
  return page.substr(0, pos) + json_for_script(report_data(models, options)) + page.substr(pos + marker.size());
}

}  // namespace vramtrace
