// Step boundaries per device: see step_series.h and Note [growth detection] in growth.h.
#include "analyses/step_series.h"

#include <algorithm>
#include <cstdlib>

#include "vramtrace/size_rules.h"

namespace vramtrace {

namespace {

// A training step allocates (activations) and gives back within the step: the median swing above
// a step's first trough must be at least twice the median change between troughs. A loading loop
// or an allocation-only staircase repeats too, but only grows.
bool releases_within_steps(const std::vector<std::int64_t>& curve, const std::vector<std::size_t>& troughs) {
  if (troughs.size() < 3) return false;
  std::vector<std::int64_t> swing, growth;
  for (std::size_t k = 0; k + 1 < troughs.size(); ++k) {
    auto lo = troughs[k], hi = troughs[k + 1];
    std::int64_t top = *std::max_element(curve.begin() + static_cast<std::ptrdiff_t>(lo),
                                         curve.begin() + static_cast<std::ptrdiff_t>(hi));
    swing.push_back(top - curve[lo]);
    growth.push_back(std::abs(curve[hi] - curve[lo]));
  }
  auto median = [](std::vector<std::int64_t> v) {
    std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2), v.end());
    return v[v.size() / 2];
  };
  return median(swing) > 0 && median(swing) >= 2 * median(growth);
}

}  // namespace

StepSeriesBuilder::StepSeriesBuilder(std::size_t max_curve_points)
    : max_curve_points_(std::max<std::size_t>(max_curve_points, 64)) {}

std::uint64_t StepSeriesBuilder::block_size(std::uint64_t requested) noexcept {
  return round_size(requested, /*divisions=*/0);
}

void StepSeriesBuilder::add(const TraceRecord& r, std::string_view mark_name) {
  switch (r.action) {
    case Action::alloc: {
      Device& d = dev(r.device);
      if (d.curve.size() >= max_curve_points_) {
        std::size_t drop = d.curve.size() / 2;
        d.curve.erase(d.curve.begin(), d.curve.begin() + static_cast<std::ptrdiff_t>(drop));
        d.dropped_points += drop;
      }
      d.curve.push_back(d.allocated);
      std::uint64_t b = block_size(r.size);
      auto [it, fresh] = d.live.try_emplace(r.addr, b);
      if (!fresh) {  // alloc at a live address (a lost free): replace it
        d.allocated -= static_cast<std::int64_t>(it->second);
        it->second = b;
      }
      d.allocated += static_cast<std::int64_t>(b);
      break;
    }
    case Action::free_requested:
    case Action::free_completed: {
      Device& d = dev(r.device);
      auto it = d.live.find(r.addr);
      if (it != d.live.end()) {
        d.allocated -= static_cast<std::int64_t>(it->second);
        d.live.erase(it);
      }
      break;
    }
    case Action::mark: {
      dev(r.device);  // a mark names a device that may have no allocation yet
      for (auto& [id, d] : devices_) d.marks.push_back({marks_seen_, d.allocated});
      ++marks_seen_;
      bool step_start = mark_name.starts_with("step ") && !mark_name.ends_with(" end");
      if (step_start) {
        for (auto& [id, d] : devices_) d.step_marks.push_back({step_marks_seen_, d.allocated});
        ++step_marks_seen_;
      }
      break;
    }
    default:
      break;
  }
}

std::vector<DeviceSteps> StepSeriesBuilder::finish() {
  std::vector<DeviceSteps> out;
  for (auto& [id, d] : devices_) {
    DeviceSteps s;
    s.device = id;
    if (d.step_marks.size() >= 2) {
      s.source = "marks";
      s.samples = std::move(d.step_marks);
    } else if (d.marks.size() >= 2) {
      s.source = "marks";
      s.samples = std::move(d.marks);
    } else {
      d.curve.push_back(d.allocated);
      auto period = detect_period(d.curve);
      if (!period) {
        s.note = d.marks.empty() ? "no marks in the trace and no repeating step pattern in its allocations"
                                 : "one mark only, and no repeating step pattern in its allocations";
      } else {
        auto troughs = track_step_troughs(d.curve, *period);
        if (!releases_within_steps(d.curve, troughs)) {
          s.note =
              "the allocations repeat, but memory is not given back within a repetition (loading, or growth "
              "only), so they are not training steps";
        } else {
          s.source = "pattern";
          s.period_allocs = *period;
          std::int64_t k = 0;
          for (auto idx : troughs) s.samples.push_back({k++, d.curve[idx]});
          if (d.dropped_points > 0)
            s.note = "the first " + std::to_string(d.dropped_points) + " allocations were left out of the step search";
        }
      }
    }
    out.push_back(std::move(s));
  }
  return out;
}

std::vector<DeviceSteps> read_step_series(TraceReader& reader) {
  StepSeriesBuilder b;
  TraceRecord r;
  while (reader.next(r)) b.add(r);
  return b.finish();
}

}  // namespace vramtrace
