// Allocated bytes at each training step boundary, per device, read from a trace: the samples
// that growth detection (growth.h, Note [growth detection]) fits.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "analyses/growth.h"
#include "readers/open_trace.h"

namespace vramtrace {

/// One device's step boundaries.
struct DeviceSteps {
  std::int32_t device = 0;
  std::vector<StepSample> samples;
  /// "marks" (the trace's mark events), "pattern" (found by detect_period) or "none".
  std::string source = "none";
  std::size_t period_allocs = 0;  ///< pattern: allocations per step
  std::string note;               ///< why there are no samples, or what was dropped
};

/// Collects the allocated-bytes curve of each device in one pass.
///
/// Allocated bytes are counted as PyTorch's allocated_bytes: an `alloc` adds its block size and a
/// `free_requested` (or, without one, the `free_completed`) of that address subtracts it. The
/// block size is the requested size rounded as PyTorch's round_size without
/// roundup_power2_divisions (below 512 B: 512 B; otherwise up to a multiple of 512 B); the
/// rounding only offsets every sample by about the same amount, so slopes are unaffected.
///
/// Step boundaries: a `mark` event is a boundary on every device, and the sample is the
/// allocated bytes when the mark was written. When marks carry names (vramtrace traces) and at
/// least two are named "step <i>" (python/vramtrace_mark.py's step(), which also writes
/// "step <i> end"), only those are boundaries; otherwise every mark is. A trace with fewer than two marks falls back to
/// the pattern: the curve of allocated bytes just before each alloc (plus the value at the end of the trace) goes to
/// detect_period and track_step_troughs; the samples are the troughs. To bound memory the curve keeps at most
/// `max_curve_points` recent points per device (older halves are dropped and the note says so). Not thread-safe.
class StepSeriesBuilder {
 public:
  explicit StepSeriesBuilder(std::size_t max_curve_points = std::size_t{1} << 22);
  /// `mark_name`: for a mark, its name when the format has one (empty otherwise).
  void add(const TraceRecord& r, std::string_view mark_name = {});
  /// Per device, sorted by device id.
  std::vector<DeviceSteps> finish();

  /// PyTorch's round_size for the default settings (vramtrace/size_rules.h; see class comment). Bytes.
  static std::uint64_t block_size(std::uint64_t requested) noexcept;

 private:
  struct Device {
    std::int64_t allocated = 0;
    std::unordered_map<std::uint64_t, std::uint64_t> live;  // addr -> block bytes
    std::vector<StepSample> marks;
    std::vector<StepSample> step_marks;  // marks named "step <i>"

    std::vector<std::int64_t> curve;
    std::uint64_t dropped_points = 0;
  };
  Device& dev(std::int32_t id) { return devices_[id]; }
  std::map<std::int32_t, Device> devices_;
  std::int64_t marks_seen_ = 0;
  std::int64_t step_marks_seen_ = 0;
  std::size_t max_curve_points_;
};

/// Reads the whole trace and returns its step series. Throws TraceError from the reader.
std::vector<DeviceSteps> read_step_series(TraceReader& reader);

}  // namespace vramtrace
