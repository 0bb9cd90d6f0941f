// The reader interface every trace format implements (vramtrace's own here; PyTorch's allocator
// history and snapshot pickles in reporter/readers), and the opener of vramtrace's own format.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "vramtrace/event.h"
#include "vramtrace/snapshot.h"

namespace vramtrace {

/// Unusable input: a message that names the file and the line (text formats) or byte offset
/// (binary formats). Commands print it and exit with code 2.
class TraceError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// One frame of a recorded call stack, as PyTorch's snapshots name it. The strings are views into
/// the StackTable that holds the frame; they stay valid as long as that table lives.
struct Frame {
  std::string_view filename;  ///< as recorded: a path (often relative), "??" or "" for native code, "<string>", ...
  std::uint32_t line = 0;     ///< 1-based line; 0 when unknown (native frames)
  std::string_view name;      ///< function name (C++ frames: the demangled signature)
  bool operator==(const Frame& o) const noexcept { return line == o.line && filename == o.filename && name == o.name; }
};

/// The distinct call stacks of a trace, each stored once (interned by content), with their
/// strings stored once too, so that memory grows with the unique stacks and strings, not with
/// the trace's entries: a training loop repeats a few hundred stacks millions of times.
/// Ids are dense from 1 in order of first appearance (0 means "no stack"), so that two reads of
/// the same file give the same ids. Not thread-safe while interning; concurrent const use is.
class StackTable {
 public:
  /// The id of the stack `frames` (innermost first), adding it when new; 0 for an empty stack.
  /// The frames' strings are copied into the table. O(frames) expected.
  std::uint32_t intern(const std::vector<Frame>& frames) {
    if (frames.empty()) return 0;
    std::size_t h = 0xcbf29ce484222325ull;
    for (const auto& f : frames) {
      h = (h ^ std::hash<std::string_view>{}(f.filename)) * 0x100000001b3ull;
      h = (h ^ f.line) * 0x100000001b3ull;
      h = (h ^ std::hash<std::string_view>{}(f.name)) * 0x100000001b3ull;
    }
    auto [first, last] = by_hash_.equal_range(h);
    for (auto it = first; it != last; ++it)
      if (stacks_[it->second - 1] == frames) return it->second;
    std::vector<Frame> own;
    own.reserve(frames.size());
    for (const auto& f : frames) own.push_back({string(f.filename), f.line, string(f.name)});
    stacks_.push_back(std::move(own));
    const auto id = static_cast<std::uint32_t>(stacks_.size());
    by_hash_.emplace(h, id);
    return id;
  }
  /// The frames of stack `id`, innermost first; nullptr for 0 or an id the table never gave.
  const std::vector<Frame>* get(std::uint32_t id) const noexcept {
    return id == 0 || id > stacks_.size() ? nullptr : &stacks_[id - 1];
  }
  /// Number of distinct stacks (the largest id).
  std::size_t size() const noexcept { return stacks_.size(); }

 private:
  std::string_view string(std::string_view s) { return *strings_.emplace(s).first; }

  std::unordered_set<std::string> strings_;  // nodes never move: views into them stay valid
  std::deque<std::vector<Frame>> stacks_;    // by id - 1; a deque so that get()'s pointers stay valid
  std::unordered_multimap<std::size_t, std::uint32_t> by_hash_;
};

/// One allocator action read from a trace, in PyTorch's terms.
struct TraceRecord {
  Action action = Action::alloc;
  DevicePtr addr = 0;
  std::uint64_t size = 0;  ///< requested bytes for alloc/free_*; segment or range bytes for segment_*
  std::uint64_t stream = 0;
  std::int64_t time_ns = 0;  ///< as recorded (PyTorch: time_us * 1000, Unix epoch); 0 if absent
  std::int32_t device = 0;
  std::uint64_t device_free = 0;  ///< oom only
  /// alloc and free_*: the block bytes handed out, when the trace records them (vramtrace traces:
  /// "b", or "r" when "b" is absent); 0 = not recorded (PyTorch's traces): the model derives
  /// it with the allocator's rounding rules.
  std::uint64_t block_size = 0;
  /// oom only: the allocator's num_alloc_retries at the failure (this OOM's own retry included);
  /// -1 when the trace does not say (PyTorch's traces, vramtrace format 1.0).
  std::int64_t oom_retries = -1;
  /// For segment_* records of vramtrace traces: 0 when the segment is the caching allocator's
  /// own, otherwise the kind of memory the shim passed through untouched (MemoryKind in
  /// vramtrace/event.h, "k" in docs/trace-format.md: 1 device, 2 managed, 3 pitched, 4 pool,
  /// 5 pinned host, 6 array, 7 VMM; compare with is_memory_kind). Passed-through memory is outside the allocator:
  /// replay never drives the allocator with it, and pinned host memory (5) is not device memory. Always 0 for PyTorch's
  /// traces.
  std::uint8_t memory_kind = 0;
  /// The call stack recorded with the action (PyTorch's snapshots: the entry's `frames`), as an
  /// id of the reader's stacks() table; 0 = none recorded (other formats, entries without frames,
  /// malformed frames).
  std::uint32_t stack_id = 0;
};

/// What a trace says about itself before its events.
struct TraceHeader {
  std::string path;
  std::string format;    ///< "torchtrace", "snapshot" or "vramtrace"
  std::string workload;  ///< free text (torchtrace header "workload", command line, ...)
  /// Allocator settings string in force (PYTORCH_CUDA_ALLOC_CONF). For snapshots it is known
  /// only once next() returned false (`allocator_settings` follows `device_traces` in the pickle).
  std::string settings;
  std::uint64_t device_total_bytes = 0;  ///< 0 when unknown; the lowest-numbered device's
  /// Total memory in bytes by CUDA ordinal, when the trace names its devices (vramtrace: the
  /// header's `devices` and later `device` records; the shim's totals are the capped ones; a
  /// snapshot: its sidecar's mem_get_info totals); empty otherwise. Use total_bytes_of.
  std::vector<std::pair<std::int32_t, std::uint64_t>> device_totals;

  /// Total memory of `device` in bytes: its own entry, else device_total_bytes when the trace
  /// does not name devices (PyTorch's traces describe one device); 0 when unknown. O(devices).
  std::uint64_t total_bytes_of(std::int32_t device) const noexcept {
    if (device_totals.empty()) return device_total_bytes;
    for (const auto& [d, b] : device_totals)
      if (d == device) return b;
    return 0;
  }
  /// The traced process, when the trace says (vramtrace traces, snapshots with their sidecar;
  /// PyTorch's traces do not): its pid (0 = unknown), host name, rank and rank within the host as
  /// the launcher set them ("" = none), and CUDA_VISIBLE_DEVICES (unset = not recorded or not
  /// set). Merged reports of several traces use them to name processes and to find each process's
  /// own device.
  std::int64_t pid = 0;
  std::string host;
  std::string rank;
  std::string local_rank;
  std::optional<std::string> cuda_visible_devices;
  /// PyTorch flat statistics the trace recorded at its end (torchtrace header "stats"), if any:
  /// for a vramtrace trace, those of its lowest-numbered device.
  std::vector<std::pair<std::string, std::int64_t>> recorded_stats;
  /// The same per device, when the trace records them per device (vramtrace's trailer, a
  /// snapshot's sidecar); empty otherwise. Reports compare each device with its own entry
  /// (recorded_stats_of).
  std::vector<std::pair<std::int32_t, std::vector<std::pair<std::string, std::int64_t>>>> recorded_device_stats;
  /// What the reader has to say about files that come with the trace (a snapshot's sidecar it
  /// could not use, and why), for the reports' notes. Empty for most traces.
  std::vector<std::string> notes;

  /// The recorded statistics of `device`: its own entry when the trace has per-device figures,
  /// else recorded_stats (PyTorch's traces describe one device). Null when the trace has figures
  /// per device but none for this one.
  const std::vector<std::pair<std::string, std::int64_t>>* recorded_stats_of(std::int32_t device) const noexcept {
    if (recorded_device_stats.empty()) return &recorded_stats;
    for (const auto& [d, stats] : recorded_device_stats)
      if (d == device) return &stats;
    return nullptr;
  }
};

/// A streaming reader: memory stays bounded whatever the trace's length.
class TraceReader {
 public:
  virtual ~TraceReader() = default;
  virtual const TraceHeader& header() const = 0;
  /// Reads the next record; false at the end. Throws TraceError on malformed input.
  virtual bool next(TraceRecord& out) = 0;
  /// Where the reader is, for messages ("line 1234", "offset 5678").
  virtual std::string position() const = 0;
  /// For snapshots: the segments recorded at the end of the trace (empty if none).
  virtual const Snapshot* final_state() const { return nullptr; }
  /// True when the input ended early (cut last line, missing trailer).
  virtual bool incomplete() const { return false; }
  /// Why incomplete() holds, in words for a report; empty when complete. Known once next()
  /// returned false. Default: "cut last line", all that a format without a trailer can tell;
  /// vramtrace's reader says more ("no trailer: ...").
  virtual std::string incomplete_reason() const { return incomplete() ? "cut last line" : std::string(); }
  /// Of the record last returned by next(), when a mark: its name. Default: empty, for formats
  /// whose marks have no name (PyTorch's traces have no marks). The reference stays valid until
  /// the next call of next().
  virtual const std::string& mark_name() const {
    static const std::string none;
    return none;
  }
  /// Input bytes skipped because they held only NUL bytes (file-system blocks never written
  /// after a crash), for a note in reports. Default: 0, for formats that never skip any.
  virtual std::uint64_t nul_bytes() const { return 0; }
  /// Input bytes consumed so far and the input's size (compressed, as on disk; total 0 when
  /// unknown), for progress lines.
  virtual std::uint64_t bytes_read() const { return 0; }
  virtual std::uint64_t bytes_total() const { return 0; }
  /// The table behind TraceRecord::stack_id and BlockSnapshot::stack_id: shared so that a model
  /// can keep the frames after the reader is gone. Null for formats without stacks (the default).
  /// It grows while next() runs; a stack, once given, never changes.
  virtual std::shared_ptr<const StackTable> stacks() const { return nullptr; }
  /// The frames of stack `id`, innermost first; nullptr for 0, unknown ids, or a format without
  /// stacks. The pointer stays valid while the reader (or a holder of stacks()) lives.
  const std::vector<Frame>* stack(std::uint32_t id) const {
    auto t = stacks();
    return t ? t->get(id) : nullptr;
  }
};

/// vramtrace's own JSON Lines format (docs/trace-format.md); open_trace dispatches here when the
/// first line is a header with "format": "vramtrace". Throws TraceError.
std::unique_ptr<TraceReader> open_vramtrace_trace(const std::string& path);

}  // namespace vramtrace
