// Reading vramtrace's own JSON Lines trace (docs/trace-format.md), with everything the format
// holds beyond the common TraceReader interface: header details, the trailer, and per record the
// block bytes, thread, entry point and OOM snapshot. (Mark names, the reason a trace is
// incomplete and skipped NUL bytes are in TraceReader, for every format.)
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "vramtrace/snapshot.h"
#include "vramtrace/trace/reader.h"

namespace vramtrace {

/// The header line, field for field (schema.def lists them; docs/trace-format.md, "header").
struct VramtraceHeaderDetails {
  std::string format;   ///< "vramtrace"
  std::string version;  ///< "1.2"
  std::string tool_version;
  std::int64_t pid = 0;
  std::int64_t ppid = 0;
  std::string host;
  std::string rank;
  std::string local_rank;                           ///< "" when absent (traces before it was added, or no launcher)
  std::optional<std::string> cuda_visible_devices;  ///< absent when not set
  std::vector<std::string> command_line;
  std::int64_t start_unix_ns = 0;
  std::string clock;  ///< "CLOCK_MONOTONIC"
  std::int64_t origin_monotonic_ns = 0;
  int cuda_driver_version = 0;
  int cuda_runtime_version = 0;
  struct Device {
    std::int32_t id = 0;
    std::string name;
    std::uint64_t total_bytes = 0;
    std::string uuid;
    /// Format 1.2: the driver's free and total memory when the shim first met a context of the
    /// device, and what the shim held there then (bytes; 0 = not recorded).
    std::uint64_t context_free_bytes = 0;
    std::uint64_t context_total_bytes = 0;
    std::uint64_t context_held_bytes = 0;
  };
  std::vector<Device> devices;
  std::string allocator_settings;
  std::vector<std::pair<std::string, std::string>> settings;
  std::vector<std::string> entry_points;
  // The writer's own settings (the header's "trace" object).
  std::uint64_t buffer_events = 0;
  std::string on_full;  ///< "wait" or "drop"
  std::uint32_t flush_interval_ms = 0;
  std::string compression;  ///< "none" or "zstd"
};

/// The trailer line. `present` is false until the reader has reached it (or when it is missing).
struct VramtraceTrailer {
  bool present = false;
  std::int64_t time_ns = 0;
  std::uint64_t events = 0;
  std::uint64_t dropped = 0;
  std::vector<std::pair<std::string, std::uint64_t>> counts;  ///< action name -> event lines
  /// Final statistics (PyTorch's flat names) per device.
  std::vector<std::pair<std::int32_t, std::vector<std::pair<std::string, std::int64_t>>>> device_stats;
};

/// A TraceReader for vramtrace traces. Records' time_ns are Unix-epoch nanoseconds
/// (header start_unix_ns + the event's "t"), as PyTorch traces' time_us * 1000.
///
/// header().recorded_stats holds the trailer's statistics of the lowest device listed there:
/// for an uncompressed file they are read from the file's end when it is opened; for a compressed
/// one they appear once next() has returned false. Not thread-safe.
class VramtraceTraceReader : public TraceReader {
 public:
  virtual const VramtraceHeaderDetails& details() const = 0;
  /// The trailer; complete once next() has returned false (or at open for uncompressed files).
  virtual const VramtraceTrailer& trailer() const = 0;
  /// Of the record last returned by next(): block bytes ("b"; equal to size when absent).
  virtual std::uint64_t block_bytes() const = 0;
  /// Of the record last returned by next(): kernel thread id (0 = unknown).
  virtual std::uint32_t thread_id() const = 0;
  /// Of the record last returned by next(): entry point id (index into details().entry_points).
  virtual std::uint32_t entry_point() const = 0;
  /// Of the record last returned by next(), for segment_*: 0 for the caching allocator's own
  /// segments, else the kind of memory that bypassed it (MemoryKind in vramtrace/event.h, "k":
  /// 1 device, 2 managed, 3 pitched, 4 pool, 5 pinned host, 6 array, 7 virtual memory;
  /// docs/trace-format.md). Compare with is_memory_kind.
  virtual std::uint32_t memory_kind() const = 0;
  /// Of the record last returned by next(), when an oom with a snapshot: the allocator's state
  /// at the failure; nullptr otherwise.
  virtual const Snapshot* oom_snapshot() const = 0;
  /// Lines skipped because their kind is unknown (written by a newer minor version).
  virtual std::uint64_t skipped_records() const = 0;
};

/// Opens a vramtrace trace (plain, .gz or .zst by magic bytes). Throws TraceError naming the file
/// (and line) when it cannot be opened, is not a vramtrace trace, or has a newer major version.
std::unique_ptr<VramtraceTraceReader> open_vramtrace_trace_details(const std::string& path);

}  // namespace vramtrace
