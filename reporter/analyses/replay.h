// Replay of an allocation trace through our caching allocator over a simulated device: "how much
// would this run reserve on a GPU of N GiB with settings X, and would it run out?"
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "readers/open_trace.h"
#include "vramtrace/settings.h"
#include "vramtrace/stats.h"

namespace vramtrace {

/// One configuration to replay under.
struct ReplayConfig {
  AllocatorSettings settings;
  /// Simulated device capacity in bytes.
  std::uint64_t capacity_bytes = 0;
};

/// The first allocation the simulated device could not serve (after the allocator's release
/// and retry). The program would have died here with "CUDA out of memory"; the replay goes on,
/// skipping this allocation and its free, to show what else would have failed.
struct FirstOom {
  std::uint64_t alloc_index = 0;      ///< counts the trace's alloc entries from 0
  std::uint64_t requested_bytes = 0;  ///< what the program asked for
  std::uint64_t allocated_bytes = 0;  ///< allocated_bytes.all.current at the failure
  std::uint64_t reserved_bytes = 0;   ///< reserved_bytes.all.current at the failure
};

/// One device allocation (segment_alloc; segment_map for expandable segments) and the alloc
/// request that caused it.
struct SegmentAlloc {
  std::uint64_t size = 0;
  std::uint64_t alloc_index = 0;  ///< index (from 0) of the trace's alloc entry being served
  std::int32_t device = 0;
  friend bool operator==(const SegmentAlloc&, const SegmentAlloc&) = default;
};

/// What a replay under one configuration found, for one device of the trace.
struct ReplayResult {
  ReplayConfig config;
  std::int32_t device = 0;
  DeviceStats stats;  ///< final statistics (peaks over the whole replay)
  std::optional<FirstOom> first_oom;
  std::uint64_t failed_allocs = 0;  ///< allocations that hit OOM (== stats.num_ooms)
  /// Largest inactive (free, cached, mapped) block, in bytes, at the moment allocated_bytes.all
  /// reached its final peak. Taken at the end of the run of allocations that set the peak, i.e.
  /// just before the next free (or at the end of the trace) once a new peak was set; between the
  /// peak and that moment only allocations happen, which cannot free a block (an OOM's release
  /// of cached segments in that window is the one exception).
  std::uint64_t largest_free_at_peak = 0;
  /// Our segment_alloc sizes in order (device allocations; for expandable segments the
  /// segment_map sizes), when ReplayOptions::record_segments is set.
  std::vector<SegmentAlloc> segment_allocs;
};

/// Everything a replay produced.
struct ReplayReport {
  TraceHeader header;
  std::uint64_t events = 0;          ///< trace records read
  std::uint64_t alloc_requests = 0;  ///< alloc records
  /// The trace's own segment_alloc sizes in order (per device index), for comparison.
  /// (a trace's segment_alloc is attributed to the next alloc entry, which it precedes).
  std::vector<SegmentAlloc> trace_segment_allocs;
  std::vector<ReplayResult> results;     ///< per config, then per device, in config order
  bool incomplete = false;               ///< the trace ended early (cut last line)
  std::uint64_t lost_events = 0;         ///< events the trace lost (TraceReader::lost_events)
  std::uint64_t trace_segment_maps = 0;  ///< the trace's segment_map entries (expandable segments)
  /// Findings about the trace itself, one sentence each (e.g. case S4 of docs/cases.md:
  /// expandable_segments:True requested, but the trace shows whole-segment allocations).
  std::vector<std::string> notes;
};

struct ReplayOptions {
  /// Record our segment_alloc sizes in ReplayResult::segment_allocs.
  bool record_segments = false;
  /// Called about every 2^16 records with (records so far, compressed bytes read, total bytes
  /// or 0). May be empty.
  std::function<void(std::uint64_t records, std::uint64_t bytes, std::uint64_t total)> progress;
};

/// Replays every record of `reader` under each of `configs` in one pass (one allocator per
/// config and device). Trace rules:
///  - alloc: allocate the size on the stream; the trace address maps to ours.
///  - free_requested immediately followed by free_completed of the same address: deallocate;
///    otherwise deallocate_deferred at free_requested and complete_deferred_free at
///    free_completed (a block other streams were still using).
///  - segment_* entries do not drive the replay; their segment_alloc sizes are collected, and
///    each segment_alloc's address is planned on the simulated device
///    (SimulatedDevice::plan_address) so that our segment lands where the program's did, as
///    long as our allocator asks for the same sizes in the same order: best fit breaks ties
///    between equal-sized blocks by address.
///  - oom, snapshot, mark: ignored.
/// Throws TraceError (with the reader's position) for a free of an unknown address, an alloc at
/// an address that is still live, or any reader error.
ReplayReport replay(TraceReader& reader, const std::vector<ReplayConfig>& configs, const ReplayOptions& options = {});

}  // namespace vramtrace
