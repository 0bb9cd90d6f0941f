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

/// The same table for a device of a trace model, with its OOMs and retries as every command
/// counts them (DeviceModel::oom_count, Note [one OOM per failed request]); retries that the
/// trace does not record read "unknown" where PyTorch prints a number. With the `level` of a trace
/// of a framework allocator's segments, the title says so and its first row is "Held in segments".
std::string memory_summary_table(const DeviceModel& d, bool abbreviated = false,
                                 const AllocationLevelFinding* level = nullptr);

/// For a trace of a framework allocator's segments (Note [the level of a trace]): one paragraph
/// saying whose segments the table's rows are and how to see the tensors; empty otherwise.
std::string allocation_level_text(const TraceModel& m);

/// The trace's level for --json: {"allocations": "requests" | "allocator_segments", "allocator"
/// (string or null), "evidence"}.
nlohmann::json allocation_level_json(const TraceModel& m);

/// One line for a device's OOMs and retries (Note [one OOM per failed request]), e.g. "OOMs 1,
/// cudaMalloc retries 3 (4 failed device allocations: ...)". No newline. Deterministic.
std::string oom_count_text(const OomCount& c);

/// The count as JSON: {"ooms", "num_alloc_retries" (null = unknown), "retries_source",
/// "oom_entries", "survived", "repeated", "without_entry": [{"source", "message", "alloc_bytes",
/// "allowed_bytes", "device_free_bytes", "time_ns"}]} (figures absent when unknown).
nlohmann::json oom_count_json(const OomCount& c);

/// The whole text summary of several traces: first a line for each trace whose run did not finish
/// (Note [a run that did not finish] in model/unfinished_run.h), then one section per trace and
/// device. Ends with a newline. Deterministic (golden-tested). Equals join_summary_text of each
/// model's summary_text_of.
std::string render_summary_text(const std::vector<TraceModel>& models);

/// One trace's part of the text summary, rendered on its own so that a command can drop the
/// trace's model before reading the next: `blocks`, one per device (and per device that only
/// its memory ledger names), each ending with a newline; `empty`, the section of a trace with no
/// events (printed after every other trace's blocks), or ""; `unfinished`, the line that says the
/// trace's run did not finish (unfinished_run_line and a newline), or "". Thread-safe for
/// distinct models.
struct SummaryText {
  std::vector<std::string> blocks;
  std::string empty;
  std::string unfinished;
};
SummaryText summary_text_of(const TraceModel& m);
/// The text summary of traces given as their parts, in order: every trace's `unfinished` line
/// first (the first thing a reader sees), then `first_block` when not empty (the process x device
/// view of several traces), then the blocks with blank lines between them, the traces without
/// events last; "No events in the trace(s).\n" when there is nothing. Pure.
std::string join_summary_text(const std::vector<SummaryText>& traces, const std::string& first_block = "");

/// JSON: {"unfinished_runs": unfinished_runs_json, "traces": [{"path", "format", "workload", "settings", "incomplete",
/// "events", "notes", "devices": [{"device", "stats": {PyTorch flat names}, "duration_ns", "events", "peak": {...},
/// "end": {...}, "ooms": n (OOMs that reached the program), "oom_count": oom_count_json,
/// "recorded_check": [...]}]}]}; stats.num_ooms and stats.num_alloc_retries are the count's
/// (num_alloc_retries null when unknown).
nlohmann::json summary_json(const std::vector<TraceModel>& models);
/// The traces whose run did not finish (Note [a run that did not finish]), in order:
/// [{"path", "reason", "incomplete", "lost_events", "message" (unfinished_run_line)}]; empty
/// when every run finished. Pure.
nlohmann::json unfinished_runs_json(const std::vector<TraceModel>& models);
/// One element of summary_json's "traces". Thread-safe for distinct models.
nlohmann::json summary_trace_json(const TraceModel& m);

/// The fields that name a trace in every JSON document we write (summary, report): path,
/// format, workload, settings, incomplete, events, notes.
nlohmann::json trace_identity_json(const TraceModel& m);

/// "1.23 s", "45.6 ms", "789 us" for a duration in nanoseconds.
std::string format_duration(std::int64_t ns);

}  // namespace vramtrace
