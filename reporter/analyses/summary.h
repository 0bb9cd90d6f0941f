// `vramtrace summary`: per process (trace file) and device, the table of
// torch.cuda.memory_summary() followed by what only a trace can tell (state at the peak, biggest
// allocations, what was left at the end).
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "model/trace_model.h"

namespace vramtrace {

/// PyTorch's memory_summary() table for one device's statistics, byte for byte in PyTorch's
/// layout (torch/cuda/memory.py: 75 columns, sizes shown in the unit of the "all" row while it
/// stays >= 768 of that unit, counts in K/M above 750 000). `abbreviated` drops the per-pool rows.
std::string memory_summary_table(const DeviceStats& stats, int device, bool abbreviated = false);

/// The whole text summary of several traces (one section per trace and device). Ends with a
/// newline. Deterministic (golden-tested).
std::string render_summary_text(const std::vector<TraceModel>& models);

/// JSON: {"traces": [{"path", "format", "workload", "settings", "incomplete", "events", "notes",
/// "devices": [{"device", "stats": {PyTorch flat names}, "duration_ns", "events", "peak": {...},
/// "end": {...}, "ooms": n, "num_alloc_retries": n|null, "recorded_check": [...]}]}]}.
nlohmann::json summary_json(const std::vector<TraceModel>& models);

/// The fields that name a trace in every JSON document we write (summary, report): path,
/// format, workload, settings, incomplete, events, notes.
nlohmann::json trace_identity_json(const TraceModel& m);

/// "1.23 s", "45.6 ms", "789 us" for a duration in nanoseconds.
std::string format_duration(std::int64_t ns);

}  // namespace vramtrace
