// The built-in trace readers behind open_trace (open_trace.h; the TraceReader interface is
// vramtrace/trace/reader.h).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "readers/open_trace.h"

namespace vramtrace {

/// PyTorch's time stamps (time_us, microseconds) as TraceRecord::time_ns, saturating at the
/// int64 range: a time stamp out of range is not an error. Pure.
constexpr std::int64_t us_to_ns(std::int64_t us) noexcept {
  if (us > INT64_MAX / 1000) return INT64_MAX;
  if (us < INT64_MIN / 1000) return INT64_MIN;
  return us * 1000;
}

/// PyTorch's allocator history as JSON lines, optionally gzip/zstd compressed: an optional
/// header line {"kind": "header", "workload", "conf", "stats", "total", "cap_gib", "oom", ...}
/// then one entry per line {"action", "addr", "size", "stream", "time_us"} (oom entries:
/// "device_free" instead of "addr"). A header's "oom" is the message of the OutOfMemoryError the
/// run died of (TraceHeader::recorded_ooms) and "cap_gib" the memory fraction's cap in GiB
/// (TraceHeader::caps); null for neither. Streams with bounded memory. Throws TraceError
/// (file and line) on malformed input.
std::unique_ptr<TraceReader> open_torch_trace(const std::string& path);

/// A PyTorch snapshot pickle (torch.cuda.memory._dump_snapshot, protocols 2 to 5, optionally
/// gzip/zstd compressed), read with our own pickle reader that never executes anything. Streams
/// `device_traces` entries with bounded memory. Throws TraceError (file and byte offset).
std::unique_ptr<TraceReader> open_snapshot_trace(const std::string& path);

}  // namespace vramtrace
