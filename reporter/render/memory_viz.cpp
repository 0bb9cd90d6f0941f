#include "render/memory_viz.h"

#include <algorithm>
#include <iterator>
#include <map>
#include <unordered_set>

#include "model/forwarded_memory.h"
#include "render/pickle_writer.h"

namespace vramtrace {
namespace {

// The buffer is handed to the sink past this size, so that a long history streams.
constexpr std::size_t kFlushBytes = 1u << 20;

void flush(PickleWriter& w, const ByteSink& sink, bool force) {
  if (force || w.buffered() >= kFlushBytes) {
    const std::string bytes = w.take_bytes();
    if (!bytes.empty()) sink(bytes);
  }
}

// PyTorch's frame: {"filename", "line", "name"}. A native frame of a vramtrace trace has no file
// until a symbolizer finds one: its module is the closest thing to a file a viewer can show.
// PyTorch's own frames keep their file as recorded ("" or "??" for code without one).
void write_frames(PickleWriter& w, const std::vector<Frame>* frames) {
  w.begin_list();
  if (frames) {
    for (const Frame& f : *frames) {
      w.begin_dict();
      w.string_entry("filename", !f.filename.empty() ? f.filename : f.module);
      w.unsigned_entry("line", f.line);
      w.string_entry("name", f.name);
      w.end_dict();
    }
  }
  w.end_list();
}

void write_segments(PickleWriter& w, const std::vector<SegmentSnapshot>& segments, const StackTable* stacks) {
  w.begin_list();
  for (const SegmentSnapshot& s : segments) {
    w.begin_dict();
    w.integer_entry("device", s.device);
    w.unsigned_entry("address", s.address);
    w.unsigned_entry("total_size", s.total_size);
    w.unsigned_entry("allocated_size", s.allocated_size);
    w.unsigned_entry("active_size", s.active_size);
    w.unsigned_entry("requested_size", s.requested_size);
    w.unsigned_entry("stream", s.stream);
    w.string_entry("segment_type", s.is_large ? "large" : "small");
    w.key("segment_pool_id");
    w.begin_list();
    w.integer(0);
    w.integer(0);
    w.end_list();
    w.boolean_entry("is_expandable", s.is_expandable);
    w.key("frames");
    w.begin_list();
    w.end_list();
    w.key("blocks");
    w.begin_list();
    for (const BlockSnapshot& b : s.blocks) {
      w.begin_dict();
      w.unsigned_entry("address", b.address);
      w.unsigned_entry("size", b.size);
      w.unsigned_entry("requested_size", b.requested_size);
      w.string_entry("state", block_state_name(b.state));
      if (!b.mapped) {
        w.boolean_entry("mapped", false);
      }
      w.key("frames");
      write_frames(w, stacks && b.stack_id != 0 ? stacks->get(b.stack_id) : nullptr);
      w.end_dict();
    }
    w.end_list();
    w.end_dict();
  }
  w.end_list();
}

// One entry of device_traces, PyTorch's shape (torch/csrc/cuda/Module.cpp, _memory_snapshot): an
// oom carries "device_free" where the others carry "addr".
void write_entry(PickleWriter& w, const char* action, const TraceRecord& r, const std::vector<Frame>* frames) {
  w.begin_dict();
  w.string_entry("action", action);
  if (r.action == Action::oom) {
    w.unsigned_entry("device_free", r.device_free);
  } else {
    w.unsigned_entry("addr", r.addr);
  }
  w.unsigned_entry("size", r.size);
  w.unsigned_entry("stream", r.stream);
  w.integer_entry("time_us", r.time_ns / 1000);
  w.key("frames");
  write_frames(w, frames);
  w.end_dict();
}

// Address ranges [start, end), for "does a segment hold this address". Ranges never overlap in
// a consistent trace; removing part of one splits it (segment_unmap of an expandable segment).
class Ranges {
 public:
  void add(std::uint64_t start, std::uint64_t bytes) { by_start_[start] = std::max(by_start_[start], start + bytes); }
  void remove(std::uint64_t start, std::uint64_t bytes) {
    auto it = by_start_.upper_bound(start);
    if (it == by_start_.begin()) return;
    --it;
    const std::uint64_t s = it->first, e = it->second;
    if (start >= e) return;
    by_start_.erase(it);
    if (s < start) by_start_[s] = start;
    if (start + bytes < e) by_start_[start + bytes] = e;
  }
  bool contains(std::uint64_t addr) const {
    auto it = by_start_.upper_bound(addr);
    return it != by_start_.begin() && addr < std::prev(it)->second;
  }

 private:
  std::map<std::uint64_t, std::uint64_t> by_start_;
};

// The records of device `dev` as PyTorch's entries. Forwarded memory becomes a segment with one
// block (Note [forwarded memory is allocated] in model/trace_model.cpp), so that the history
// agrees with the end state's segments, which the viewers replay it against.
//
// A block at an address in no segment (neither one the history holds at that moment nor one of
// the end state) is left out with its frees: the segment view of pytorch.org/memory_viz draws
// each block inside its segment and stops with an error at one it cannot place. Such blocks come
// from a trace without segment events for them (the model counts them as orphan allocations).
//
// A vramtrace trace has an `oom` line for every failed device allocation, also one the program
// retried with success or failed again (Note [one OOM per failed request], model/oom_count.h);
// PyTorch's history has an `oom` entry only where the allocator raised. Only the model's OOMs
// (OomFate::oom) are kept, so that a viewer counts the OOMs the program saw.
void write_device_trace(PickleWriter& w, const TraceModel& model, std::int32_t dev,
                        const std::vector<SegmentSnapshot>& end_segments, TraceReader& events, const ByteSink& sink) {
  std::unordered_set<std::uint64_t> retried;  // event indexes of failed attempts the program retried
  if (model.header.format == "vramtrace")
    for (const DeviceModel& d : model.devices)
      if (d.device == dev)
        for (const OomRecord& o : d.ooms)
          if (o.fate != OomFate::oom) retried.insert(o.event_index);
  std::uint64_t index = 0;  // as the model counts events: every record, marks too
  Ranges at_end, live;
  for (const SegmentSnapshot& s : end_segments)
    if (s.device == dev) at_end.add(s.address, s.total_size);
  std::unordered_set<std::uint64_t> left_out;  // allocated blocks left out, until their free_completed
  auto placed = [&](std::uint64_t addr) { return live.contains(addr) || at_end.contains(addr); };
  TraceRecord r;
  for (; events.next(r); ++index) {
    if (r.device != dev) continue;
    const std::vector<Frame>* frames = r.stack_id != 0 ? events.stack(r.stack_id) : nullptr;
    switch (r.action) {
      case Action::mark:
        break;
      case Action::oom:
        if (retried.count(index) == 0) write_entry(w, "oom", r, frames);
        break;
      case Action::alloc:
        if (!placed(r.addr)) {
          left_out.insert(r.addr);
          break;
        }
        left_out.erase(r.addr);
        write_entry(w, "alloc", r, frames);
        break;
      case Action::free_requested:
      case Action::free_completed:
        if (left_out.count(r.addr) != 0 || !placed(r.addr)) {
          if (r.action == Action::free_completed) left_out.erase(r.addr);
          break;
        }
        write_entry(w, action_name(r.action), r, frames);
        break;
      case Action::segment_alloc:
        if (!lays_out_as_segment(r)) break;
        live.add(r.addr, r.size);
        write_entry(w, "segment_alloc", r, frames);
        if (is_forwarded(r) && r.size != 0) write_entry(w, "alloc", r, frames);
        break;
      case Action::segment_map:
        live.add(r.addr, r.size);
        write_entry(w, "segment_map", r, frames);
        break;
      case Action::segment_free:
        if (!lays_out_as_segment(r)) break;
        if (is_forwarded(r) && r.size != 0) {
          write_entry(w, "free_requested", r, nullptr);
          write_entry(w, "free_completed", r, nullptr);
        }
        live.remove(r.addr, r.size);
        write_entry(w, "segment_free", r, nullptr);
        break;
      case Action::segment_unmap:
        live.remove(r.addr, r.size);
        write_entry(w, "segment_unmap", r, nullptr);
        break;
      default:
        write_entry(w, action_name(r.action), r, frames);
        break;
    }
    flush(w, sink, false);
  }
}

}  // namespace

void write_memory_viz(const TraceModel& model, const Snapshot* recorded_end, const EventsOpener& open_events,
                      const ByteSink& sink) {
  std::vector<SegmentSnapshot> segments;
  if (recorded_end && !recorded_end->segments.empty()) {
    segments = recorded_end->segments;
  } else {
    for (const DeviceModel& d : model.devices)
      segments.insert(segments.end(), d.at_end.layout.segments.begin(), d.at_end.layout.segments.end());
  }
  std::stable_sort(segments.begin(), segments.end(), [](const SegmentSnapshot& a, const SegmentSnapshot& b) {
    return a.device != b.device ? a.device < b.device : a.address < b.address;
  });

  // One list per device ordinal up to the highest one seen: the viewers index it by ordinal.
  std::int32_t devices = 0;
  for (const DeviceModel& d : model.devices) devices = std::max(devices, d.device + 1);
  for (const SegmentSnapshot& s : segments) devices = std::max(devices, s.device + 1);

  PickleWriter w;
  w.begin_dict();
  w.key("segments");
  write_segments(w, segments, model.stacks.get());
  flush(w, sink, false);

  // The records come in trace order, devices interleaved, and each device's list is written
  // whole: the trace is read once per device that has events (once for most traces), so that
  // memory stays bounded whatever the history's length.
  w.key("device_traces");
  w.begin_list();
  for (std::int32_t dev = 0; dev < devices; ++dev) {
    w.begin_list();
    const bool has_events = std::any_of(model.devices.begin(), model.devices.end(),
                                        [dev](const DeviceModel& d) { return d.device == dev && d.events > 0; });
    if (has_events) write_device_trace(w, model, dev, segments, *open_events(), sink);
    w.end_list();
  }
  w.end_list();
  w.key("allocator_settings");
  w.begin_dict();
  if (!model.header.settings.empty()) {
    w.string_entry("PYTORCH_CUDA_ALLOC_CONF", model.header.settings);
  }
  w.end_dict();
  w.end_dict();
  w.finish();
  flush(w, sink, true);
}

}  // namespace vramtrace
