// The memory ledger (ledger.h): the tensor level's moments, placed on the shim's trace of the
// same process in one streaming pass. Note [the ledger adds up] in ledger.h.
#include "model/ledger.h"

#include <algorithm>
#include <cstdlib>
#include <map>
#include <set>

#include <fmt/format.h>

#include "readers/read_progress.h"
#include "vramtrace/trace/vramtrace_reader.h"
#include "vramtrace/units.h"

namespace vramtrace {

namespace {

using u64 = std::uint64_t;
using i64 = std::int64_t;

/// How far apart the two files' clocks may put one moment: both are CLOCK_REALTIME of one host
/// (the shim converts its monotonic stamps with the origin it took at start), so only NTP slewing
/// over the run separates them. A moment further outside the shim's trace is not in it.
constexpr i64 kClockSlackNs = 1'000'000'000;
/// How close in time the shim's allocation of a PyTorch segment and PyTorch's segment_alloc entry
/// for it are: the cudaMalloc between the two (PyTorch records the entry once it returned) and
/// the two clocks' difference (PyTorch's approximate clock, converted to Unix time).
constexpr i64 kSameAllocationNs = 100'000'000;

/// A live allocation of the shim's trace.
struct Live {
  u64 block = 0;  ///< bytes the shim holds for it (block bytes; the size for forwarded memory)
  u64 size = 0;   ///< bytes the program asked for
  std::uint32_t stack = 0;
  std::uint8_t kind = 0;  ///< MemoryKind for forwarded memory
  /// Allocated at the address, size and moment of one of PyTorch's segment_alloc (or
  /// segment_map) entries: PyTorch's segment, whether or not its state at a moment still has it.
  bool pytorch = false;
};

/// A mapped range of virtual memory (kind 7 cuMemMap).
struct Mapped {
  u64 size = 0;
  bool pytorch = false;  ///< as Live::pytorch, against PyTorch's segment_map entries
};

/// The shim's trace of one device, as far as the pass has read it.
struct DeviceLive {
  std::map<u64, Live> blocks;     // the shim's blocks the program holds: alloc .. free_completed
  std::map<u64, Live> forwarded;  // segment_alloc of memory that bypassed the shim's cache, by address
  std::map<u64, u64> handles;     // kind 7 segment_alloc: cuMemCreate handle -> physical bytes
  std::map<u64, Mapped> maps;     // kind 7 segment_map: mapped range start -> range (disjoint)
};

/// PyTorch's own segment entries of one device (DeviceModel::segment_events), by address.
struct PyTorchSegments {
  std::multimap<u64, std::pair<u64, i64>> allocs;  // segment_alloc: address -> (size, time)
  std::multimap<u64, std::pair<u64, i64>> maps;    // segment_map
  static bool has(const std::multimap<u64, std::pair<u64, i64>>& m, u64 addr, u64 size, i64 t) {
    auto [a, b] = m.equal_range(addr);
    for (auto it = a; it != b; ++it)
      if (it->second.first == size && std::llabs(it->second.second - t) <= kSameAllocationNs) return true;
    return false;
  }
};

bool device_kind(std::uint8_t k) { return is_memory_kind(k, MemoryKind::device); }

/// Removes [addr, addr + size) from the disjoint ranges of `maps`.
void remove_range(std::map<u64, Mapped>& maps, u64 addr, u64 size) {
  const u64 end = addr + size;
  auto it = maps.upper_bound(addr);
  if (it != maps.begin()) --it;
  while (it != maps.end() && it->first < end) {
    const u64 a = it->first, e = a + it->second.size;
    const bool pytorch = it->second.pytorch;
    if (e <= addr) {
      ++it;
      continue;
    }
    it = maps.erase(it);
    if (a < addr) maps[a] = {addr - a, pytorch};
    if (e > end) {
      maps[end] = {e - end, pytorch};
      break;
    }
  }
}

/// Bytes of [a1, a1 + s1) inside [a2, a2 + s2).
u64 overlap(u64 a1, u64 s1, u64 a2, u64 s2) {
  const u64 a = std::max(a1, a2), e = std::min(a1 + s1, a2 + s2);
  return e > a ? e - a : 0;
}

/// Bytes of [addr, addr + size) that `maps` covers.
u64 covered(const std::map<u64, Mapped>& maps, u64 addr, u64 size) {
  u64 sum = 0;
  auto it = maps.upper_bound(addr);
  if (it != maps.begin()) --it;
  for (; it != maps.end() && it->first < addr + size; ++it) sum += overlap(it->first, it->second.size, addr, size);
  return sum;
}

void apply(DeviceLive& d, const PyTorchSegments& pt, const TraceRecord& r) {
  const std::uint8_t k = r.memory_kind;
  switch (r.action) {
    case Action::alloc:
      d.blocks[r.addr] = {r.block_size ? r.block_size : r.size, r.size, r.stack_id, 0,
                          PyTorchSegments::has(pt.allocs, r.addr, r.size, r.time_ns)};
      break;
    case Action::free_completed:
      d.blocks.erase(r.addr);
      break;
    case Action::segment_alloc:
      if (is_memory_kind(k, MemoryKind::vmm))
        d.handles[r.addr] = r.size;
      else if (k != 0 && !is_memory_kind(k, MemoryKind::pinned_host))  // 0: the shim's own segment
        d.forwarded[r.addr] = {r.size, r.size, r.stack_id, k,
                               device_kind(k) && PyTorchSegments::has(pt.allocs, r.addr, r.size, r.time_ns)};
      break;
    case Action::segment_free:
      if (is_memory_kind(k, MemoryKind::vmm))
        d.handles.erase(r.addr);
      else if (k != 0)
        d.forwarded.erase(r.addr);
      break;
    case Action::segment_map:
      if (is_memory_kind(k, MemoryKind::vmm)) {
        remove_range(d.maps, r.addr, r.size);  // a range mapped twice counts once
        d.maps[r.addr] = {r.size, PyTorchSegments::has(pt.maps, r.addr, r.size, r.time_ns)};
      }
      break;
    case Action::segment_unmap:
      if (is_memory_kind(k, MemoryKind::vmm)) remove_range(d.maps, r.addr, r.size);
      break;
    default:  // free_requested (the block stays active), oom, mark, snapshot
      break;
  }
}

std::string bytes(u64 v) { return format_bytes(static_cast<i64>(v), ByteStyle::pytorch); }

/// The device level at one moment: PyTorch's segments at that moment (`segments`, from the
/// tensor level) matched against the shim's live allocations (`d`).
void place_device_level(const DeviceLive& d, const std::vector<const SegmentSnapshot*>& segments, LedgerAt& at) {
  std::set<u64> pytorch_blocks, pytorch_forwarded;
  u64 rounding = 0, missing = 0, missing_bytes = 0, other_size = 0;
  for (const SegmentSnapshot* s : segments) {
    if (s->is_expandable) {
      const u64 c = covered(d.maps, s->address, s->total_size);
      if (c != s->total_size) {
        ++missing;
        missing_bytes += s->total_size - c;
      }
      continue;
    }
    if (auto b = d.blocks.find(s->address); b != d.blocks.end()) {
      if (b->second.size != s->total_size || b->second.block < b->second.size) {
        ++other_size;
        continue;
      }
      pytorch_blocks.insert(s->address);
      rounding += b->second.block - b->second.size;
      continue;
    }
    if (auto f = d.forwarded.find(s->address); f != d.forwarded.end() && device_kind(f->second.kind)) {
      if (f->second.size != s->total_size) {
        ++other_size;
        continue;
      }
      pytorch_forwarded.insert(s->address);
      continue;
    }
    ++missing;
    missing_bytes += s->total_size;
  }
  if (missing || other_size) {
    std::string why;
    if (missing)
      why = fmt::format("{} of PyTorch's segments ({}) are not allocated in the shim's trace", missing,
                        bytes(missing_bytes));
    if (other_size)
      why += fmt::format("{}{} of them lie where the shim's trace has an allocation of another size",
                         why.empty() ? "" : "; ", other_size);
    at.notes.push_back(why +
                       " at this moment: the two files do not describe the same moment (their clocks disagree, "
                       "or the trace is not of this process); outside PyTorch's allocator and the rest are unknown");
    return;
  }
  OutsideBytes out;
  std::map<std::uint32_t, StackBytes> by_stack;
  auto count = [&](const Live& l, u64 held) {
    auto& s = by_stack[l.stack];
    s.stack = l.stack;
    s.bytes += held;
    s.blocks += 1;
  };
  // PyTorch's segments that its state at this moment no longer (or not yet) holds, while the
  // shim's trace does: the two clocks put the release a little apart. They are PyTorch's, in no row.
  u64 in_transit = 0;
  for (const auto& [addr, b] : d.blocks) {
    if (pytorch_blocks.count(addr)) continue;
    if (b.pytorch) {
      ++in_transit;
      continue;
    }
    out.device += b.block;
    count(b, b.block);
  }
  for (const auto& [addr, f] : d.forwarded) {
    if (pytorch_forwarded.count(addr)) continue;
    if (f.pytorch) {
      ++in_transit;
      continue;
    }
    if (is_memory_kind(f.kind, MemoryKind::managed)) {
      at.managed_bytes += f.size;
      continue;
    }
    if (is_memory_kind(f.kind, MemoryKind::array)) {
      ++at.arrays;
      continue;
    }
    if (device_kind(f.kind))
      out.device += f.size;
    else if (is_memory_kind(f.kind, MemoryKind::pitched))
      out.pitched += f.size;
    else if (is_memory_kind(f.kind, MemoryKind::pool))
      out.pool += f.size;
    else
      continue;  // a kind this reader does not know: not device memory it can place
    count(f, f.size);
  }
  // The maps inside PyTorch's expandable segments of this moment, or made by PyTorch's own
  // segment_map entries, hold PyTorch's handles; the other handles are outside.
  u64 in_pytorch_maps = 0;
  for (const auto& [addr, m] : d.maps) {
    u64 mine = 0;
    for (const SegmentSnapshot* s : segments)
      if (s->is_expandable) mine += overlap(addr, m.size, s->address, s->total_size);
    if (m.pytorch && mine < m.size) {
      ++in_transit;
      mine = m.size;
    }
    in_pytorch_maps += mine;
  }
  u64 handles = 0;
  for (const auto& [h, size] : d.handles) handles += size;
  if (in_pytorch_maps > handles) {
    at.notes.push_back(fmt::format(
        "PyTorch's expandable segments map {} but the shim's trace holds only {} of cuMemCreate memory (it began "
        "after them?): outside PyTorch's allocator and the rest are unknown",
        bytes(in_pytorch_maps), bytes(handles)));
    return;
  }
  out.virtual_memory = handles - in_pytorch_maps;
  if (out.virtual_memory) {  // handles are not tied to their mappings in the trace: no stack
    auto& s = by_stack[0];
    s.bytes += out.virtual_memory;
    s.blocks += 1;
  }
  at.outside = out;
  at.rounding_bytes = rounding;
  if (in_transit)
    at.notes.push_back(fmt::format(
        "{} of PyTorch's segments are allocated in the shim's trace but not in PyTorch's state at this moment (the "
        "two files place their release or creation a little apart): they are counted in no row",
        in_transit));
  for (auto& [id, s] : by_stack) at.outside_stacks.push_back(s);
  if (at.managed_bytes)
    at.notes.push_back(
        fmt::format("{} of managed memory is live; whether its pages sit on the device is not "
                    "recorded, so it is in the rest",
                    bytes(at.managed_bytes)));
  if (at.arrays)
    at.notes.push_back(
        fmt::format("{} CUDA arrays are live; their size is not recorded, so they are in the rest", at.arrays));
}

/// A moment to place on the shim's trace: a peak or an OOM of one device (indices into
/// MemoryLedger::devices and its moments), or the end, which covers every device.
struct Probe {
  i64 time_ns = 0;
  bool end = false;
  std::size_t device = 0;
  std::size_t moment = 0;
  std::vector<const SegmentSnapshot*> segments;  ///< PyTorch's segments then
  bool layout_known = true;
};

std::string seconds(i64 ns) { return fmt::format("{:.3f} s", static_cast<double>(ns) / 1e9); }

std::vector<const SegmentSnapshot*> segments_of(const Snapshot& s, std::int32_t device) {
  std::vector<const SegmentSnapshot*> out;
  for (const auto& seg : s.segments)
    if (seg.device == device) out.push_back(&seg);
  return out;
}

void tensor_figures(LedgerAt& at, const DeviceStats& st) {
  at.allocated_bytes = st.allocated_bytes[kStatAll].current;
  at.active_bytes = st.active_bytes[kStatAll].current;
  at.requested_bytes = st.requested_bytes[kStatAll].current;
  at.reserved_bytes = st.reserved_bytes[kStatAll].current;
  at.tensor_source = "history";
}

/// Fills the tensor figures from memory_stats() when it has the four; false otherwise.
bool tensor_figures(LedgerAt& at, const FlatStatList& stats) {
  auto a = flat_stat(stats, "allocated_bytes.all.current"), c = flat_stat(stats, "active_bytes.all.current"),
       q = flat_stat(stats, "requested_bytes.all.current"), r = flat_stat(stats, "reserved_bytes.all.current");
  if (!a || !c || !q || !r || *a < 0 || *c < 0 || *q < 0 || *r < 0) return false;
  at.allocated_bytes = *a;
  at.active_bytes = *c;
  at.requested_bytes = *q;
  at.reserved_bytes = *r;
  at.tensor_source = "memory_stats";
  return true;
}

const DeviceModel* model_device(const TraceModel& m, std::int32_t d) {
  for (const auto& x : m.devices)
    if (x.device == d) return &x;
  return nullptr;
}

DeviceLedger& ledger_device(MemoryLedger& L, std::int32_t d) {
  for (auto& x : L.devices)
    if (x.device == d) return x;
  L.devices.push_back({});
  L.devices.back().device = d;
  return L.devices.back();
}

}  // namespace

std::optional<std::int64_t> LedgerAt::used_bytes() const noexcept {
  if (!total_bytes || !free_bytes) return std::nullopt;
  return static_cast<i64>(*total_bytes) - static_cast<i64>(*free_bytes);
}
std::optional<std::int64_t> LedgerAt::not_pytorch_bytes() const noexcept {
  auto u = used_bytes();
  if (!u) return std::nullopt;
  return *u - reserved_bytes;
}
std::optional<std::int64_t> LedgerAt::rest_bytes() const noexcept {
  auto n = not_pytorch_bytes();
  if (!n || !outside || !rounding_bytes) return std::nullopt;
  return *n - static_cast<i64>(outside->total()) - static_cast<i64>(*rounding_bytes);
}

const LedgerAt* DeviceLedger::at(LedgerAt::Moment kind, std::size_t oom) const noexcept {
  for (const auto& m : moments)
    if (m.moment == kind && (kind != LedgerAt::Moment::oom || m.oom == oom)) return &m;
  return nullptr;
}

const DeviceLedger* MemoryLedger::device(std::int32_t d) const noexcept {
  for (const auto& x : devices)
    if (x.device == d) return &x;
  return nullptr;
}

MemoryLedger build_memory_ledger(TraceModel& m, const TorchSidecar* sc, const std::string& device_trace) {
  MemoryLedger L;
  if (sc) L.sidecar = sc->path;

  std::unique_ptr<VramtraceTraceReader> shim;
  if (!device_trace.empty()) {
    try {
      shim = open_vramtrace_trace_details(device_trace);
    } catch (const TraceError& e) {
      L.notes.push_back(
          fmt::format("the shim's trace beside the snapshot cannot be read ({}): no device level", e.what()));
    }
    if (shim && sc && shim->details().pid != sc->pid) {
      L.notes.push_back(fmt::format("{} is of process {}, the snapshot of process {}: not its device level",
                                    device_trace, shim->details().pid, sc->pid));
      shim.reset();
    }
    if (shim) L.device_trace = device_trace;
  }

  // The devices: PyTorch's, those the sidecar names, and (after the pass) those of the shim's trace.
  for (const auto& d : m.devices) ledger_device(L, d.device);
  if (sc) {
    for (const auto& d : sc->devices) ledger_device(L, d.device);
    for (const auto& o : sc->ooms) ledger_device(L, o.device);
  }

  // The end: the sidecar's write (its free-memory reading); without one, the last moment the
  // history knows (the snapshot came after it), else the end of the shim's trace.
  i64 end_ns = 0;
  std::string end_note;
  if (sc) {
    end_ns = sc->written_at_ns;
    if (!sc->final)
      end_note = fmt::format(
          "the snapshot's last write was of an OOM or a manual one (reason \"{}\"), not the exit: the process did "
          "not finish normally",
          sc->reason);
  } else {
    for (const auto& d : m.devices) end_ns = std::max(end_ns, d.last_time_ns);
    end_note = "the snapshot's time is not recorded (no sidecar): the end is taken at the history's last event";
    if (end_ns == 0 && shim) {
      end_ns = shim->details().start_unix_ns + (shim->trailer().present ? shim->trailer().time_ns : 0);
      end_note =
          "the snapshot's time is not recorded (no sidecar, no history): the end is taken at the end of the "
          "shim's trace";
    }
  }

  // Every moment, with the tensor level's figures; the device level follows from the pass.
  for (auto& dl : L.devices) {
    const DeviceModel* dm = model_device(m, dl.device);
    const TorchSidecar::Device* sd = sc ? sc->device(dl.device) : nullptr;
    LedgerAt end;
    end.moment = LedgerAt::Moment::end;
    end.time_ns = end_ns;
    if (!end_note.empty()) end.notes.push_back(end_note);
    if (sd && tensor_figures(end, sd->memory_stats)) {
      if (sd->free_bytes) {
        end.free_bytes = sd->free_bytes;
        end.total_bytes = sd->total_bytes;
        end.free_source = "mem_get_info";
      }
      if (dm && dm->at_end.stats.reserved_bytes[kStatAll].current != end.reserved_bytes)
        end.notes.push_back(fmt::format(
            "PyTorch's reserved memory when the free memory was read ({}) is not the snapshot's ({}): the segments "
            "changed between the two, so the snapshot cannot tell which memory of the shim's trace is PyTorch's",
            bytes(static_cast<u64>(end.reserved_bytes)),
            bytes(static_cast<u64>(dm->at_end.stats.reserved_bytes[kStatAll].current))));
    } else if (dm) {
      tensor_figures(end, dm->at_end.stats);
    } else {
      end.tensor_source = "history";  // PyTorch's snapshot holds nothing on this device
    }
    dl.moments.push_back(std::move(end));
    if (dm && dm->at_peak.captured && dm->history != DeviceModel::History::none) {
      LedgerAt peak;
      peak.moment = LedgerAt::Moment::peak;
      peak.time_ns = dm->at_peak.time_ns;
      tensor_figures(peak, dm->at_peak.stats);
      if (dm->history == DeviceModel::History::late)
        peak.notes.push_back("the history starts late: the peak's figures are lower bounds");
      dl.moments.push_back(std::move(peak));
    }
    // OOMs: the history's, each with the observer's record of it when the sidecar has one (the
    // nearest in time on the device, within the clock slack and the snapshot's write), then the
    // observer's OOMs the history does not hold.
    std::vector<bool> taken(sc ? sc->ooms.size() : 0, false);
    std::size_t index = 0;
    if (dm) {
      for (const auto& o : dm->ooms) {
        LedgerAt at;
        at.moment = LedgerAt::Moment::oom;
        at.oom = index++;
        at.request_bytes = o.request_bytes;
        at.time_ns = o.time_ns;
        tensor_figures(at, o.state.stats);
        at.free_bytes = o.device_free_bytes;
        at.free_source = "oom";
        std::optional<std::size_t> best;
        for (std::size_t i = 0; i < taken.size(); ++i) {
          const auto& so = sc->ooms[i];
          if (taken[i] || so.device != dl.device) continue;
          const i64 dt = so.time_ns - o.time_ns;
          if (dt < -kClockSlackNs || dt > 10 * kClockSlackNs) continue;
          if (!best || std::llabs(dt) < std::llabs(sc->ooms[*best].time_ns - o.time_ns)) best = i;
        }
        if (best) {
          taken[*best] = true;
          at.free_bytes = sc->ooms[*best].device_free_bytes;
          if (!sd || !sd->total_bytes) {
            at.total_bytes = sc->ooms[*best].device_allocated_bytes;
            at.notes.push_back(
                "the device's total is PyTorch's OOM observer's (the device's total memory, or the cap of "
                "set_per_process_memory_fraction when one is set)");
          }
        }
        dl.moments.push_back(std::move(at));
      }
    }
    for (std::size_t i = 0; i < taken.size(); ++i) {
      const auto& so = sc->ooms[i];
      if (taken[i] || so.device != dl.device) continue;
      LedgerAt at;
      at.moment = LedgerAt::Moment::oom;
      at.oom = index++;
      at.oom_in_history = false;
      at.request_bytes = so.alloc_bytes;
      at.time_ns = so.time_ns;
      if (!tensor_figures(at, so.stats)) continue;  // nothing of PyTorch's is known of it: no ledger
      at.free_bytes = so.device_free_bytes;
      at.free_source = "oom";
      if (!sd || !sd->total_bytes) {
        at.total_bytes = so.device_allocated_bytes;
        at.notes.push_back(
            "the device's total is PyTorch's OOM observer's (the device's total memory, or the cap of "
            "set_per_process_memory_fraction when one is set)");
      }
      at.notes.push_back(
          "PyTorch's history does not hold this OOM (its ring lost it): its segments at that moment are unknown, so "
          "memory outside PyTorch's allocator cannot be told apart");
      dl.moments.push_back(std::move(at));
    }
    for (auto& at : dl.moments)
      if (!at.total_bytes && sd && sd->total_bytes) at.total_bytes = sd->total_bytes;
  }
  if (sc && sc->ooms_dropped)
    L.notes.push_back(fmt::format("the sidecar kept 1000 OOMs and dropped {} more", sc->ooms_dropped));

  // The pass over the shim's trace.
  if (shim) {
    std::vector<Probe> probes;
    for (std::size_t di = 0; di < L.devices.size(); ++di) {
      DeviceLedger& dl = L.devices[di];
      const DeviceModel* dm = model_device(m, dl.device);
      for (std::size_t mi = 0; mi < dl.moments.size(); ++mi) {
        LedgerAt& at = dl.moments[mi];
        if (at.moment == LedgerAt::Moment::end) continue;
        Probe p;
        p.time_ns = at.time_ns;
        p.device = di;
        p.moment = mi;
        const StateAt* st = nullptr;
        if (dm && at.moment == LedgerAt::Moment::peak) st = &dm->at_peak;
        if (dm && at.moment == LedgerAt::Moment::oom && at.oom_in_history) st = &dm->ooms[at.oom].state;
        if (st) p.segments = segments_of(st->layout, dl.device);
        // The model keeps the layout of the first OOMs only: without one nothing can be matched.
        p.layout_known = st && (at.reserved_bytes == 0 || !st->layout.segments.empty());
        if (st && !p.layout_known)
          at.notes.push_back(
              "the model kept no layout of PyTorch's segments for this moment: memory outside PyTorch's "
              "allocator cannot be told apart");
        probes.push_back(std::move(p));
      }
    }
    Probe end_probe;
    end_probe.time_ns = end_ns;
    end_probe.end = true;
    probes.push_back(std::move(end_probe));
    std::stable_sort(probes.begin(), probes.end(),
                     [](const Probe& a, const Probe& b) { return a.time_ns < b.time_ns; });

    // PyTorch's own segment entries, to know its segments in the shim's trace by their allocation.
    std::map<std::int32_t, PyTorchSegments> pytorch;
    for (const auto& d : m.devices)
      for (const auto& e : d.segment_events) {
        if (e.action == Action::segment_alloc) pytorch[d.device].allocs.emplace(e.addr, std::pair{e.size, e.time_ns});
        if (e.action == Action::segment_map) pytorch[d.device].maps.emplace(e.addr, std::pair{e.size, e.time_ns});
      }
    // One pass: each moment is placed on the allocations live just before the first record after it.
    std::map<std::int32_t, DeviceLive> live, end_live;
    auto settle = [&](const Probe& p) {
      if (p.end) {
        end_live = live;  // the end covers every device, some of them named only later
        return;
      }
      if (p.layout_known)
        place_device_level(live[L.devices[p.device].device], p.segments, L.devices[p.device].moments[p.moment]);
    };
    const i64 start_ns = shim->details().start_unix_ns;
    i64 first_ns = start_ns, last_ns = start_ns;
    bool any = false;
    std::size_t next = 0;
    TraceRecord r;
    while (shim->next(r)) {
      if (!any) first_ns = std::min(start_ns, r.time_ns);
      any = true;
      while (next < probes.size() && probes[next].time_ns < r.time_ns) settle(probes[next++]);
      apply(live[r.device], pytorch[r.device], r);
      last_ns = std::max(last_ns, r.time_ns);
      tick_read_progress(*shim);
    }
    for (; next < probes.size(); ++next) settle(probes[next]);

    // The end of every device, those only the shim's trace names included.
    for (const auto& [d, l] : end_live) {
      DeviceLedger& dl = ledger_device(L, d);
      if (!dl.moments.empty()) continue;
      LedgerAt at;
      at.time_ns = end_ns;
      at.tensor_source = "history";  // PyTorch's snapshot holds nothing there
      if (!end_note.empty()) at.notes.push_back(end_note);
      dl.moments.push_back(std::move(at));
    }
    for (auto& dl : L.devices) {
      const DeviceModel* dm = model_device(m, dl.device);
      LedgerAt& at = dl.moments.front();  // the end comes first
      std::vector<const SegmentSnapshot*> segs;
      if (dm) segs = segments_of(dm->at_end.layout, dl.device);
      const bool agree = !dm || dm->at_end.stats.reserved_bytes[kStatAll].current == at.reserved_bytes;
      if (agree && (at.reserved_bytes == 0 || !segs.empty())) place_device_level(end_live[dl.device], segs, at);
    }

    // A moment the trace does not cover is not in it: the two files' clocks are compared here.
    const bool complete = shim->trailer().present && !shim->incomplete();
    const i64 trace_end = complete ? start_ns + shim->trailer().time_ns : last_ns;
    for (auto& dl : L.devices)
      for (auto& at : dl.moments) {
        std::string outside_span;
        if (at.time_ns + kClockSlackNs < first_ns)
          outside_span = seconds(first_ns - at.time_ns) + " before the shim's trace begins";
        else if (complete && at.time_ns > trace_end + kClockSlackNs)
          outside_span = seconds(at.time_ns - trace_end) + " after the shim's trace ended";
        if (!outside_span.empty()) {
          at.outside.reset();
          at.rounding_bytes.reset();
          at.outside_stacks.clear();
          at.managed_bytes = at.arrays = 0;
          std::erase_if(at.notes, [](const std::string& n) { return n.find("is live;") != std::string::npos; });
          at.notes.push_back("this moment is " + outside_span +
                             ": the two files' clocks disagree, or the trace is not of this run; outside PyTorch's "
                             "allocator and the rest are unknown");
        } else if (!complete && at.time_ns > last_ns && at.outside) {
          at.notes.push_back(
              "the shim's trace ends before this moment without its trailer (the process did not finish tracing): "
              "allocations of its last flush interval (100 ms) may be missing from the outside row");
        }
      }
    if (shim->stacks() && shim->stacks()->size()) L.stacks = shim->stacks();

    // What the shim recorded of each device: its total, and the context's share (Note [the
    // context's share] in shim/src/policies/context_pool.cpp).
    for (const auto& dev : shim->details().devices) {
      DeviceLedger* dl = nullptr;
      for (auto& x : L.devices)
        if (x.device == dev.id) dl = &x;
      if (!dl) continue;
      std::optional<u64> context;
      if (dev.context_total_bytes && dev.context_free_bytes + dev.context_held_bytes <= dev.context_total_bytes)
        context = dev.context_total_bytes - dev.context_free_bytes - dev.context_held_bytes;
      for (auto& at : dl->moments) {
        if (!at.total_bytes && dev.total_bytes) at.total_bytes = dev.total_bytes;
        at.context_bytes = context;
      }
    }
    // The snapshot's own header names its process only through the sidecar, and never its rank
    // within the host or CUDA_VISIBLE_DEVICES: the merged reports' device rules need them.
    const TraceHeader& sh = shim->header();
    if (m.header.device_totals.empty()) {
      m.header.device_totals = sh.device_totals;
      m.header.device_total_bytes = sh.device_total_bytes;
    }
    if (m.header.pid == 0) m.header.pid = sh.pid;
    if (m.header.host.empty()) m.header.host = sh.host;
    if (m.header.rank.empty()) m.header.rank = sh.rank;
    if (m.header.local_rank.empty()) m.header.local_rank = sh.local_rank;
    if (!m.header.cuda_visible_devices) m.header.cuda_visible_devices = sh.cuda_visible_devices;
    for (const auto& [key, value] : shim->details().settings)
      if (key == "limit")
        L.notes.push_back("the process ran under vramtrace's memory cap (limit " + value +
                          "): the device's figures are those of the capped device the program saw");
  } else if (device_trace.empty()) {  // (a trace that was found but not used has its note above)
    L.notes.push_back(
        "no shim trace of this process beside the snapshot: memory outside PyTorch's allocator and the CUDA "
        "context are not told apart (run the program under `vramtrace run` for both levels)");
  }
  std::sort(L.devices.begin(), L.devices.end(),
            [](const DeviceLedger& a, const DeviceLedger& b) { return a.device < b.device; });
  return L;
}

}  // namespace vramtrace
