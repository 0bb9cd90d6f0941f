// Checks the state at a device's peak against a plain copy: the layout a state holds after the
// event that made the peak is the end state of the same records cut right after that event.
#pragma once

#include <catch2/catch.hpp>

#include <vector>

#include "layout_check.h"
#include "model/trace_model.h"
#include "vector_reader.h"

namespace vramtrace::testing {

/// CHECKs that two states hold the same layout, biggest allocations and bytes per stack.
inline void check_same_layout(const StateAt& a, const StateAt& b) {
  CHECK(a.outside_segments_bytes == b.outside_segments_bytes);
  CHECK(a.largest_free_block == b.largest_free_block);
  check_same_segments(a.layout.segments, b.layout.segments);
  REQUIRE(a.biggest.size() == b.biggest.size());
  for (std::size_t i = 0; i < a.biggest.size(); ++i) {
    CHECK(a.biggest[i].address == b.biggest[i].address);
    CHECK(a.biggest[i].size == b.biggest[i].size);
    CHECK(a.biggest[i].alloc_event == b.biggest[i].alloc_event);
    CHECK(a.biggest[i].pending_free == b.biggest[i].pending_free);
  }
  REQUIRE(a.stacks.size() == b.stacks.size());
  for (std::size_t i = 0; i < a.stacks.size(); ++i) {
    CHECK(a.stacks[i].stack == b.stacks[i].stack);
    CHECK(a.stacks[i].bytes == b.stacks[i].bytes);
    CHECK(a.stacks[i].blocks == b.stacks[i].blocks);
  }
}

/// Models `records` and CHECKs each device's state at its peak against the end state of the
/// records cut right after the peak's event. Returns the full model.
inline TraceModel check_peak_layouts(const std::vector<TraceRecord>& records, const TraceHeader& header = {}) {
  VectorReader all(records, header);
  TraceModel m = build_trace_model(all);
  for (const auto& d : m.devices) {
    if (!d.at_peak.captured) continue;
    INFO("device " << d.device << ", peak at event " << d.at_peak.event_index);
    REQUIRE(d.at_peak.event_index < records.size());
    std::vector<TraceRecord> cut(records.begin(),
                                 records.begin() + static_cast<std::ptrdiff_t>(d.at_peak.event_index) + 1);
    VectorReader prefix(std::move(cut), header);
    const TraceModel p = build_trace_model(prefix);
    const DeviceModel* same = nullptr;
    for (const auto& e : p.devices)
      if (e.device == d.device) same = &e;
    REQUIRE(same);
    // The figures too, unless memory from before the history shifts them by what each trace frees
    // of it (Note [a history that begins late]), which differs between the whole and the cut trace.
    if (d.history == DeviceModel::History::complete && same->history == DeviceModel::History::complete)
      CHECK(same->at_end.stats.allocated_bytes[kStatAll].current == d.at_peak.stats.allocated_bytes[kStatAll].current);
    check_same_layout(d.at_peak, same->at_end);
  }
  return m;
}

}  // namespace vramtrace::testing
