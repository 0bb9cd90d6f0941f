// The memory ledger of a PyTorch process (model/ledger.h) as the reports show it: a text block
// per moment for `summary` and `oom`, and JSON for `summary --json`, `oom --json` and the HTML
// report's data. The key names are stable and documented in docs/reports.md, "The memory ledger".
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "model/ledger.h"

namespace vramtrace {

/// "the end", "the peak", "OOM 2" (1-based), for titles.
std::string ledger_moment_name(const LedgerAt& at);

/// Which levels the ledger read, for the reports' level lines: "tensor level (PyTorch's history
/// and its sidecar) and device level (the shim's trace t.jsonl)", or with "no device level".
std::string ledger_levels(const MemoryLedger& ledger);

/// One moment as text: `title` on its own line, then the rows of Note [the ledger adds up] (each
/// "unknown" where it is, with what is known instead), the kinds of memory outside PyTorch's
/// allocator and, when the shim's trace records stacks, their allocation sites, then the
/// moment's notes. Every line starts with `indent`. Ends with a newline. Deterministic.
std::string render_ledger_text(const MemoryLedger& ledger, const LedgerAt& at, const std::string& title,
                               const std::string& indent = "  ");

/// One moment as JSON: {"moment", "oom", "in_history", "request_bytes" (these three for moment
/// oom), "time_ns",
/// "tensor_source", "allocated_bytes", "active_bytes", "requested_bytes", "reserved_bytes",
/// "cache_bytes", "outside_bytes", "outside_by_kind": {"device", "pitched", "pool",
/// "virtual_memory"}, "rounding_bytes", "context_bytes", "rest_bytes", "not_pytorch_bytes",
/// "used_bytes", "free_bytes", "total_bytes", "free_source", "managed_bytes", "arrays",
/// "outside_sites" (sites_json, when the shim's trace records stacks), "notes"}. Unknown figures
/// are null.
nlohmann::json ledger_at_json(const MemoryLedger& ledger, const LedgerAt& at);

/// A trace's "ledger" object: {"levels", "sidecar", "device_trace", "notes", "devices":
/// [{"device", "moments": [ledger_at_json...]}]}; null when the trace has no ledger.
nlohmann::json ledger_json(const TraceModel& m);

}  // namespace vramtrace
