// Allocator statistics with PyTorch's names (torch.cuda.memory_stats()).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace vramtrace {

/// current / peak / allocated (cumulative increase) / freed (cumulative decrease), as c10's Stat.
///
/// `freed` is not stored: current = (current at the last reset_accumulated) + allocated - freed
/// always holds, so freed() derives it and a decrease touches one field (the allocator's free
/// path makes ten decreases per free; docs/benchmarks.md).
struct Stat {
  std::int64_t current = 0;
  std::int64_t peak = 0;
  std::int64_t allocated = 0;
  std::int64_t base = 0;  ///< current at the last reset_accumulated (0 before any)

  void increase(std::int64_t amount) noexcept {
    current += amount;
    if (current > peak) peak = current;
    allocated += amount;
  }
  void decrease(std::int64_t amount) noexcept { current -= amount; }
  /// Cumulative decrease since the start (or the last reset_accumulated).
  std::int64_t freed() const noexcept { return base + allocated - current; }
  void reset_peak() noexcept { peak = current; }
  void reset_accumulated() noexcept {
    allocated = 0;
    base = current;
  }
};

/// Note [state at the peak]
/// Stat::peak is the one running maximum of a statistic (the allocator's, the trace model's and
/// `vramtrace run`'s end screen all count with Stat). A report also wants the *state* at the
/// peak (the layout, the largest free block), which is only worth copying once per new peak: the
/// state after the last increase that reached it, i.e. just before the first event that may
/// lower the statistic again (or at the end). PeakWatch says when that is; the trace model
/// (reporter/model) and replay (reporter/analyses) both take their state at the peak through it.
///
/// Use: after_increase(stat, event) after each event that may raise the statistic; take() before
/// each event that may lower it, and at the end; when take() returns true, copy the state now (it
/// is still the state after event()). Not thread-safe (one per statistic and reader).
class PeakWatch {
 public:
  /// After an event that may have raised `s`: a new peak is pending when `s` is at its peak and
  /// above the last peak taken. `event` is the event's index, returned by event().
  void after_increase(const Stat& s, std::uint64_t event = 0) noexcept {
    if (s.current == s.peak && s.current > taken_) {
      pending_ = s.current;
      event_ = event;
    }
  }
  /// Before an event that may lower the statistic, and at the end: true, once per new peak, when
  /// the state at the peak is to be copied now.
  bool take() noexcept {
    if (pending_ <= taken_) return false;
    taken_ = pending_;
    return true;
  }
  /// The index of the event that made the peak last pending (as given to after_increase).
  std::uint64_t event() const noexcept { return event_; }

 private:
  std::int64_t pending_ = 0;  // the pending peak's value (<= taken_: none)
  std::int64_t taken_ = 0;    // the last peak taken
  std::uint64_t event_ = 0;
};

/// Index of a per-pool stat array: PyTorch's "all", "small_pool", "large_pool".
enum StatPool : int { kStatAll = 0, kStatSmall = 1, kStatLarge = 2 };
inline constexpr int kNumStatPools = 3;
using StatArray = std::array<Stat, kNumStatPools>;

// One list drives the struct, the flat names and the recount check (docs/design.md, "one list").
// Per-pool arrays, flattened as NAME.{all,large_pool,small_pool}.{current,peak,allocated,freed}.
#define VRAMTRACE_POOL_STATS(X) \
  X(allocation)                 \
  X(segment)                    \
  X(active)                     \
  X(inactive_split)             \
  X(allocated_bytes)            \
  X(reserved_bytes)             \
  X(active_bytes)               \
  X(inactive_split_bytes)       \
  X(requested_bytes)
// Single stats, flattened as NAME.{current,peak,allocated,freed}.
#define VRAMTRACE_SINGLE_STATS(X) \
  X(oversize_allocations)         \
  X(oversize_segments)
// Plain counters, flattened as NAME.
#define VRAMTRACE_COUNTERS(X) \
  X(num_alloc_retries)        \
  X(num_ooms)                 \
  X(num_sync_all_streams)     \
  X(num_device_alloc)         \
  X(num_device_free)

/// Statistics of one device's allocator. Plain data; copy it out under the allocator's lock.
struct DeviceStats {
#define VRAMTRACE_DECLARE_POOL_STAT(name) StatArray name{};
  VRAMTRACE_POOL_STATS(VRAMTRACE_DECLARE_POOL_STAT)
#undef VRAMTRACE_DECLARE_POOL_STAT
#define VRAMTRACE_DECLARE_SINGLE_STAT(name) Stat name{};
  VRAMTRACE_SINGLE_STATS(VRAMTRACE_DECLARE_SINGLE_STAT)
#undef VRAMTRACE_DECLARE_SINGLE_STAT
#define VRAMTRACE_DECLARE_COUNTER(name) std::int64_t name = 0;
  VRAMTRACE_COUNTERS(VRAMTRACE_DECLARE_COUNTER)
#undef VRAMTRACE_DECLARE_COUNTER
  /// memory_stats()["max_split_size"]: the setting in bytes, -1 when unlimited (as PyTorch).
  std::int64_t max_split_size = -1;

  /// Sets every peak to its current value (torch.cuda.reset_peak_memory_stats).
  void reset_peaks() noexcept;
};

/// PyTorch's flat names and values, in PyTorch's order of keys (sorted, as memory_stats()
/// returns an OrderedDict sorted by key). E.g. {"active.all.allocated", 12}, ...
std::vector<std::pair<std::string, std::int64_t>> flatten_stats(const DeviceStats& s);

}  // namespace vramtrace
