// Note [state at the peak]: PeakWatch says when to copy the state at a new peak of a Stat. Also
// the event clock and the memory kinds of segment events (vramtrace/event.h).
#include <catch2/catch.hpp>

#include "vramtrace/event.h"
#include "vramtrace/stats.h"

using namespace vramtrace;

TEST_CASE("PeakWatch: the state is taken once per new peak, after the last increase", "[peaks]") {
  Stat s;
  PeakWatch w;
  CHECK_FALSE(w.take());  // nothing yet
  s.increase(100);
  w.after_increase(s, 1);
  s.increase(50);  // a run of increases: the peak is the last one
  w.after_increase(s, 2);
  CHECK(w.take());
  CHECK(w.event() == 2);
  CHECK_FALSE(w.take());  // once
  s.decrease(60);
  s.increase(60);  // back to the same peak: nothing new to copy
  w.after_increase(s, 3);
  CHECK_FALSE(w.take());
  s.decrease(10);
  s.increase(5);  // below the peak
  w.after_increase(s, 4);
  CHECK_FALSE(w.take());
  s.increase(100);
  w.after_increase(s, 5);
  CHECK(w.take());
  CHECK(w.event() == 5);
  CHECK(s.peak == 245);
}

TEST_CASE("PeakWatch: an increase of nothing is no peak", "[peaks]") {
  Stat s;
  PeakWatch w;
  w.after_increase(s, 1);
  CHECK_FALSE(w.take());
}

TEST_CASE("memory kinds keep the trace format's numbers", "[events]") {
  CHECK(static_cast<int>(MemoryKind::allocator) == 0);
  CHECK(static_cast<int>(MemoryKind::device) == 1);
  CHECK(static_cast<int>(MemoryKind::managed) == 2);
  CHECK(static_cast<int>(MemoryKind::pitched) == 3);
  CHECK(static_cast<int>(MemoryKind::pool) == 4);
  CHECK(static_cast<int>(MemoryKind::pinned_host) == 5);
  CHECK(static_cast<int>(MemoryKind::array) == 6);
  CHECK(static_cast<int>(MemoryKind::vmm) == 7);
  CHECK(is_memory_kind(5, MemoryKind::pinned_host));
  CHECK_FALSE(is_memory_kind(261, MemoryKind::pinned_host));  // no truncation to 8 bits
}

TEST_CASE("the event clock is monotonic", "[events]") {
  const std::uint64_t a = event_time_ns();
  const std::uint64_t b = event_time_ns();
  CHECK(a > 0);
  CHECK(b >= a);
}
