// The figures `vramtrace check` and `vramtrace diff` compare, typed: taken from the trace model
// of a trace, or read once, at the edge, from a `vramtrace summary --json` document given as
// input. Nothing downstream looks figures up by their JSON keys.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "model/trace_model.h"

namespace vramtrace {

/// One device of one trace. PyTorch's statistics are named after their flat memory_stats() key
/// (`allocated_bytes.all.peak` is allocated_bytes_peak); each is unset when the input does not
/// have it: a summary document without the key, or num_alloc_retries of a trace that does not
/// record it (PyTorch's history has no retry event).
struct DeviceFigures {
  std::int32_t device = 0;
  std::optional<std::int64_t> allocated_bytes_peak;       ///< bytes; allocated_bytes.all.peak
  std::optional<std::int64_t> reserved_bytes_peak;        ///< bytes; reserved_bytes.all.peak
  std::optional<std::int64_t> active_bytes_peak;          ///< bytes; active_bytes.all.peak
  std::optional<std::int64_t> requested_bytes_peak;       ///< bytes; requested_bytes.all.peak
  std::optional<std::int64_t> inactive_split_bytes_peak;  ///< bytes; inactive_split_bytes.all.peak
  std::optional<std::int64_t> segment_peak;               ///< segments; segment.all.peak
  std::optional<std::int64_t> allocations;                ///< allocation.all.allocated
  /// num_ooms: the OOMs that reached the program, and num_alloc_retries: the failed allocations
  /// it retried, as every command counts them (DeviceModel::oom_count, Note [one OOM per failed
  /// request]); retries unset when unknown.
  std::optional<std::int64_t> num_ooms;
  std::optional<std::int64_t> num_alloc_retries;
  std::optional<std::int64_t> oom_events;  ///< `oom` entries in the trace, retried ones included
  /// What the process could use of the device, bytes (TraceHeader::usable_bytes_of: the total, or
  /// a recorded cap below it; summary --json "capacity_bytes"); unset when unknown.
  std::optional<std::uint64_t> capacity_bytes;
  /// Largest free block of the cache, bytes: at the peak of allocated memory (unset when the
  /// model did not capture that state) and after the last event.
  std::optional<std::uint64_t> largest_free_block_at_peak_bytes;
  std::optional<std::uint64_t> largest_free_block_at_end_bytes;
  /// "" for a complete history; "late" or "none" when memory existed before the first event
  /// (summary --json "history"): the peaks are then lower bounds.
  std::string history;

  bool operator==(const DeviceFigures&) const = default;
};

/// One trace (one process).
struct TraceFigures {
  /// The trace's path as the model or the summary names it; unset when a summary document has
  /// no "path" (callers then name the input file).
  std::optional<std::string> path;
  std::string rank;                    ///< the launcher's rank, "" when the trace names none
  bool incomplete = false;             ///< the trace ended early
  std::string incomplete_reason;       ///< why, when incomplete ("cut last line" if not said)
  std::uint64_t lost_events = 0;       ///< TraceModel::lost_events
  std::vector<DeviceFigures> devices;  ///< in the order of the model (sorted) or the document

  bool operator==(const TraceFigures&) const = default;
};

/// The figures of each model, as `vramtrace summary --json` would state them.
std::vector<TraceFigures> figures_from_models(const std::vector<TraceModel>& models);

/// Reads the figures of a `vramtrace summary --json` document ({"traces": [{"path", "rank",
/// "incomplete", "incomplete_reason", "devices": [{"device", "stats": {PyTorch flat names},
/// "ooms", "peak": {"largest_free_block_bytes"}, "end": {...}}]}]}). Integer figures of another
/// type read as unset, except those `check` budgets (reserved_bytes.all.peak,
/// allocated_bytes.all.peak, num_ooms, num_alloc_retries: null = not recorded). Throws
/// BudgetError naming `what` on a document of another shape or such a budgeted figure that is
/// not an integer; nlohmann::json::type_error for a "path" that is not a string.
std::vector<TraceFigures> figures_from_summary_json(const nlohmann::json& summary, const std::string& what);

}  // namespace vramtrace
