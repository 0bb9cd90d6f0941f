// What-if replays for `vramtrace oom`: the whole trace replayed on a simulated device under other
// allocator settings (expandable segments, max_split_size_mb, roundup_power2_divisions), with each
// failed request of the trace (its `oom` entries) replayed as an allocation at that moment.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "analyses/oom_report.h"
#include "model/trace_model.h"
#include "readers/open_trace.h"

namespace vramtrace {

/// Wraps a reader: every `oom` record becomes an alloc of its size at a synthetic address (high
/// addresses the trace never uses) followed at once by its free, so that a replay asks the
/// simulated device for the request that failed. Other records pass through unchanged. With
/// `put_back` (sorted 0-based indices of the inner reader's records), only those `oom` records
/// are put back: the OOMs, not the failed attempts the program retried (Note [one OOM per failed
/// request]: a survived request's allocation is in the trace already).
class OomAsAllocReader : public TraceReader {
 public:
  explicit OomAsAllocReader(TraceReader& inner, std::optional<std::vector<std::uint64_t>> put_back = std::nullopt)
      : inner_(inner), put_back_(std::move(put_back)) {}
  const TraceHeader& header() const override { return inner_.header(); }
  bool next(TraceRecord& out) override;
  std::string position() const override { return inner_.position(); }
  bool incomplete() const override { return inner_.incomplete(); }

 private:
  TraceReader& inner_;
  std::vector<TraceRecord> queue_;
  std::uint64_t injected_ = 0;
  std::optional<std::vector<std::uint64_t>> put_back_;
  std::uint64_t read_ = 0;  // records read from inner_
};

/// The simulated capacity for the what-ifs: `text` if given (a size such as "80GiB"); else the
/// memory the allocator could reach at the first OOM (reserved + free on the device), which
/// leaves out what the CUDA context and other users held. 0 and `error` set if unusable.
std::uint64_t whatif_capacity(const TraceModel& m, const std::vector<OomCase>& cases, const std::string& text,
                              std::string& error);

/// The settings tried, appended to the trace's own: "" (own), "expandable_segments:True",
/// "max_split_size_mb:20/128/512", "roundup_power2_divisions:4".
std::vector<std::string> whatif_settings();

/// Replays `path` (reopened) under each setting. A setting that the allocator rejects, or a replay
/// error, is reported in WhatIf::error. Throws TraceError on unreadable input.
std::vector<WhatIf> run_whatifs(const std::string& path, const TraceModel& m, std::uint64_t capacity_bytes);

}  // namespace vramtrace
