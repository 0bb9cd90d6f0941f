#include "render/perfetto_trace.h"

#include <algorithm>
#include <array>
#include <set>
#include <unordered_map>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "model/forwarded_memory.h"
#include "vramtrace/units.h"

namespace vramtrace {
namespace {

using i64 = std::int64_t;
using u64 = std::uint64_t;

constexpr std::size_t kFlushBytes = 1u << 20;

// A JSON string; bytes that are not UTF-8 become U+FFFD rather than an error.
std::string json_string(std::string_view s) {
  return nlohmann::json(std::string(s)).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

class EventWriter {
 public:
  EventWriter(const ByteSink& sink, i64 origin_ns) : sink_(sink), origin_ns_(origin_ns) {
    buf_ = "{\"displayTimeUnit\":\"ns\",\"traceEvents\":[\n";
  }
  // Microseconds with three decimals: exact nanoseconds, which a double of absolute epoch time
  // could not hold.
  std::string ts(i64 t_ns) const {
    const i64 rel = std::max<i64>(0, t_ns - origin_ns_);
    return fmt::format("{}.{:03}", rel / 1000, rel % 1000);
  }
  void event(const std::string& body) {
    if (!first_) buf_ += ",\n";
    first_ = false;
    buf_ += '{';
    buf_ += body;
    buf_ += '}';
    if (buf_.size() >= kFlushBytes) flush();
  }
  void finish() {
    buf_ += "\n]}\n";
    flush();
  }

 private:
  void flush() {
    if (!buf_.empty()) sink_(buf_);
    buf_.clear();
  }
  const ByteSink& sink_;
  i64 origin_ns_;
  std::string buf_;
  bool first_ = true;
};

std::string process_label(const TraceHeader& h, std::size_t index) {
  std::string name = h.pid != 0 ? fmt::format("pid {}", h.pid) : fmt::format("trace {}", index + 1);
  if (!h.rank.empty()) name += fmt::format(" rank {}", h.rank);
  if (!h.host.empty()) name += " on " + h.host;
  if (!h.path.empty()) name += " (" + h.path + ")";
  return name;
}

void counter(EventWriter& w, int pid, std::int32_t device, const char* series, i64 t_ns, i64 bytes) {
  w.event(fmt::format(R"("ph":"C","pid":{},"tid":{},"name":"cuda:{}","ts":{},"args":{{"{}":{}}})", pid, device + 1,
                      device, w.ts(t_ns), series, std::max<i64>(0, bytes)));
}

// The allocated and reserved series of one device (Note in perfetto_trace.h: each timeline point
// is its maximum at its start and its last value at its end; the peak is a point of its own).
void write_counters(EventWriter& w, int pid, const DeviceModel& d) {
  constexpr std::array<std::pair<int, const char*>, 2> kSeries = {{{0, "allocated"}, {2, "reserved"}}};
  const bool peak = d.at_peak.captured;
  const std::array<i64, 4> at_peak = {d.at_peak.stats.allocated_bytes[kStatAll].current, 0,
                                      d.at_peak.stats.reserved_bytes[kStatAll].current, 0};
  bool peak_written = false;
  for (const TimelineBucket& b : d.timeline) {
    const bool holds_peak =
        peak && !peak_written && d.at_peak.time_ns >= b.t_begin_ns && d.at_peak.time_ns <= b.t_end_ns;
    for (const auto& [i, name] : kSeries) {
      if (holds_peak) {
        counter(w, pid, d.device, name, d.at_peak.time_ns, at_peak[i]);
        if (b.t_end_ns > d.at_peak.time_ns) counter(w, pid, d.device, name, b.t_end_ns, b.last[i]);
        continue;
      }
      if (b.max[i] != b.last[i] && b.t_begin_ns < b.t_end_ns) counter(w, pid, d.device, name, b.t_begin_ns, b.max[i]);
      counter(w, pid, d.device, name, b.t_end_ns, b.last[i]);
    }
    peak_written = peak_written || holds_peak;
  }
  if (peak && !peak_written)
    for (const auto& [i, name] : kSeries) counter(w, pid, d.device, name, d.at_peak.time_ns, at_peak[i]);
}

std::string site_of(const std::vector<Frame>* frames) {
  if (!frames || frames->empty()) return {};
  const Frame& f = frames->front();
  std::string file(!f.filename.empty() ? f.filename : f.module);
  if (f.line != 0) return fmt::format("{}:{}:{}", file, f.line, f.name);
  return file.empty() ? std::string(f.name) : fmt::format("{}:{}", file, f.name);
}

struct OpenSlice {
  u64 id = 0;
  std::string name;
};

// The allocations of one trace as async slices, and the memory forwarded past the cache as a
// counter.
void write_allocations(EventWriter& w, int pid, const TraceModel& m, TraceReader& events, u64& next_id) {
  std::unordered_map<std::int32_t, std::unordered_map<u64, OpenSlice>> open;  // device -> address -> slice
  std::unordered_map<std::int32_t, std::unordered_map<u64, u64>> forwarded;   // device -> address -> bytes
  std::unordered_map<std::int32_t, i64> outside;
  auto end_slice = [&](std::int32_t dev, u64 addr, i64 t, bool alive) {
    auto& by_addr = open[dev];
    auto it = by_addr.find(addr);
    if (it == by_addr.end()) return;
    w.event(fmt::format(R"("ph":"e","cat":"alloc","pid":{},"tid":{},"id":{},"name":{},"ts":{}{})", pid, dev + 1,
                        it->second.id, it->second.name, w.ts(t), alive ? R"(,"args":{"alive_at_end":true})" : ""));
    by_addr.erase(it);
  };
  auto begin_slice = [&](const TraceRecord& r, u64 block, const std::vector<Frame>* frames) {
    end_slice(r.device, r.addr, r.time_ns, false);  // an address handed out twice: the trace lost a free
    OpenSlice s{++next_id, json_string(format_size(block))};
    std::string args =
        fmt::format(R"("address":"0x{:x}","size":{},"block_size":{},"stream":{})", r.addr, r.size, block, r.stream);
    if (const std::string site = site_of(frames); !site.empty()) args += ",\"site\":" + json_string(site);
    w.event(fmt::format(R"("ph":"b","cat":"alloc","pid":{},"tid":{},"id":{},"name":{},"ts":{},"args":{{{}}})", pid,
                        r.device + 1, s.id, s.name, w.ts(r.time_ns), args));
    open[r.device][r.addr] = std::move(s);
  };
  TraceRecord r;
  while (events.next(r)) {
    const std::vector<Frame>* frames = r.stack_id != 0 ? events.stack(r.stack_id) : nullptr;
    switch (r.action) {
      case Action::alloc:
        begin_slice(r, r.block_size != 0 ? r.block_size : r.size, frames);
        break;
      case Action::free_requested: {
        auto& by_addr = open[r.device];
        if (auto it = by_addr.find(r.addr); it != by_addr.end())
          w.event(fmt::format(R"("ph":"n","cat":"alloc","pid":{},"tid":{},"id":{},"name":{},"ts":{})", pid,
                              r.device + 1, it->second.id, it->second.name, w.ts(r.time_ns)));
        break;
      }
      case Action::free_completed:
        end_slice(r.device, r.addr, r.time_ns, false);
        break;
      case Action::segment_alloc:
        if (!lays_out_as_segment(r) || !is_forwarded(r) || r.size == 0) break;
        begin_slice(r, r.size, frames);
        forwarded[r.device][r.addr] = r.size;
        outside[r.device] += static_cast<i64>(r.size);
        counter(w, pid, r.device, "outside_allocator", r.time_ns, outside[r.device]);
        break;
      case Action::segment_free: {
        if (!lays_out_as_segment(r) || !is_forwarded(r)) break;
        auto& by_addr = forwarded[r.device];
        auto it = by_addr.find(r.addr);
        if (it == by_addr.end()) break;  // forwarded before the history began
        end_slice(r.device, r.addr, r.time_ns, false);
        outside[r.device] -= static_cast<i64>(it->second);
        by_addr.erase(it);
        counter(w, pid, r.device, "outside_allocator", r.time_ns, outside[r.device]);
        break;
      }
      default:
        break;
    }
  }
  for (auto& [dev, by_addr] : open) {
    i64 end = 0;
    for (const DeviceModel& d : m.devices)
      if (d.device == dev) end = d.last_time_ns;
    std::vector<u64> addrs;
    addrs.reserve(by_addr.size());
    for (const auto& [a, s] : by_addr) addrs.push_back(a);
    std::sort(addrs.begin(), addrs.end());
    for (u64 a : addrs) end_slice(dev, a, end, true);
  }
}

}  // namespace

void write_perfetto_json(const std::vector<PerfettoProcess>& processes, const ByteSink& sink) {
  i64 origin = INT64_MAX;
  for (const PerfettoProcess& p : processes)
    for (const DeviceModel& d : p.model->devices)
      if (d.events > 0) origin = std::min(origin, d.first_time_ns);
  if (origin == INT64_MAX) origin = 0;

  // The traces' own pids when every trace has a distinct one; else their order.
  std::set<std::int64_t> pids;
  for (const PerfettoProcess& p : processes)
    if (p.model->header.pid > 0 && p.model->header.pid <= INT32_MAX) pids.insert(p.model->header.pid);
  const bool own_pids = pids.size() == processes.size();

  EventWriter w(sink, origin);
  u64 next_id = 0;
  for (std::size_t i = 0; i < processes.size(); ++i) {
    const TraceModel& m = *processes[i].model;
    const int pid = own_pids ? static_cast<int>(m.header.pid) : static_cast<int>(i + 1);
    w.event(fmt::format(R"("ph":"M","pid":{},"tid":0,"name":"process_name","args":{{"name":{}}})", pid,
                        json_string(process_label(m.header, i))));
    for (const DeviceModel& d : m.devices) {
      w.event(fmt::format(R"("ph":"M","pid":{},"tid":{},"name":"thread_name","args":{{"name":"cuda:{}"}})", pid,
                          d.device + 1, d.device));
      write_counters(w, pid, d);
    }
    write_allocations(w, pid, m, *processes[i].open_events(), next_id);
  }
  w.finish();
}

}  // namespace vramtrace
