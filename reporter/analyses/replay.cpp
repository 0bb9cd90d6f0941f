// The replay engine (replay.h): trace records -> CachingAllocator over SimulatedDevice.
#include "analyses/replay.h"

#include <deque>
#include <memory>

#include <fmt/format.h>

#include "analyses/addr_map.h"
#include "vramtrace/caching_allocator.h"
#include "vramtrace/sim_device.h"

namespace vramtrace {
namespace {

/// What a trace address stands for in one lane.
enum class AddrState : std::uint8_t {
  live,     ///< allocated, ours = our block
  pending,  ///< free_requested seen, free_completed not yet (deallocate_deferred done)
  skipped,  ///< the allocation failed (OOM) or was of 0 bytes: its frees are skipped
  skipped_pending,
};
struct Mapped {
  DevicePtr ours = 0;
  AddrState state = AddrState::live;
};

/// Collects our segment sizes.
class SegmentSink final : public EventSink {
 public:
  explicit SegmentSink(bool record, bool expandable) : record_(record), expandable_(expandable) {}
  void record(const Event& e) noexcept override {
    if (!record_) return;
    Action want = expandable_ ? Action::segment_map : Action::segment_alloc;
    if (e.action == want) {
      try {
        sizes.push_back(SegmentAlloc{e.size_bytes, alloc_index, e.device});
      } catch (...) {
      }
    }
  }
  std::vector<SegmentAlloc> sizes;
  std::uint64_t alloc_index = 0;  // set by the engine before each allocate

 private:
  bool record_;
  bool expandable_;
};

struct Lane {
  Lane(const ReplayConfig& config, std::int32_t device_index, bool record_segments)
      : device(make_options(config)),
        sink(record_segments, config.settings.expandable_segments),
        allocator(device, config.settings, DeviceId{device_index}, &sink) {
    result.config = config;
    result.device = device_index;
  }
  static SimulatedDevice::Options make_options(const ReplayConfig& c) {
    SimulatedDevice::Options o;
    o.capacity_bytes = c.capacity_bytes;
    return o;
  }
  SimulatedDevice device;
  SegmentSink sink;
  CachingAllocator allocator;
  AddrMap<Mapped> map;
  ReplayResult result;
  PeakWatch peak;  // of allocated bytes: Note [state at the peak] in vramtrace/stats.h

  void note_peak_end() {
    if (peak.take()) result.largest_free_at_peak = allocator.snapshot().largest_free_block();
  }
};

class Engine {
 public:
  Engine(TraceReader& reader, const std::vector<ReplayConfig>& configs, const ReplayOptions& options)
      : reader_(reader), configs_(configs), options_(options), by_config_(configs.size()) {}

  ReplayReport run() {
    report_.header = reader_.header();
    TraceRecord r, next;
    bool have_next = false;
    for (;;) {
      if (have_next) {
        r = next;
        have_next = false;
      } else if (!reader_.next(r)) {
        break;
      }
      count();
      switch (r.action) {
        case Action::alloc:
          on_alloc(r);
          break;
        case Action::free_requested: {
          have_next = reader_.next(next);
          bool paired =
              have_next && next.action == Action::free_completed && next.addr == r.addr && next.device == r.device;
          if (paired) {
            have_next = false;
            count();
            on_free(r, /*immediate=*/true);
          } else {
            on_free(r, /*immediate=*/false);
          }
          break;
        }
        case Action::free_completed:
          on_free_completed(r);
          break;
        case Action::segment_alloc:
          if (!is_memory_kind(r.memory_kind, MemoryKind::allocator)) break;  // passed through by the shim
          report_.trace_segment_allocs.push_back(SegmentAlloc{r.size, report_.alloc_requests, r.device});
          // Place our segment where the program got its own: best fit breaks ties between
          // equal sizes by address, so the order of segment addresses matters.
          for (std::size_t c = 0; c < configs_.size(); ++c) lane(c, r.device).device.plan_address(r.size, r.addr);
          break;
        case Action::segment_map:
          if (!is_memory_kind(r.memory_kind, MemoryKind::allocator)) break;
          ++report_.trace_segment_maps;
          break;
        default:
          break;  // segment_free/unmap, oom, snapshot, mark: not replayed
      }
    }
    report_.header = reader_.header();  // snapshots learn their settings at the end
    report_.incomplete = reader_.incomplete();
    report_.lost_events = reader_.lost_events();
    add_notes();
    for (auto& lanes : by_config_) {
      for (auto& lane : lanes) {
        if (!lane) continue;
        lane->note_peak_end();
        lane->result.stats = lane->allocator.stats();
        lane->result.segment_allocs = std::move(lane->sink.sizes);
        report_.results.push_back(std::move(lane->result));
      }
    }
    return std::move(report_);
  }

 private:
  void count() {
    if ((++report_.events & 0xffff) == 0 && options_.progress) {
      options_.progress(report_.events, reader_.bytes_read(), reader_.bytes_total());
    }
  }

  void add_notes() {
    // Case S4 (pytorch/pytorch 122057, 147851): expandable segments requested, yet the program
    // made whole-segment device allocations and mapped no pages.
    AllocatorSettings recorded;
    std::string err;
    if (!report_.header.settings.empty() && AllocatorSettings::parse(report_.header.settings, recorded, err) &&
        recorded.expandable_segments && !report_.trace_segment_allocs.empty() && report_.trace_segment_maps == 0) {
      report_.notes.push_back(fmt::format(
          "the trace was recorded with \"{}\", but it shows {} whole-segment allocations (segment_alloc) and no mapped "
          "pages (segment_map): expandable segments did not take effect in that run (the setting was read too late or "
          "not supported there; pytorch/pytorch 122057, 147851)",
          report_.header.settings, report_.trace_segment_allocs.size()));
    }
  }

  [[noreturn]] void fail(const std::string& what) const {
    throw TraceError(fmt::format("{}: {}: {}", reader_.header().path, reader_.position(), what));
  }

  Lane& lane(std::size_t config, std::int32_t device) {
    auto& lanes = by_config_[config];
    if (device < 0 || device > 1023) fail(fmt::format("device index {} out of range", device));
    if (lanes.size() <= static_cast<std::size_t>(device)) lanes.resize(static_cast<std::size_t>(device) + 1);
    auto& l = lanes[static_cast<std::size_t>(device)];
    if (!l) l = std::make_unique<Lane>(configs_[config], device, options_.record_segments);
    return *l;
  }

  void on_alloc(const TraceRecord& r) {
    std::uint64_t index = report_.alloc_requests++;
    if (r.addr == 0) fail("alloc entry with address 0");
    for (std::size_t c = 0; c < configs_.size(); ++c) {
      Lane& L = lane(c, r.device);
      if (L.map.find(r.addr))
        fail(fmt::format("alloc at address 0x{:x}, which is still allocated (no free_completed since its alloc)",
                         r.addr));
      DevicePtr ours = 0;
      L.sink.alloc_index = index;
      Status s = L.allocator.allocate(r.size, StreamId{r.stream}, &ours);
      if (s == Status::ok) {
        L.map.put(r.addr, Mapped{ours, ours == 0 ? AddrState::skipped : AddrState::live});
        L.peak.after_increase(L.allocator.stats().allocated_bytes[kStatAll]);
      } else if (s == Status::out_of_memory) {
        L.map.put(r.addr, Mapped{0, AddrState::skipped});
        ++L.result.failed_allocs;
        if (!L.result.first_oom) {
          OomInfo info = L.allocator.last_oom();
          L.result.first_oom = FirstOom{index, r.size, info.allocated_bytes, info.reserved_bytes};
        }
      } else {
        fail(fmt::format("the allocator refused an alloc of {} bytes: {}", r.size, status_name(s)));
      }
    }
  }

  void on_free(const TraceRecord& r, bool immediate) {
    for (std::size_t c = 0; c < configs_.size(); ++c) {
      Lane& L = lane(c, r.device);
      Mapped* m = L.map.find(r.addr);
      if (!m)
        fail(fmt::format("free_requested of address 0x{:x}, which no earlier alloc in the trace returned", r.addr));
      L.note_peak_end();
      switch (m->state) {
        case AddrState::live: {
          Status s = immediate ? L.allocator.deallocate(m->ours) : L.allocator.deallocate_deferred(m->ours);
          if (s != Status::ok)
            fail(fmt::format("the allocator refused the free of 0x{:x}: {}", r.addr, status_name(s)));
          if (immediate)
            L.map.erase(r.addr);
          else
            m->state = AddrState::pending;
          break;
        }
        case AddrState::skipped:
          if (immediate)
            L.map.erase(r.addr);
          else
            m->state = AddrState::skipped_pending;
          break;
        case AddrState::pending:
        case AddrState::skipped_pending:
          fail(fmt::format("second free_requested of address 0x{:x} without its free_completed", r.addr));
      }
    }
  }

  void on_free_completed(const TraceRecord& r) {
    for (std::size_t c = 0; c < configs_.size(); ++c) {
      Lane& L = lane(c, r.device);
      Mapped* m = L.map.find(r.addr);
      if (!m)
        fail(fmt::format("free_completed of address 0x{:x}, which no earlier alloc in the trace returned", r.addr));
      switch (m->state) {
        case AddrState::pending: {
          Status s = L.allocator.complete_deferred_free(m->ours);
          if (s != Status::ok)
            fail(fmt::format("the allocator refused to complete the free of 0x{:x}: {}", r.addr, status_name(s)));
          break;
        }
        case AddrState::live: {  // free_completed without free_requested: a plain free
          L.note_peak_end();
          Status s = L.allocator.deallocate(m->ours);
          if (s != Status::ok)
            fail(fmt::format("the allocator refused the free of 0x{:x}: {}", r.addr, status_name(s)));
          break;
        }
        case AddrState::skipped:
        case AddrState::skipped_pending:
          break;
      }
      L.map.erase(r.addr);
    }
  }

  TraceReader& reader_;
  const std::vector<ReplayConfig>& configs_;
  const ReplayOptions& options_;
  std::vector<std::vector<std::unique_ptr<Lane>>> by_config_;
  ReplayReport report_;
};

}  // namespace

ReplayReport replay(TraceReader& reader, const std::vector<ReplayConfig>& configs, const ReplayOptions& options) {
  Engine engine(reader, configs, options);
  return engine.run();
}

}  // namespace vramtrace
