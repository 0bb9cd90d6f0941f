// Address intervals that may nest, found by address: the symbol tables, the DWARF units and the
// inlined calls of the symboliser all ask "which interval holds this address?".
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

namespace vramtrace::symbols {

/// Half-open address intervals [lo, hi), each with a 32-bit payload (an index of the caller's).
///
/// After build(), find() returns the innermost interval that holds an address with one binary
/// search and a walk up the enclosing intervals (as deep as the intervals nest, normally zero or
/// one step), and preceding() the last interval that starts at or before it. Empty intervals
/// (hi <= lo) hold nothing but are still found by preceding() (an ELF symbol of size 0).
/// Not thread-safe while being built; const methods may be called from several threads after.
class IntervalIndex {
 public:
  struct Interval {
    std::uint64_t lo = 0;
    std::uint64_t hi = 0;
    std::uint32_t payload = 0;
    /// Index of the nearest earlier interval that holds `lo` (kNone if none); set by build().
    std::uint32_t parent = 0;
  };
  static constexpr std::uint32_t kNone = UINT32_MAX;

  void reserve(std::size_t n) { intervals_.reserve(n); }
  void add(std::uint64_t lo, std::uint64_t hi, std::uint32_t payload) {
    intervals_.push_back({lo, hi, payload, kNone});
  }

  /// Sorts by start (outer before inner when two start together) and links each interval to the
  /// nearest earlier one that still holds its start. O(n log n); call once after the last add().
  void build() {
    std::sort(intervals_.begin(), intervals_.end(), [](const Interval& a, const Interval& b) {
      return a.lo != b.lo ? a.lo < b.lo : (a.hi != b.hi ? a.hi > b.hi : a.payload < b.payload);
    });
    // The stack holds the intervals that still hold the current start, innermost on top: an
    // interval holding some later address x was never popped before the last start <= x, so
    // walking the parents from there visits every candidate (see find()).
    std::vector<std::uint32_t> open;
    for (std::uint32_t i = 0; i < intervals_.size(); ++i) {
      Interval& iv = intervals_[i];
      while (!open.empty() && intervals_[open.back()].hi <= iv.lo) open.pop_back();
      iv.parent = open.empty() ? kNone : open.back();
      if (iv.hi > iv.lo) open.push_back(i);
    }
  }

  /// The innermost interval holding `addr`, or nullptr.
  const Interval* find(std::uint64_t addr) const {
    std::uint32_t i = preceding_index(addr);
    while (i != kNone) {
      const Interval& iv = intervals_[i];
      if (addr < iv.hi) return &iv;
      i = iv.parent;
    }
    return nullptr;
  }

  /// The last interval (in build() order) whose start is at or before `addr`, or nullptr.
  const Interval* preceding(std::uint64_t addr) const {
    const std::uint32_t i = preceding_index(addr);
    return i == kNone ? nullptr : &intervals_[i];
  }

  std::size_t size() const { return intervals_.size(); }
  bool empty() const { return intervals_.empty(); }

 private:
  std::uint32_t preceding_index(std::uint64_t addr) const {
    auto it = std::upper_bound(intervals_.begin(), intervals_.end(), addr,
                               [](std::uint64_t a, const Interval& iv) { return a < iv.lo; });
    if (it == intervals_.begin()) return kNone;
    return static_cast<std::uint32_t>(it - intervals_.begin() - 1);
  }

  std::vector<Interval> intervals_;
};

}  // namespace vramtrace::symbols
