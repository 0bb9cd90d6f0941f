// Note [block sizes from a trace]
// PyTorch's traces record the size the program asked for, not the block handed out. The block
// follows from the layout: the allocator always serves a request from the start of a free block
// (best fit) and splits off the remainder only if should_split allows it (small pool or
// expandable: remaining >= 512; large pool: rounded < max_split_size and remaining > 1 MiB).
// Replaying that split rule on the free block that starts at the alloc's address gives the exact
// block size, so allocated_bytes equals PyTorch's (the gpt2 test checks the recorded peak).
#include "model/trace_model.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <algorithm>
#include <deque>
#include "model/checkpoint_journal.h"
#include "model/forwarded_memory.h"
#include "readers/read_progress.h"
#include "vramtrace/settings.h"
#include "vramtrace/size_rules.h"

namespace vramtrace {

namespace {

using u64 = std::uint64_t;
using i64 = std::int64_t;

struct Block {
  u64 size = 0;
  u64 requested = 0;
  u64 stream = 0;
  BlockState state = BlockState::inactive;
  i64 alloc_time = 0;
  u64 alloc_event = 0;
  std::uint32_t stack = 0;  // TraceRecord::stack_id of the alloc
};

struct Segment {
  u64 size = 0;
  u64 stream = 0;
  bool small = false;
  bool expandable = false;
  std::map<u64, Block> blocks;  // by address, tiling [addr, addr+size)
  u64 free_bytes = 0;           // inactive bytes
  u64 n_free = 0;               // inactive blocks
};

void bump(StatArray& a, int pool, i64 delta) {
  for (int idx : {static_cast<int>(kStatAll), pool}) {
    if (delta >= 0)
      a[idx].increase(delta);
    else
      a[idx].decrease(-delta);
  }
}

// An allocation as the allocator counts it: one more allocation and active block of `block_bytes`
// in `pool`, `requested_bytes` asked for.
void count_alloc(DeviceStats& st, int pool, u64 block_bytes, u64 requested_bytes) {
  bump(st.allocation, pool, 1);
  bump(st.allocated_bytes, pool, static_cast<i64>(block_bytes));
  bump(st.active, pool, 1);
  bump(st.active_bytes, pool, static_cast<i64>(block_bytes));
  bump(st.requested_bytes, pool, static_cast<i64>(requested_bytes));
}

}  // namespace

// --- settings --------------------------------------------------------------------------------

LayoutRules LayoutRules::from_settings(const std::string& conf, std::vector<std::string>* notes) {
  // The settings grammar of the allocator, forgiving: a trace may carry keys or values of another
  // PyTorch version. Only the two keys the layout needs are worth a note.
  std::vector<RejectedSetting> rejected;
  const AllocatorSettings s = AllocatorSettings::parse_recorded(conf, &rejected);
  LayoutRules r;
  r.max_split_size_bytes = s.max_split_size_bytes;
  r.roundup_power2_divisions = s.roundup_power2_divisions;
  if (notes) {
    for (const auto& item : rejected)
      if (item.has_value && (item.key == "max_split_size_mb" || item.key == "roundup_power2_divisions"))
        notes->push_back(fmt::format("settings: {} value \"{}\" not understood; ignored", item.key, item.value));
  }
  return r;
}

std::uint64_t LayoutRules::round_size(std::uint64_t size) const noexcept {
  return vramtrace::round_size(size, roundup_power2_divisions);
}

// --- the builder -----------------------------------------------------------------------------

struct DeviceState {
  DeviceModel out;
  std::map<u64, Segment> segments;
  std::unordered_map<u64, Block> orphans;  // allocs in no known segment
  std::multiset<u64> free_sizes;           // inactive block sizes, for the largest free block
  PeakWatch peak;                          // when to take the state at the peak of allocated bytes
  // Note [the layout at the peak]: segments and orphans as they were at the last peak taken.
  CheckpointJournal<u64, Segment> peak_segments;
  CheckpointJournal<u64, Block> peak_orphans;
  bool peak_has_stacks = false;  // whether the peak's state keeps bytes per stack
  std::size_t peak_items = 0;    // segments and orphans at the peak, for the journal's bound
  u64 last_event = 0;            // global index of this device's last event
  // timeline
  std::vector<TimelineBucket> buckets;
  i64 bucket_ns = 0;
  // Note [the timeline's exact points around the peak]: the last events (a ring), the window
  // around the highest allocated value so far, and how many events the window still takes.
  std::deque<TimelinePoint> exact_ring, exact_window;
  i64 exact_max = -1;
  std::size_t exact_after = 0;
  i64 t0 = 0;
  bool started = false;
  // Memory of before the history (Note [a history that begins late]): blocks whose free_requested
  // came without their alloc (address -> block bytes, requested bytes), and what such memory
  // released during the pass, counted up.
  std::unordered_map<u64, std::pair<u64, u64>> pending_before;
  DeviceStats released_before;
  i64 last_before_ns = 0;
  // Frees in a segment of the trace that match no allocated block (odd_free), by what the address
  // is, and the first inside a live allocation.
  u64 odd_inside_live = 0, odd_freed_twice = 0, odd_inside_free = 0, odd_released = 0;
  std::map<u64, u64> released;  // begin -> end of device memory the trace released, merged
  std::string odd_inside_example;
  static constexpr i64 kThreadSkewNs = 1'000'000'000;  // 1 s: see the note on time in add()
  u64 times_back = 0;                                  // events earlier than an event before them
  u64 first_back_event = 0;                            // the trace's event index of the first
  i64 most_back_ns = 0;                                // the largest step back
  u64 free_events_before = 0;                          // free_requested and free_completed events among them
  // Note [one OOM per failed request]: the fate of each `oom` entry (index = position in
  // out.ooms), settled by the grouper of a vramtrace trace.
  std::vector<OomOutcome> oom_outcomes;
  // Note [checkpoints of the state]: a checkpoint after the first event of each slot of
  // checkpoint_slot_ns since the timeline's t0; the time since t0 of each kept one.
  i64 checkpoint_slot_ns = 1000;
  std::vector<i64> checkpoint_rel_ns;
};

struct TraceModelBuilder::Impl {
  TraceHeader header;
  ModelOptions opt;
  LayoutRules rules;
  std::map<std::int32_t, DeviceState> devices;
  u64 events = 0;
  bool has_segment_events = false;
  bool has_stacks = false;  // some alloc recorded a stack: states keep bytes per stack
  std::vector<std::string> notes;
  // Failed attempts of one request, grouped (vramtrace traces only: PyTorch writes one `oom`
  // entry per OutOfMemoryError; Note [one OOM per failed request]).
  bool group_failures = false;
  FailedRequestGrouper failed_requests;
  // The event's net change of inactive_split so far, per pool (split_contrib).
  struct SplitNet {
    i64 blocks = 0;
    i64 bytes = 0;
  };
  SplitNet split_net[3];

  DeviceState& dev(std::int32_t d) {
    auto it = devices.find(d);
    if (it != devices.end()) return it->second;
    auto& s = devices[d];
    s.out.device = d;
    return s;
  }

  static int pool_of(const Segment& s) { return s.small ? kStatSmall : kStatLarge; }

  // inactive_split: free blocks in segments that hold more than one block. An event takes a
  // segment's share out before it changes the segment and puts it back after; what the allocator
  // counts is the event's net change (CUDACachingAllocator's free_block sums
  // net_change_inactive_split_* and then increases or decreases once), so the shares add up here
  // and flush_split() applies the net: counting the round trip would add the segment's free bytes
  // to both the allocated and the freed totals at every event.
  void split_contrib(const Segment& s, int sign) {
    if (s.blocks.size() <= 1 || s.n_free == 0) return;
    SplitNet& n = split_net[pool_of(s)];
    n.blocks += sign * static_cast<i64>(s.n_free);
    n.bytes += sign * static_cast<i64>(s.free_bytes);
  }
  void flush_split(DeviceStats& st) {
    for (int pool : {kStatSmall, kStatLarge}) {
      SplitNet& n = split_net[pool];
      if (n.blocks != 0) bump(st.inactive_split, pool, n.blocks);
      if (n.bytes != 0) bump(st.inactive_split_bytes, pool, n.bytes);
      n = SplitNet{};
    }
  }

  void add_free(DeviceState& d, Segment& s, u64 addr, Block b) {
    b.state = BlockState::inactive;
    b.requested = 0;
    s.free_bytes += b.size;
    s.n_free += 1;
    d.free_sizes.insert(b.size);
    s.blocks[addr] = b;
  }
  void remove_free(DeviceState& d, Segment& s, std::map<u64, Block>::iterator it) {
    s.free_bytes -= it->second.size;
    s.n_free -= 1;
    auto f = d.free_sizes.find(it->second.size);
    if (f != d.free_sizes.end()) d.free_sizes.erase(f);
    s.blocks.erase(it);
  }

  Segment* segment_of(DeviceState& d, u64 addr, u64* seg_addr) {
    auto it = d.segments.upper_bound(addr);
    if (it == d.segments.begin()) return nullptr;
    --it;
    if (addr >= it->first + it->second.size) return nullptr;
    *seg_addr = it->first;
    return &it->second;
  }

  void conflict(DeviceState& d, std::string what) {
    ++d.out.layout_conflicts;
    if (d.out.layout_conflicts <= 5) d.out.notes.push_back(fmt::format("event {}: {}", events, what));
    if (d.out.layout_conflicts == 6) d.out.notes.push_back("more layout conflicts not listed");
  }

  // --- timeline ------------------------------------------------------------------------------
  void sample(DeviceState& d, i64 t) {
    const DeviceStats& st = d.out.stats;
    std::array<i64, 4> v = {st.allocated_bytes[kStatAll].current, st.active_bytes[kStatAll].current,
                            st.reserved_bytes[kStatAll].current, st.requested_bytes[kStatAll].current};
    if (!d.started) {
      d.started = true;
      d.t0 = t;
      d.bucket_ns = 1000;  // 1 us to start; doubles as needed
    }
    if (opt.exact_points) keep_exact(d, t, v);
    i64 rel = t - d.t0;
    if (rel < 0) rel = 0;  // clocks stepping back: keep order
    i64 start = (rel / d.bucket_ns) * d.bucket_ns + d.t0;
    if (d.buckets.empty() || start > d.buckets.back().t_begin_ns) {
      if (!d.buckets.empty() && start < d.buckets.back().t_begin_ns) start = d.buckets.back().t_begin_ns;
      TimelineBucket b;
      b.t_begin_ns = start;
      b.t_end_ns = t;
      b.min = b.max = b.last = v;
      // A new bucket also spans the value held since the previous one.
      if (!d.buckets.empty()) {
        const auto& prev = d.buckets.back().last;
        for (int i = 0; i < 4; ++i) {
          b.min[i] = std::min(b.min[i], prev[i]);
          b.max[i] = std::max(b.max[i], prev[i]);
        }
      }
      d.buckets.push_back(b);
      if (d.buckets.size() >= 2 * opt.timeline_buckets) coarsen(d);
    } else {
      auto& b = d.buckets.back();
      b.t_end_ns = std::max(b.t_end_ns, t);
      for (int i = 0; i < 4; ++i) {
        b.min[i] = std::min(b.min[i], v[i]);
        b.max[i] = std::max(b.max[i], v[i]);
      }
      b.last = v;
    }
  }

  // Note [the timeline's exact points around the peak].
  void keep_exact(DeviceState& d, i64 t, const std::array<i64, 4>& v) {
    const std::size_t k = opt.exact_points;
    const TimelinePoint p{t, v};
    if (v[0] > d.exact_max) {
      d.exact_max = v[0];
      if (d.exact_after == 0) d.exact_window.assign(d.exact_ring.begin(), d.exact_ring.end());
      d.exact_window.push_back(p);
      while (d.exact_window.size() > k + 1) d.exact_window.pop_front();
      d.exact_after = k;
    } else if (d.exact_after > 0) {
      d.exact_window.push_back(p);
      --d.exact_after;
    }
    d.exact_ring.push_back(p);
    if (d.exact_ring.size() > k) d.exact_ring.pop_front();
  }

  void coarsen(DeviceState& d) {
    d.bucket_ns *= 2;
    std::vector<TimelineBucket> merged;
    merged.reserve(d.buckets.size() / 2 + 1);
    for (const auto& b : d.buckets) {
      i64 start = ((b.t_begin_ns - d.t0) / d.bucket_ns) * d.bucket_ns + d.t0;
      if (!merged.empty() && merged.back().t_begin_ns == start) {
        auto& m = merged.back();
        m.t_end_ns = std::max(m.t_end_ns, b.t_end_ns);
        for (int i = 0; i < 4; ++i) {
          m.min[i] = std::min(m.min[i], b.min[i]);
          m.max[i] = std::max(m.max[i], b.max[i]);
        }
        m.last = b.last;
      } else {
        TimelineBucket m = b;
        m.t_begin_ns = start;
        merged.push_back(m);
      }
    }
    d.buckets.swap(merged);
  }

  // --- states --------------------------------------------------------------------------------
  // A layout as a state takes it: the segments by address, and the allocations in no segment.
  struct LayoutView {
    std::vector<std::pair<u64, const Segment*>> segments;  // sorted by address
    std::vector<std::pair<u64, const Block*>> orphans;
  };

  static LayoutView view_now(const DeviceState& d) {
    LayoutView v;
    v.segments.reserve(d.segments.size());
    for (const auto& [addr, seg] : d.segments) v.segments.emplace_back(addr, &seg);
    v.orphans.reserve(d.orphans.size());
    for (const auto& [addr, b] : d.orphans) v.orphans.emplace_back(addr, &b);
    return v;
  }

  // Note [the layout at the peak]
  // The state at a peak of allocated bytes is taken in two parts. Its figures (statistics, time,
  // largest free block) are copied when PeakWatch says so, as for any state. Its layout is not:
  // each new peak starts a journal of the segments and orphan blocks (CheckpointJournal), every
  // change to one of them hands its value to the journal first (before_segment_change,
  // before_orphan_change), and the layout, biggest allocations and bytes per stack at the peak
  // are built from the current layout with the journal undone, once: at the end, or earlier
  // when the journal holds more than twice as many keys as the peak had segments and orphans
  // (plus 4,096), so that its memory stays within a few copies of the peak's layout and the
  // early build is paid for by the changes that filled it. A run that sets a new peak at every
  // step copies what changed between two peaks, not its whole layout at each. The journal keeps
  // a whole segment (its blocks too) at its first change: segments are the unit that events
  // split and join.
  static LayoutView view_at_peak(const DeviceState& d) {
    LayoutView v;
    v.segments = d.peak_segments.at_checkpoint(d.segments);
    std::sort(v.segments.begin(), v.segments.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    v.orphans = d.peak_orphans.at_checkpoint(d.orphans);
    return v;
  }

  void before_segment_change(DeviceState& d, u64 addr, const Segment* current) {
    if (!d.peak_segments.active()) return;
    d.peak_segments.before_change(addr, current);
    bound_peak_journal(d);
  }
  void before_segment_change(DeviceState& d, u64 addr) {
    if (!d.peak_segments.active()) return;
    auto it = d.segments.find(addr);
    before_segment_change(d, addr, it == d.segments.end() ? nullptr : &it->second);
  }
  void before_orphan_change(DeviceState& d, u64 addr) {
    if (!d.peak_orphans.active()) return;
    auto it = d.orphans.find(addr);
    d.peak_orphans.before_change(addr, it == d.orphans.end() ? nullptr : &it->second);
    bound_peak_journal(d);
  }
  // Called with every key about to change already in the journal, so that the layout it
  // rebuilds is the peak's.
  void bound_peak_journal(DeviceState& d) {
    if (d.peak_segments.size() + d.peak_orphans.size() > 2 * d.peak_items + 4096) take_peak_layout(d);
  }
  void take_peak_layout(DeviceState& d) {
    if (!d.peak_segments.active()) return;
    capture_layout(d, d.out.at_peak, view_at_peak(d), d.peak_has_stacks);
    d.peak_segments.stop();
    d.peak_orphans.stop();
  }

  // The figures of a state: statistics, time, the largest free block.
  static void capture_figures(const DeviceState& d, StateAt& st, i64 t, u64 index) {
    st.captured = true;
    st.event_index = index;
    st.time_ns = t;
    st.stats = d.out.stats;
    st.largest_free_block = d.free_sizes.empty() ? 0 : *d.free_sizes.rbegin();
  }

  // The layout of a state, its biggest allocations and (with_stacks) its bytes per stack.
  void capture_layout(const DeviceState& d, StateAt& st, const LayoutView& view, bool with_stacks) const {
    st.layout.segments.clear();
    st.layout.segments.reserve(view.segments.size());
    std::vector<LiveAllocation> live;
    for (const auto& [addr, seg_ptr] : view.segments) {
      const Segment& seg = *seg_ptr;
      SegmentSnapshot ss;
      ss.device = d.out.device;
      ss.address = addr;
      ss.total_size = seg.size;
      ss.stream = seg.stream;
      ss.is_large = !seg.small;
      ss.is_expandable = seg.expandable;
      ss.blocks.reserve(seg.blocks.size());
      for (const auto& [baddr, b] : seg.blocks) {
        BlockSnapshot bs;
        bs.address = baddr;
        bs.size = b.size;
        bs.requested_size = b.requested;
        bs.state = b.state;
        bs.stack_id = b.stack;
        ss.blocks.push_back(bs);
        if (b.state != BlockState::inactive) {
          ss.active_size += b.size;
          ss.requested_size += b.requested;
          if (b.state == BlockState::active_allocated) ss.allocated_size += b.size;
          live.push_back({baddr, b.size, b.requested, b.stream, b.alloc_time, b.alloc_event,
                          b.state == BlockState::active_pending_free, false, b.stack});
        }
      }
      st.layout.segments.push_back(std::move(ss));
    }
    st.outside_segments_bytes = 0;
    for (const auto& [addr, b] : view.orphans) {
      live.push_back({addr, b->size, b->requested, b->stream, b->alloc_time, b->alloc_event,
                      b->state == BlockState::active_pending_free, false, b->stack});
      st.outside_segments_bytes += b->size;
    }
    st.stacks.clear();
    if (with_stacks) st.stacks = stacks_of(view);
    std::size_t n = std::min(opt.top_n, live.size());
    std::partial_sort(live.begin(), live.begin() + static_cast<std::ptrdiff_t>(n), live.end(),
                      [](const LiveAllocation& a, const LiveAllocation& b) {
                        return a.size != b.size ? a.size > b.size : a.address < b.address;
                      });
    live.resize(n);
    st.biggest = std::move(live);
  }

  // The whole state now (an OOM's, the end's).
  void capture(const DeviceState& d, StateAt& st, i64 t, u64 index) const {
    capture_figures(d, st, t, index);
    capture_layout(d, st, view_now(d), has_stacks);
  }

  // Note [checkpoints of the state] in trace_model.h: after the first event of a slot.
  void checkpoint(DeviceState& d, u64 index) {
    auto& kept = d.out.checkpoints;
    auto& rel = d.checkpoint_rel_ns;
    const i64 now = std::max<i64>(0, d.out.last_time_ns - d.t0);
    auto same_slot = [&](i64 a, i64 b) { return a / d.checkpoint_slot_ns == b / d.checkpoint_slot_ns; };
    if (!rel.empty() && same_slot(rel.back(), now)) return;
    while (kept.size() >= 2 * opt.checkpoints) {
      // Wider slots: each keeps its first checkpoint.
      d.checkpoint_slot_ns *= 2;
      std::size_t w = 0;
      for (std::size_t i = 0; i < kept.size(); ++i)
        if (w == 0 || !same_slot(rel[w - 1], rel[i])) {
          if (w != i) {
            kept[w] = std::move(kept[i]);
            rel[w] = rel[i];
          }
          ++w;
        }
      kept.resize(w);
      rel.resize(w);
      if (same_slot(rel.back(), now)) return;
    }
    // The layout now, without stacks (the page shows a checkpoint's biggest allocations only).
    StateAt st;
    capture_figures(d, st, d.out.last_time_ns, index);
    capture_layout(d, st, view_now(d), false);
    auto& segs = st.layout.segments;
    if (segs.size() > opt.checkpoint_max_segments) {
      const auto keep = static_cast<std::ptrdiff_t>(opt.checkpoint_max_segments);
      std::partial_sort(segs.begin(), segs.begin() + keep, segs.end(),
                        [](const auto& a, const auto& b) { return a.total_size > b.total_size; });
      st.segments_left_out = segs.size() - opt.checkpoint_max_segments;
      segs.resize(opt.checkpoint_max_segments);
      std::sort(segs.begin(), segs.end(), [](const auto& a, const auto& b) { return a.address < b.address; });
    }
    for (auto& g : segs)
      if (g.blocks.size() > opt.checkpoint_max_blocks + 1) g.blocks.resize(opt.checkpoint_max_blocks + 1);
    // The capture gathers every live allocation to pick the biggest: keep the top_n, not the room.
    st.biggest.shrink_to_fit();
    // Its share of checkpoint_max_bytes: over it, the largest segments that fit, in address order.
    const std::size_t share = opt.checkpoint_max_bytes / (2 * opt.checkpoints);
    if (state_bytes(st) > share) {
      std::vector<std::size_t> order(segs.size());
      for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
      std::stable_sort(order.begin(), order.end(),
                       [&](std::size_t a, std::size_t b) { return segs[a].total_size > segs[b].total_size; });
      std::size_t used = state_bytes(st);
      for (const auto& g : segs) used -= sizeof(SegmentSnapshot) + g.blocks.capacity() * sizeof(BlockSnapshot);
      std::vector<char> keep(segs.size(), 0);
      std::size_t left_out = 0;
      for (std::size_t i : order) {
        const std::size_t cost = sizeof(SegmentSnapshot) + segs[i].blocks.size() * sizeof(BlockSnapshot);
        if (used + cost <= share) {
          keep[i] = 1;
          used += cost;
        } else {
          ++left_out;
        }
      }
      std::vector<SegmentSnapshot> kept_segs;
      kept_segs.reserve(segs.size() - left_out);
      for (std::size_t i = 0; i < segs.size(); ++i)
        if (keep[i]) {
          kept_segs.push_back(std::move(segs[i]));
          kept_segs.back().blocks.shrink_to_fit();
        }
      segs = std::move(kept_segs);
      st.segments_left_out += left_out;
    }
    kept.push_back(std::move(st));
    rel.push_back(now);
  }

  // Allocated bytes per stack, by stack id: what a sites table reads at a peak or an OOM.
  static std::vector<StackBytes> stacks_of(const LayoutView& view) {
    std::unordered_map<std::uint32_t, StackBytes> by;
    auto add_block = [&](const Block& b) {
      if (b.state != BlockState::active_allocated) return;
      auto& e = by[b.stack];
      e.stack = b.stack;
      e.bytes += b.size;
      e.blocks += 1;
    };
    for (const auto& [addr, seg] : view.segments)
      for (const auto& [baddr, b] : seg->blocks) add_block(b);
    for (const auto& [addr, b] : view.orphans) add_block(*b);
    std::vector<StackBytes> out;
    out.reserve(by.size());
    for (const auto& [id, e] : by) out.push_back(e);
    std::sort(out.begin(), out.end(), [](const StackBytes& a, const StackBytes& b) { return a.stack < b.stack; });
    return out;
  }

  // Is a block allocated at `addr` at the end of the history?
  bool allocated_at(std::int32_t device, u64 addr) {
    auto it = devices.find(device);
    if (it == devices.end()) return false;
    DeviceState& d = it->second;
    if (auto o = d.orphans.find(addr); o != d.orphans.end()) return true;
    u64 seg_addr = 0;
    Segment* s = segment_of(d, addr, &seg_addr);
    if (!s) return false;
    auto b = s->blocks.find(addr);
    return b != s->blocks.end() && b->second.state != BlockState::inactive;
  }

  // TraceModel::recorded_end_stacks from the end state a reader recorded.
  void recorded_end_stacks(const Snapshot& end, TraceModel& m) {
    std::map<std::int32_t, std::map<std::uint32_t, StackBytes>> by;
    for (const auto& seg : end.segments)
      for (const auto& b : seg.blocks) {
        if (b.stack_id == 0 || b.state != BlockState::active_allocated || allocated_at(seg.device, b.address)) continue;
        auto& e = by[seg.device][b.stack_id];
        e.stack = b.stack_id;
        e.bytes += b.size;
        e.blocks += 1;
      }
    for (auto& [dev, stacks] : by) {
      std::vector<StackBytes> v;
      for (auto& [id, e] : stacks) v.push_back(e);
      m.recorded_end_stacks.emplace_back(dev, std::move(v));
    }
  }

  // Takes the pending peak state before an event that is not a further increase (Note [state at
  // the peak] in vramtrace/stats.h): its figures now, its layout through the journal (Note [the
  // layout at the peak]).
  void settle_peak(DeviceState& d) {
    if (!d.peak.take()) return;
    // The event that made the peak (events of other devices may have come since; this device's
    // state has not changed since it).
    capture_figures(d, d.out.at_peak, d.out.last_time_ns, d.peak.event());
    d.peak_has_stacks = has_stacks;
    d.peak_items = d.segments.size() + d.orphans.size();
    d.peak_segments.start();
    d.peak_orphans.start();
  }

  void note_peak(DeviceState& d) { d.peak.after_increase(d.out.stats.allocated_bytes[kStatAll], events); }

  // --- events --------------------------------------------------------------------------------
  // The rules of model/forwarded_memory.h, which the exports ask too.
  static bool lays_out_as_segment(const TraceRecord& r) { return vramtrace::lays_out_as_segment(r); }
  static bool forwarded(const TraceRecord& r) { return is_forwarded(r); }

  // Whether the segment at `addr` is the one allocated block of a forwarded allocation.
  bool holds_forwarded_block(DeviceState& d, u64 addr) {
    u64 seg_addr = 0;
    Segment* s = segment_of(d, addr, &seg_addr);
    return s && seg_addr == addr && s->blocks.size() == 1 &&
           s->blocks.begin()->second.state == BlockState::active_allocated;
  }

  void on_segment_alloc(DeviceState& d, const TraceRecord& r, bool mapped_range) {
    has_segment_events = true;
    if (r.size == 0) return;
    if (mapped_range) {
      // segment_map: extend the expandable segment of the same stream that ends at addr, else
      // start one. Only a mapped range extends: a plain segment (e.g. the exact-size allocation
      // the shim forwards after an OOM, Note [no spurious OOM]) can end right where a mapping starts.
      u64 seg_addr = 0;
      Segment* prev = r.addr > 0 ? segment_of(d, r.addr - 1, &seg_addr) : nullptr;
      if (prev && prev->expandable && prev->stream == r.stream && seg_addr + prev->size == r.addr) {
        before_segment_change(d, seg_addr, prev);
        split_contrib(*prev, -1);
        prev->size += r.size;
        prev->expandable = true;
        Block b;
        b.size = r.size;
        b.stream = prev->stream;
        // merge with a free last block
        auto last = std::prev(prev->blocks.end());
        if (last->second.state == BlockState::inactive) {
          b.size += last->second.size;
          u64 a = last->first;
          remove_free(d, *prev, last);
          add_free(d, *prev, a, b);
        } else {
          add_free(d, *prev, r.addr, b);
        }
        split_contrib(*prev, +1);
        bump(d.out.stats.reserved_bytes, pool_of(*prev), static_cast<i64>(r.size));
        ++d.out.stats.num_device_alloc;
        join_next(d, seg_addr);
        return;
      }
    }
    u64 existing = 0;
    if (segment_of(d, r.addr, &existing) || segment_of(d, r.addr + r.size - 1, &existing)) {
      conflict(d, fmt::format("segment at 0x{:x} overlaps a live segment; the old one is dropped", r.addr));
      drop_segment(d, existing);
    }
    before_segment_change(d, r.addr);
    Segment s;
    s.size = r.size;
    s.stream = r.stream;
    s.small = !mapped_range && r.size == kSmallBuffer;
    s.expandable = mapped_range;
    Block b;
    b.size = r.size;
    b.stream = r.stream;
    auto& seg = d.segments[r.addr];
    seg = std::move(s);
    add_free(d, seg, r.addr, b);
    bump(d.out.stats.segment, pool_of(seg), 1);
    bump(d.out.stats.reserved_bytes, pool_of(seg), static_cast<i64>(r.size));
    ++d.out.stats.num_device_alloc;
    if (mapped_range) join_next(d, r.addr);
  }

  // A mapping that closes a hole in an expandable segment joins the segment record that starts
  // right after it (the inverse of the split in on_segment_free): the allocator sees one
  // contiguous mapped range again, and a block may now span the old boundary.
  void join_next(DeviceState& d, u64 seg_addr) {
    auto it = d.segments.find(seg_addr);
    if (it == d.segments.end()) return;
    Segment& s = it->second;
    auto nit = d.segments.find(seg_addr + s.size);
    if (nit == d.segments.end() || !s.expandable || !nit->second.expandable || nit->second.stream != s.stream) return;
    Segment& n = nit->second;
    before_segment_change(d, seg_addr, &s);
    before_segment_change(d, nit->first, &n);
    split_contrib(s, -1);
    split_contrib(n, -1);
    // the free block that ends at the boundary and the one that starts there become one
    auto last = std::prev(s.blocks.end());
    auto first = n.blocks.begin();
    if (last->second.state == BlockState::inactive && first->second.state == BlockState::inactive) {
      Block merged = last->second;
      merged.size += first->second.size;
      const u64 a = last->first;
      remove_free(d, s, last);
      remove_free(d, n, first);
      add_free(d, s, a, merged);
    }
    for (const auto& [a, b] : n.blocks) {
      s.blocks.emplace(a, b);
      if (b.state == BlockState::inactive) {
        s.free_bytes += b.size;
        s.n_free += 1;
      }
    }
    s.size += n.size;
    bump(d.out.stats.segment, pool_of(s), -1);
    d.segments.erase(nit);
    split_contrib(s, +1);
  }

  void drop_segment(DeviceState& d, u64 addr) {
    auto it = d.segments.find(addr);
    if (it == d.segments.end()) return;
    Segment& s = it->second;
    before_segment_change(d, addr, &s);
    split_contrib(s, -1);
    for (auto b = s.blocks.begin(); b != s.blocks.end();) {
      if (b->second.state == BlockState::inactive) {
        auto next = std::next(b);
        remove_free(d, s, b);
        b = next;
      } else {
        release_live_stats(d, s, b->second, true);
        b = s.blocks.erase(b);
      }
    }
    bump(d.out.stats.segment, pool_of(s), -1);
    bump(d.out.stats.reserved_bytes, pool_of(s), -static_cast<i64>(s.size));
    ++d.out.stats.num_device_free;
    d.segments.erase(it);
  }

  void release_live_stats(DeviceState& d, const Segment& s, const Block& b, bool both) {
    int pool = pool_of(s);
    if (b.state == BlockState::active_allocated) {
      bump(d.out.stats.allocation, pool, -1);
      bump(d.out.stats.allocated_bytes, pool, -static_cast<i64>(b.size));
    }
    if (both) {
      bump(d.out.stats.active, pool, -1);
      bump(d.out.stats.active_bytes, pool, -static_cast<i64>(b.size));
      bump(d.out.stats.requested_bytes, pool, -static_cast<i64>(b.requested));
    }
  }

  void on_segment_free(DeviceState& d, const TraceRecord& r, bool unmap) {
    has_segment_events = true;
    u64 seg_addr = 0;
    Segment* s = segment_of(d, r.addr, &seg_addr);
    released(d, r.addr, r.size);
    if (!s) {
      // A segment the history never created: it was reserved before the first event.
      const int pool = !unmap && r.size == kSmallBuffer ? kStatSmall : kStatLarge;
      if (!unmap) {
        bump(d.out.stats.segment, pool, -1);
        bump(d.released_before.segment, pool, 1);
      }
      bump(d.out.stats.reserved_bytes, pool, -static_cast<i64>(r.size));
      bump(d.released_before.reserved_bytes, pool, static_cast<i64>(r.size));
      ++d.out.stats.num_device_free;
      ++d.out.segment_frees_before_history;
      d.last_before_ns = std::max(d.last_before_ns, r.time_ns);
      return;
    }
    if (!unmap || (r.addr == seg_addr && r.size >= s->size)) {
      if (s->blocks.size() != 1 || s->blocks.begin()->second.state != BlockState::inactive)
        conflict(d, fmt::format("segment 0x{:x} released while it holds allocated blocks", seg_addr));
      drop_segment(d, seg_addr);
      return;
    }
    // segment_unmap of part of an expandable segment: cut [addr, addr+size) out of a free block.
    // The record keeps what lies before the hole; what lies after it becomes a record of its own,
    // and a record whose head was unmapped starts after the hole (join_next puts them together
    // again when the hole is mapped).
    auto it = s->blocks.upper_bound(r.addr);
    if (it == s->blocks.begin()) return;
    --it;
    const u64 baddr = it->first;
    const Block b = it->second;
    const u64 end = r.addr + r.size;
    if (b.state != BlockState::inactive || end > baddr + b.size) {
      conflict(d, fmt::format("segment_unmap of 0x{:x} covers allocated memory", r.addr));
      return;
    }
    const int pool = pool_of(*s);
    const u64 seg_end = seg_addr + s->size;
    before_segment_change(d, seg_addr, s);
    if (end < seg_end) before_segment_change(d, end);
    split_contrib(*s, -1);
    remove_free(d, *s, it);
    if (r.addr > baddr) {
      Block left = b;
      left.size = r.addr - baddr;
      add_free(d, *s, baddr, left);
    }
    if (end < baddr + b.size) {
      Block right = b;
      right.size = baddr + b.size - end;
      add_free(d, *s, end, right);
    }
    if (end < seg_end) {
      Segment tail;
      tail.stream = s->stream;
      tail.small = s->small;
      tail.expandable = true;
      tail.size = seg_end - end;
      for (auto b2 = s->blocks.lower_bound(end); b2 != s->blocks.end();) {
        if (b2->second.state == BlockState::inactive) {
          s->free_bytes -= b2->second.size;
          s->n_free -= 1;
          tail.free_bytes += b2->second.size;
          tail.n_free += 1;
        }
        tail.blocks.insert(*b2);
        b2 = s->blocks.erase(b2);
      }
      auto& ts = d.segments[end];
      ts = std::move(tail);
      split_contrib(ts, +1);
      bump(d.out.stats.segment, pool, 1);
    }
    if (r.addr > seg_addr) {
      s->size = r.addr - seg_addr;
      split_contrib(*s, +1);
    } else {
      // Nothing is left before the hole (r.addr == baddr == seg_addr, so no block is).
      d.segments.erase(seg_addr);
      bump(d.out.stats.segment, pool, -1);
    }
    bump(d.out.stats.reserved_bytes, pool, -static_cast<i64>(r.size));
    ++d.out.stats.num_device_free;
  }

  void on_alloc(DeviceState& d, const TraceRecord& r) {
    d.out.request_sizes.add(r.size);
    // The block size the trace recorded (vramtrace's "b"), else the allocator's rounding.
    u64 rounded = r.block_size != 0 ? r.block_size : rules.round_size(r.size);
    u64 seg_addr = 0;
    Segment* s = segment_of(d, r.addr, &seg_addr);
    Block nb;
    nb.requested = r.size;
    nb.stream = r.stream;
    nb.state = BlockState::active_allocated;
    nb.alloc_time = r.time_ns;
    nb.alloc_event = events;
    nb.stack = r.stack_id;
    if (r.stack_id != 0) has_stacks = true;
    if (!s) {
      int pool = in_small_pool(rounded) ? kStatSmall : kStatLarge;
      nb.size = rounded;
      if (d.orphans.count(r.addr)) conflict(d, fmt::format("alloc at 0x{:x}, which is already allocated", r.addr));
      before_orphan_change(d, r.addr);
      d.orphans[r.addr] = nb;
      ++d.out.orphan_allocs;
      count_alloc(d.out.stats, pool, rounded, r.size);
      return;
    }
    auto it = s->blocks.upper_bound(r.addr);
    --it;  // the block containing addr (blocks tile the segment)
    if (it->second.state != BlockState::inactive) {
      conflict(d,
               fmt::format("alloc at 0x{:x} inside a block that is in use; counted without a layout change", r.addr));
      int pool = pool_of(*s);
      nb.size = rounded;
      before_orphan_change(d, r.addr);
      d.orphans[r.addr] = nb;
      count_alloc(d.out.stats, pool, rounded, r.size);
      return;
    }
    before_segment_change(d, seg_addr, s);
    split_contrib(*s, -1);
    u64 baddr = it->first;
    Block freeb = it->second;
    remove_free(d, *s, it);
    if (baddr < r.addr) {  // not at the block's start (not PyTorch's policy): keep the head free
      Block head = freeb;
      head.size = r.addr - baddr;
      add_free(d, *s, baddr, head);
      freeb.size -= head.size;
    }
    u64 avail = freeb.size;
    u64 size = std::min(rounded, avail);
    if (rounded > avail)
      conflict(d, fmt::format("alloc of {} B at 0x{:x} does not fit the free block of {} B", r.size, r.addr, avail));
    u64 remaining = avail - size;
    bool split = should_split(size, remaining, s->small || s->expandable, rules.max_split_size_bytes);
    if (!split) size = avail;
    nb.size = size;
    s->blocks[r.addr] = nb;
    if (split && remaining > 0) {
      Block rest;
      rest.size = remaining;
      rest.stream = freeb.stream;
      add_free(d, *s, r.addr + size, rest);
    }
    split_contrib(*s, +1);
    int pool = pool_of(*s);
    count_alloc(d.out.stats, pool, size, r.size);
    if (size >= rules.max_split_size_bytes) d.out.stats.oversize_allocations.increase(1);
  }

  void on_free_requested(DeviceState& d, const TraceRecord& r) {
    if (auto o = d.orphans.find(r.addr); o != d.orphans.end()) {
      if (o->second.state != BlockState::active_allocated) return;
      before_orphan_change(d, r.addr);
      int pool = in_small_pool(o->second.size) ? kStatSmall : kStatLarge;
      bump(d.out.stats.allocation, pool, -1);
      bump(d.out.stats.allocated_bytes, pool, -static_cast<i64>(o->second.size));
      o->second.state = BlockState::active_pending_free;
      return;
    }
    u64 seg_addr = 0;
    Segment* s = segment_of(d, r.addr, &seg_addr);
    auto it = s ? s->blocks.find(r.addr) : std::map<u64, Block>::iterator{};
    if (!s || it == s->blocks.end() || it->second.state != BlockState::active_allocated) {
      unmatched_free(d, s, r, false);
      return;
    }
    before_segment_change(d, seg_addr, s);
    release_live_stats(d, *s, it->second, false);
    if (it->second.size >= rules.max_split_size_bytes) d.out.stats.oversize_allocations.decrease(1);
    it->second.state = BlockState::active_pending_free;
  }

  // Address ranges of the device memory the trace released (segment_free, segment_unmap), merged:
  // a later free of a block in one is the trace's own oddity, not memory from before it began.
  void released(DeviceState& d, u64 addr, u64 size) {
    if (size == 0) return;
    u64 begin = addr, end = addr + size;
    auto it = d.released.upper_bound(begin);
    if (it != d.released.begin() && std::prev(it)->second >= begin) --it;
    while (it != d.released.end() && it->first <= end) {
      begin = std::min(begin, it->first);
      end = std::max(end, it->second);
      it = d.released.erase(it);
    }
    d.released.emplace(begin, end);
  }
  bool in_released(const DeviceState& d, u64 addr) const {
    auto it = d.released.upper_bound(addr);
    return it != d.released.begin() && addr < std::prev(it)->second;
  }

  // A free that matches no allocated block: in a segment of the trace (odd_free), in memory the
  // trace released (its oddity too), or of memory from before the history (free_before_history).
  void unmatched_free(DeviceState& d, const Segment* s, const TraceRecord& r, bool completed) {
    if (s) {
      odd_free(d, *s, r.addr);
      return;
    }
    ++d.out.unknown_frees;
    if (in_released(d, r.addr))
      ++d.odd_released;
    else
      free_before_history(d, r, completed);
  }

  // A free in a segment of the trace that matches no allocated block there: the trace's own
  // inconsistency, left out of the figures and said in a note by what the address is.
  void odd_free(DeviceState& d, const Segment& s, u64 addr) {
    ++d.out.unknown_frees;
    auto it = s.blocks.upper_bound(addr);
    if (it == s.blocks.begin()) {
      ++d.odd_inside_free;
      return;
    }
    --it;
    if (it->first == addr) {
      ++d.odd_freed_twice;  // the block is free, or its free was already requested
    } else if (it->second.state != BlockState::inactive) {
      if (d.odd_inside_live++ == 0)
        d.odd_inside_example =
            fmt::format("0x{:x}, {} bytes into the block at 0x{:x}", addr, addr - it->first, it->first);
    } else {
      ++d.odd_inside_free;
    }
  }

  // A free of a block in no segment of the history: allocated before the history began (Note [a
  // history that begins late]). The trace records the requested size only, so the block counts
  // at its smallest possible size (the rounding without a split remainder).
  void free_before_history(DeviceState& d, const TraceRecord& r, bool completed) {
    u64 block = r.block_size != 0 ? r.block_size : rules.round_size(r.size);
    u64 requested = r.size;
    ++d.free_events_before;
    bool allocated = true;  // still counted as allocated: no free_requested came first
    if (completed) {
      if (auto p = d.pending_before.find(r.addr); p != d.pending_before.end()) {
        std::tie(block, requested) = p->second;
        d.pending_before.erase(p);
        allocated = false;
      } else {
        ++d.out.frees_before_history;
      }
    } else {
      if (!d.pending_before.emplace(r.addr, std::pair{block, requested}).second) return;  // freed twice
      ++d.out.frees_before_history;
    }
    const int pool = in_small_pool(block) ? kStatSmall : kStatLarge;
    auto lower = [&](StatArray DeviceStats::*field, i64 amount) {
      bump(d.out.stats.*field, pool, -amount);
      bump(d.released_before.*field, pool, amount);
    };
    if (allocated) {
      lower(&DeviceStats::allocation, 1);
      lower(&DeviceStats::allocated_bytes, static_cast<i64>(block));
    }
    if (completed) {
      lower(&DeviceStats::active, 1);
      lower(&DeviceStats::active_bytes, static_cast<i64>(block));
      lower(&DeviceStats::requested_bytes, static_cast<i64>(requested));
    }
    d.last_before_ns = std::max(d.last_before_ns, r.time_ns);
  }

  void on_free_completed(DeviceState& d, const TraceRecord& r) {
    if (auto o = d.orphans.find(r.addr); o != d.orphans.end()) {
      Block b = o->second;
      int pool = in_small_pool(b.size) ? kStatSmall : kStatLarge;
      if (b.state == BlockState::active_allocated) {
        bump(d.out.stats.allocation, pool, -1);
        bump(d.out.stats.allocated_bytes, pool, -static_cast<i64>(b.size));
      }
      bump(d.out.stats.active, pool, -1);
      bump(d.out.stats.active_bytes, pool, -static_cast<i64>(b.size));
      bump(d.out.stats.requested_bytes, pool, -static_cast<i64>(b.requested));
      before_orphan_change(d, r.addr);
      d.orphans.erase(o);
      return;
    }
    u64 seg_addr = 0;
    Segment* s = segment_of(d, r.addr, &seg_addr);
    auto it = s ? s->blocks.find(r.addr) : std::map<u64, Block>::iterator{};
    if (!s || it == s->blocks.end() || it->second.state == BlockState::inactive) {
      unmatched_free(d, s, r, true);
      return;
    }
    before_segment_change(d, seg_addr, s);
    if (it->second.state == BlockState::active_allocated) {  // free_completed without free_requested
      release_live_stats(d, *s, it->second, false);
      if (it->second.size >= rules.max_split_size_bytes) d.out.stats.oversize_allocations.decrease(1);
    }
    split_contrib(*s, -1);
    int pool = pool_of(*s);
    bump(d.out.stats.active, pool, -1);
    bump(d.out.stats.active_bytes, pool, -static_cast<i64>(it->second.size));
    bump(d.out.stats.requested_bytes, pool, -static_cast<i64>(it->second.requested));
    // merge with free neighbours
    u64 addr = it->first;
    Block b = it->second;
    b.requested = 0;
    s->blocks.erase(it);
    auto next = s->blocks.lower_bound(addr);
    if (next != s->blocks.end() && next->second.state == BlockState::inactive && next->first == addr + b.size) {
      b.size += next->second.size;
      remove_free(d, *s, next);
    }
    auto nx = s->blocks.lower_bound(addr);
    if (nx != s->blocks.begin()) {
      auto prev = std::prev(nx);
      if (prev->second.state == BlockState::inactive && prev->first + prev->second.size == addr) {
        addr = prev->first;
        b.size += prev->second.size;
        remove_free(d, *s, prev);
      }
    }
    add_free(d, *s, addr, b);
    split_contrib(*s, +1);
  }

  static void note_segment_event(DeviceState& d, const TraceRecord& r) {
    if (r.memory_kind == 0) d.out.segment_events.push_back({r.action, r.addr, r.size, r.time_ns});
  }

  // Marks belong to the process, not to a device (vramtrace_mark has no device; its record says
  // 0): they are kept aside and put on every device's timeline at the end, so that a process on
  // device 1 gets its marks there and no empty device 0.
  struct ProcessMark {
    std::int64_t time_ns = 0;
    std::uint64_t value = 0;
    std::string name;
  };
  std::vector<ProcessMark> marks;

  void add(const TraceRecord& r, std::string_view mark_name) {
    if (r.action == Action::mark) {
      try {
        marks.push_back({r.time_ns, r.size, std::string(mark_name)});
      } catch (const std::bad_alloc&) {
        // a mark is worth less than the rest of the model: dropped
      }
      ++events;
      return;
    }
    DeviceState& d = dev(r.device);
    if (group_failures) failed_requests.add(r, d.out.ooms.size(), d.oom_outcomes);
    const bool raises = r.action == Action::alloc;
    if (!raises) settle_peak(d);
    if (d.out.events == 0) d.out.first_time_ns = r.time_ns;
    // A clock that stepped back (or events merged out of order): said in a note, kept in order.
    // The shim's threads stamp their events before they reach its ring, so a vramtrace trace may
    // hold events of different threads a few milliseconds out of order (seen under load): only a
    // step back of kThreadSkewNs or more is a clock's there.
    if (d.out.events > 0 && r.time_ns < d.out.last_time_ns &&
        (header.format != "vramtrace" || d.out.last_time_ns - r.time_ns >= DeviceState::kThreadSkewNs)) {
      if (d.times_back++ == 0) d.first_back_event = events;
      d.most_back_ns = std::max(d.most_back_ns, d.out.last_time_ns - r.time_ns);
    }
    d.out.last_time_ns = std::max(d.out.last_time_ns, r.time_ns);
    switch (r.action) {
      case Action::alloc:
        on_alloc(d, r);
        break;
      case Action::free_requested:
        on_free_requested(d, r);
        break;
      case Action::free_completed:
        on_free_completed(d, r);
        break;
      case Action::segment_alloc:
        if (!lays_out_as_segment(r)) break;
        note_segment_event(d, r);
        on_segment_alloc(d, r, false);
        if (forwarded(r) && r.size != 0) {
          // Note [forwarded memory is allocated]: no cache stands between the program and this
          // memory, so the whole segment is one block the program holds, not free cache.
          TraceRecord a = r;
          a.action = Action::alloc;
          a.block_size = r.size;
          on_alloc(d, a);
        }
        break;
      case Action::segment_map:
        note_segment_event(d, r);
        on_segment_alloc(d, r, true);
        break;
      case Action::segment_free:
        if (!lays_out_as_segment(r)) break;
        note_segment_event(d, r);
        if (forwarded(r) && r.size != 0 && holds_forwarded_block(d, r.addr)) {
          TraceRecord f = r;
          f.action = Action::free_requested;
          f.block_size = r.size;
          on_free_requested(d, f);
          f.action = Action::free_completed;
          on_free_completed(d, f);
        }
        on_segment_free(d, r, false);
        break;
      case Action::segment_unmap:
        note_segment_event(d, r);
        on_segment_free(d, r, true);
        break;
      case Action::oom: {
        ++d.out.stats.num_ooms;
        OomRecord o;
        o.event_index = events;
        o.time_ns = r.time_ns;
        o.request_bytes = r.size;
        o.device_free_bytes = r.device_free;
        if (r.oom_retries >= 0) o.retries = static_cast<std::uint64_t>(r.oom_retries);
        o.stack = r.stack_id;
        if (d.out.ooms.size() < opt.max_oom_states) {
          capture(d, o.state, r.time_ns, events);
        } else {
          o.state.stats = d.out.stats;
          o.state.event_index = events;
          o.state.time_ns = r.time_ns;
          o.state.largest_free_block = d.free_sizes.empty() ? 0 : *d.free_sizes.rbegin();
        }
        d.out.ooms.push_back(std::move(o));
        d.out.markers.push_back({r.time_ns, "oom", r.size, {}});
        break;
      }
      case Action::mark:  // kept aside above
      case Action::snapshot:
        break;
    }
    flush_split(d.out.stats);
    if (raises) note_peak(d);
    sample(d, r.time_ns);
    if (opt.checkpoints) checkpoint(d, events);
    d.last_event = events;
    ++d.out.events;
    ++events;
  }

  // Note [one OOM per failed request] (oom_count.h): each entry's fate, the timeline's markers of
  // retried failures, and the device's count from every source of the trace.
  void count_ooms(DeviceState& d) {
    if (group_failures) failed_requests.finish(d.out.device, d.oom_outcomes);
    d.oom_outcomes.resize(d.out.ooms.size());
    std::vector<i64> times;
    times.reserve(d.out.ooms.size());
    for (std::size_t i = 0; i < d.out.ooms.size(); ++i) {
      OomRecord& o = d.out.ooms[i];
      o.fate = d.oom_outcomes[i].fate;
      o.attempt = d.oom_outcomes[i].attempt;
      o.attempts = d.oom_outcomes[i].attempts;
      times.push_back(o.time_ns);
    }
    std::size_t i = 0;  // markers of kind "oom" are the entries, in order
    for (auto& mk : d.out.markers)
      if (mk.kind == "oom" && i < d.oom_outcomes.size() && d.oom_outcomes[i++].fate != OomFate::oom) mk.kind = "retry";
    d.out.oom_count = reconcile_oom_count(header, d.out.device, d.oom_outcomes, times);
    d.out.stats.num_ooms = static_cast<i64>(d.out.oom_count.entries);
    for (const auto& n : d.out.oom_count.notes) d.out.notes.push_back(n);
  }

  // Note [a history that begins late] in trace_model.h: the one rule for memory that existed
  // before the first event. Called once per device at the end, after at_end was captured, with the
  // trace's end state (null when the trace records none).
  void place_against_end_state(DeviceState& d, const Snapshot* end) {
    using Field = StatArray DeviceStats::*;
    static constexpr Field kPlaced[] = {&DeviceStats::allocation,      &DeviceStats::allocated_bytes,
                                        &DeviceStats::active,          &DeviceStats::active_bytes,
                                        &DeviceStats::requested_bytes, &DeviceStats::segment,
                                        &DeviceStats::reserved_bytes};
    DeviceModel& o = d.out;
    std::vector<const SegmentSnapshot*> mine;
    if (end)
      for (const auto& s : end->segments)
        if (s.device == o.device) mine.push_back(&s);
    DeviceStats e;  // the end state's figures (current only)
    for (const SegmentSnapshot* s : mine) {
      const int pool = s->is_large ? kStatLarge : kStatSmall;
      bump(e.segment, pool, 1);
      bump(e.reserved_bytes, pool, static_cast<i64>(s->total_size));
      for (const auto& b : s->blocks) {
        if (b.state == BlockState::inactive) continue;
        bump(e.active, pool, 1);
        bump(e.active_bytes, pool, static_cast<i64>(b.size));
        bump(e.requested_bytes, pool, static_cast<i64>(b.requested_size));
        if (b.state != BlockState::active_allocated) continue;
        bump(e.allocation, pool, 1);
        bump(e.allocated_bytes, pool, static_cast<i64>(b.size));
      }
    }
    bool unseen_segment = false;  // alive at the end, never created in the history
    for (const SegmentSnapshot* s : mine) unseen_segment |= d.segments.count(s->address) == 0;
    if (o.events == 0)
      o.history = DeviceModel::History::none;
    else if (o.frees_before_history || o.segment_frees_before_history || (end && (unseen_segment || o.orphan_allocs)))
      o.history = DeviceModel::History::late;
    if (o.history == DeviceModel::History::complete) {
      if (!end) return;
      // A complete history keeps its own figures; a disagreeing end state is worth saying.
      const auto& st = o.stats;
      if (e.allocated_bytes[kStatAll].current != st.allocated_bytes[kStatAll].current ||
          e.reserved_bytes[kStatAll].current != st.reserved_bytes[kStatAll].current)
        o.notes.push_back(fmt::format(
            "the end state in the snapshot's segments ({} B allocated, {} B reserved) differs from the history's "
            "end ({} B allocated, {} B reserved)",
            e.allocated_bytes[kStatAll].current, e.reserved_bytes[kStatAll].current,
            st.allocated_bytes[kStatAll].current, st.reserved_bytes[kStatAll].current));
      return;
    }
    // One constant per series and pool: what existed before the first event.
    std::array<std::array<i64, 3>, std::size(kPlaced)> add{};
    for (std::size_t f = 0; f < std::size(kPlaced); ++f)
      for (int idx = 0; idx < 3; ++idx)
        add[f][idx] = end ? (e.*kPlaced[f])[idx].current - (o.stats.*kPlaced[f])[idx].current
                          : (d.released_before.*kPlaced[f])[idx].current;
    auto place = [&](DeviceStats& st) {
      for (std::size_t f = 0; f < std::size(kPlaced); ++f)
        for (int idx = 0; idx < 3; ++idx) {
          Stat& x = (st.*kPlaced[f])[idx];
          x.current = std::max<i64>(0, x.current + add[f][idx]);
          x.peak = std::max<i64>(x.current, x.peak + add[f][idx]);
          x.base += add[f][idx];
        }
    };
    place(o.stats);
    if (o.at_peak.captured) place(o.at_peak.stats);
    place(o.at_end.stats);
    for (auto& oom : o.ooms) place(oom.state.stats);
    for (auto& c : o.checkpoints) place(c.stats);
    // Timeline series: allocated, active, reserved, requested bytes (kSeriesNames).
    const std::array<i64, 4> series_add = {add[1][kStatAll], add[3][kStatAll], add[6][kStatAll], add[4][kStatAll]};
    for (auto& b : o.timeline)
      for (int i = 0; i < 4; ++i) {
        b.min[i] = std::max<i64>(0, b.min[i] + series_add[i]);
        b.max[i] = std::max<i64>(0, b.max[i] + series_add[i]);
        b.last[i] = std::max<i64>(0, b.last[i] + series_add[i]);
      }
    for (auto& p : o.exact)
      for (int i = 0; i < 4; ++i) p.value[i] = std::max<i64>(0, p.value[i] + series_add[i]);
    // The first bucket also spans the start, where the memory of before the history was all there
    // (the series' peak may be that moment).
    if (!o.timeline.empty())
      for (int i = 0; i < 4; ++i) {
        o.timeline.front().min[i] = std::min(o.timeline.front().min[i], std::max<i64>(0, series_add[i]));
        o.timeline.front().max[i] = std::max(o.timeline.front().max[i], std::max<i64>(0, series_add[i]));
      }
    if (end) {
      // The end is what the snapshot recorded, layout included; the history gives the times of
      // the allocations it saw.
      StateAt& st = o.at_end;
      st.layout.segments.clear();
      st.largest_free_block = 0;
      std::vector<LiveAllocation> live;
      for (const SegmentSnapshot* s : mine) {
        st.layout.segments.push_back(*s);
        u64 seg_addr = 0;
        Segment* known = segment_of(d, s->address, &seg_addr);
        for (const auto& b : s->blocks) {
          if (b.state == BlockState::inactive) {
            st.largest_free_block = std::max(st.largest_free_block, b.size);
            continue;
          }
          LiveAllocation a{
              b.address, b.size,    b.requested_size, s->stream, 0, 0, b.state == BlockState::active_pending_free,
              true,      b.stack_id};
          const Block* seen = nullptr;
          if (auto it = d.orphans.find(b.address); it != d.orphans.end()) seen = &it->second;
          if (known)
            if (auto it = known->blocks.find(b.address);
                it != known->blocks.end() && it->second.state != BlockState::inactive)
              seen = &it->second;
          if (seen) {
            a.stream = seen->stream;
            a.alloc_time_ns = seen->alloc_time;
            a.alloc_event = seen->alloc_event;
            a.before_trace = false;
            if (seen->stack != 0) a.stack = seen->stack;
          }
          live.push_back(a);
        }
      }
      const std::size_t n = std::min(opt.top_n, live.size());
      std::partial_sort(live.begin(), live.begin() + static_cast<std::ptrdiff_t>(n), live.end(),
                        [](const LiveAllocation& a, const LiveAllocation& b) {
                          return a.size != b.size ? a.size > b.size : a.address < b.address;
                        });
      live.resize(n);
      st.biggest = std::move(live);
    }
    const auto bytes = [](i64 v) { return fmt::format("{} B", v); };
    if (o.history == DeviceModel::History::none) {
      o.at_end.captured = true;
      o.at_peak = o.at_end;  // the only state known
      o.notes.push_back(
          "the trace has no allocator history (a snapshot taken without _record_memory_history, or the "
          "segment list alone): every figure is the end state from its segments, and each peak is at least that");
      return;
    }
    o.lower_bound_until_ns = std::max(o.first_time_ns, d.last_before_ns);
    o.notes.push_back(fmt::format(
        "history starts late: {} frees and {} segment releases without their allocation{}; the memory "
        "alive before the first event ({} allocated, {} reserved) is counted as present from the start; "
        "figures before +{:.3f} ms and every peak are lower bounds",
        o.frees_before_history, o.segment_frees_before_history,
        end ? ", placed against the end state in the snapshot's segments" : " (the trace records no end state)",
        bytes(add[1][kStatAll]), bytes(add[6][kStatAll]),
        static_cast<double>(o.lower_bound_until_ns - o.first_time_ns) / 1e6));
  }

  TraceModel finish(bool incomplete, const Snapshot* end = nullptr) {
    // Devices that hold memory at the end but have no event (no history) exist too.
    if (end)
      for (const auto& s : end->segments) dev(s.device);
    TraceModel m;
    m.header = header;
    m.incomplete = incomplete;
    if (incomplete) m.incomplete_reason = "cut last line";  // a reader that knows more says so in finish(reader)
    m.has_segment_events = has_segment_events;
    m.events = events;
    m.notes = notes;
    // A device the recorded figures say ran out of memory exists even without an event there.
    for (const auto& o : header.recorded_ooms) dev(o.device);
    if (devices.empty() && header.format != "vramtrace")
      if (const auto* st = header.recorded_stats_of(0))
        for (const auto& [k, v] : *st)
          if (k == "num_ooms" && v > 0) dev(0);
    for (auto& [id, d] : devices) {
      if (!marks.empty()) {
        for (const auto& mk : marks) d.out.markers.push_back({mk.time_ns, "mark", mk.value, mk.name});
        std::stable_sort(d.out.markers.begin(), d.out.markers.end(),
                         [](const TimelineMarker& a, const TimelineMarker& b) { return a.time_ns < b.time_ns; });
      }
      count_ooms(d);
      settle_peak(d);
      take_peak_layout(d);
      capture(d, d.out.at_end, d.out.last_time_ns, d.last_event);
      d.out.timeline = std::move(d.buckets);
      d.out.exact.assign(d.exact_window.begin(), d.exact_window.end());
      place_against_end_state(d, end);
      const bool placed = end && d.out.history != DeviceModel::History::complete;
      if (d.out.orphan_allocs && placed)
        d.out.notes.push_back(fmt::format(
            "{} allocations at addresses in no segment of the history: counted as allocated; their segments, "
            "created before it began, are in the reserved memory of the end state",
            d.out.orphan_allocs));
      else if (d.out.orphan_allocs)
        d.out.notes.push_back(
            fmt::format("{} allocations at addresses in no segment of the trace: counted as allocated, "
                        "not reserved (the trace began after their segments were created, or has no "
                        "segment events)",
                        d.out.orphan_allocs));
      d.out.times_back = d.times_back;
      if (d.times_back)
        d.out.notes.push_back(fmt::format(
            "{} a time earlier than an event before {} (the first at event {}, at most {:.3f} ms back): counted "
            "in the order of the trace, and the timeline draws each at the latest time before it",
            d.times_back == 1 ? "1 event has" : fmt::format("{} events have", d.times_back),
            d.times_back == 1 ? "it" : "them", d.first_back_event, static_cast<double>(d.most_back_ns) / 1e6));
      // Frees of memory from before the history are in the note on a late start; the rest (a
      // block of a known segment that is not allocated) are the trace's own oddities.
      if (const u64 odd = d.out.unknown_frees - d.free_events_before; odd) {
        std::vector<std::string> what;
        if (d.odd_inside_live)
          what.push_back(fmt::format("{} at an address inside a live allocation (the first at {})", d.odd_inside_live,
                                     d.odd_inside_example));
        if (d.odd_freed_twice)
          what.push_back(
              fmt::format("{} of a block not allocated then (already freed, or never allocated)", d.odd_freed_twice));
        if (d.odd_released)
          what.push_back(fmt::format("{} in memory the trace had released (its segment freed)", d.odd_released));
        if (d.odd_inside_free)
          what.push_back(fmt::format("{} at an address inside free memory of a segment", d.odd_inside_free));
        d.out.notes.push_back(
            fmt::format("{} no allocated block of the segments the trace created, and {} left out of the figures: {}",
                        odd == 1 ? "1 free event matches" : fmt::format("{} free events match", odd),
                        odd == 1 ? "is" : "are", fmt::join(what, "; ")));
      }
      if (d.out.ooms.size() > opt.max_oom_states)
        d.out.notes.push_back(
            fmt::format("{} OOMs; the layout is kept for the first {}", d.out.ooms.size(), opt.max_oom_states));
      d.out.stats.max_split_size =
          rules.max_split_size_bytes == UINT64_MAX ? -1 : static_cast<i64>(rules.max_split_size_bytes);
      m.devices.push_back(std::move(d.out));
    }
    if (!has_segment_events && events > 0)
      m.notes.push_back(
          "the trace has no segment events: reserved memory is unknown (replay it to simulate the allocator)");
    return m;
  }
};

TraceModelBuilder::TraceModelBuilder(TraceHeader header, ModelOptions options) : impl_(std::make_unique<Impl>()) {
  impl_->header = std::move(header);
  impl_->opt = options;
  if (impl_->opt.timeline_buckets < 16) impl_->opt.timeline_buckets = 16;
  impl_->rules =
      LayoutRules::from_settings(options.settings ? *options.settings : impl_->header.settings, &impl_->notes);
  impl_->group_failures = impl_->header.format == "vramtrace";
}
TraceModelBuilder::~TraceModelBuilder() = default;
void TraceModelBuilder::add(const TraceRecord& r, std::string_view mark_name) { impl_->add(r, mark_name); }
TraceModel TraceModelBuilder::finish(bool incomplete) {
  TraceModel m = impl_->finish(incomplete);
  m.level = allocation_level(m);
  return m;
}
TraceModel TraceModelBuilder::finish(const TraceReader& reader) {
  impl_->header.recorded_stats = reader.header().recorded_stats;
  impl_->header.recorded_device_stats = reader.header().recorded_device_stats;
  impl_->header.device_totals = reader.header().device_totals;  // `device` records come later
  // The OOMs and the cap the reader found (a header, a sidecar), as it knows them at the end.
  impl_->header.recorded_ooms = reader.header().recorded_ooms;
  impl_->header.caps = reader.header().caps;
  TraceModel m = impl_->finish(reader.incomplete(), reader.final_state());
  if (m.incomplete) m.incomplete_reason = reader.incomplete_reason();
  for (std::string& n : reader.notes()) m.notes.push_back(std::move(n));
  // The reader's word on the files that come with the trace (a sidecar it could not use).
  m.notes.insert(m.notes.end(), reader.header().notes.begin(), reader.header().notes.end());
  if (auto stacks = reader.stacks(); stacks && stacks->size() != 0) {
    m.stacks = std::move(stacks);
    if (const Snapshot* end = reader.final_state()) impl_->recorded_end_stacks(*end, m);
  }
  m.lost_events = reader.lost_events();
  if (reader.nul_bytes() != 0) {
    m.notes.push_back(
        fmt::format("{} NUL bytes where lines should be were skipped: file-system blocks that were "
                    "never written (a crash or power loss while the trace grew)",
                    reader.nul_bytes()));
  }
  m.level = allocation_level(m);
  return m;
}

void drop_detail(TraceModel& m) {
  auto drop_state = [](StateAt& s) {
    s.layout = Snapshot{};
    std::vector<LiveAllocation>().swap(s.biggest);
    std::vector<StackBytes>().swap(s.stacks);
  };
  for (auto& d : m.devices) {
    drop_state(d.at_peak);
    drop_state(d.at_end);
    for (auto& o : d.ooms) drop_state(o.state);
    std::vector<StateAt>().swap(d.checkpoints);
    std::vector<TimelineBucket>().swap(d.timeline);
    std::vector<TimelinePoint>().swap(d.exact);
    std::vector<TimelineMarker>().swap(d.markers);
    std::vector<SegmentEvent>().swap(d.segment_events);
  }
  m.stacks.reset();
  m.recorded_end_stacks.clear();
  m.recorded_end_stacks.shrink_to_fit();
}

std::size_t state_bytes(const StateAt& s) noexcept {
  std::size_t n = sizeof(StateAt) + s.layout.segments.capacity() * sizeof(SegmentSnapshot) +
                  s.biggest.capacity() * sizeof(LiveAllocation) + s.stacks.capacity() * sizeof(StackBytes);
  for (const auto& g : s.layout.segments) n += g.blocks.capacity() * sizeof(BlockSnapshot);
  return n;
}

std::string lost_events_warning(std::uint64_t lost) {
  if (lost == 0) return {};
  return fmt::format(
      "WARNING: the trace lost {} event{} (its writer dropped them, or the file lost lines): every figure may be "
      "wrong by them.",
      lost, lost == 1 ? "" : "s");
}

bool lays_out_as_segment(const TraceRecord& r) noexcept {
  for (MemoryKind k :
       {MemoryKind::allocator, MemoryKind::device, MemoryKind::managed, MemoryKind::pitched, MemoryKind::pool})
    if (is_memory_kind(r.memory_kind, k)) return true;
  return false;
}

bool is_forwarded(const TraceRecord& r) noexcept { return !is_memory_kind(r.memory_kind, MemoryKind::allocator); }

TraceModel build_trace_model(TraceReader& reader, ModelOptions options) {
  TraceModelBuilder b(reader.header(), options);
  TraceRecord r;
  while (reader.next(r)) {
    b.add(r, r.action == Action::mark ? std::string_view(reader.mark_name()) : std::string_view{});
    tick_read_progress(reader);
  }
  return b.finish(reader);
}

}  // namespace vramtrace
