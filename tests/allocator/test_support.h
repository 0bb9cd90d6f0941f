// Helpers shared by the allocator tests.
#pragma once

#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "vramtrace/caching_allocator.h"
#include "vramtrace/sim_device.h"

namespace vramtrace::test {

/// Records every event the allocator emits.
struct RecordingSink : EventSink {
  std::vector<Event> events;
  std::vector<Snapshot> oom_states;
  void record(const Event& e) noexcept override { events.push_back(e); }
  void record_oom(const Event& e, const Snapshot& s) noexcept override {
    events.push_back(e);
    oom_states.push_back(s);
  }
  std::vector<std::uint64_t> sizes_of(Action a) const {
    std::vector<std::uint64_t> out;
    for (const auto& e : events)
      if (e.action == a) out.push_back(e.size_bytes);
    return out;
  }
  std::size_t count(Action a) const {
    std::size_t n = 0;
    for (const auto& e : events) n += e.action == a;
    return n;
  }
};

inline AllocatorSettings settings_from(const std::string& conf) {
  AllocatorSettings s;
  std::string error;
  INFO(error);
  REQUIRE(AllocatorSettings::parse(conf, s, error));
  return s;
}

inline void require_invariants(const CachingAllocator& a) {
  std::string error;
  const bool ok = a.check_invariants(error);
  INFO(error);
  REQUIRE(ok);
}

inline DevicePtr must_allocate(CachingAllocator& a, std::uint64_t bytes, StreamId stream = {}) {
  DevicePtr p = 0;
  REQUIRE(a.allocate(bytes, stream, &p) == Status::ok);
  REQUIRE(p != 0);
  return p;
}

}  // namespace vramtrace::test
