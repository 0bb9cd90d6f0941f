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
  /// Native frames of vramtrace traces, which record return addresses, not names: the module the
  /// address lay in as the traced process named it (a path), its GNU build-id in hex ("" when it
  /// has none), and the address's link-time address in it (the return address minus the module's
  /// load bias: subtract 1 to look up the call instruction). `name` is then "libfoo.so+0x1234"
  /// until a symbolizer replaces it. All empty (and 0) for Python frames, for PyTorch's frames
  /// (already named), and for a return address in no known module ("0x7f..." in `name`).
  std::string_view module{};
  std::string_view build_id{};
  std::uint64_t address = 0;
  bool operator==(const Frame& o) const noexcept {
    return line == o.line && address == o.address && filename == o.filename && name == o.name && module == o.module &&
           build_id == o.build_id;
  }
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
      h = (h ^ std::hash<std::string_view>{}(f.module)) * 0x100000001b3ull;
      h = (h ^ f.address) * 0x100000001b3ull;
    }
    auto [first, last] = by_hash_.equal_range(h);
    for (auto it = first; it != last; ++it)
      if (stacks_[it->second - 1] == frames) return it->second;
    std::vector<Frame> own;
    own.reserve(frames.size());
    for (const auto& f : frames)
      own.push_back({string(f.filename), f.line, string(f.name), string(f.module), string(f.build_id), f.address});
    stacks_.push_back(std::move(own));
    const auto id = static_cast<std::uint32_t>(stacks_.size());
    by_hash_.emplace(h, id);
    return id;
  }
  /// Replaces frame `index` of stack `id` with `f` (its strings copied into the table): a name
  /// found after the stack was read (a native frame's symbol). Ids do not change, and the stack
  /// is not merged with another that now has the same frames. No-op for an id or index the table
  /// does not have. Pointers from get() stay valid and see the new frame.
  void replace_frame(std::uint32_t id, std::size_t index, const Frame& f) {
    if (id == 0 || id > stacks_.size() || index >= stacks_[id - 1].size()) return;
    stacks_[id - 1][index] = {string(f.filename), f.line,   string(f.name), string(f.module),
                              string(f.build_id), f.address};
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

/// Names the native frames of a trace's stacks (Frame::module, build_id and address): the
/// reporter's symbolizer (reporter/readers/native_names.h), set on a reader with
/// TraceReader::set_frame_namer; trace/ itself names no native frame (docs/design.md, "Call
/// stacks"). Not thread-safe.
class FrameNamer {
 public:
  struct Name {
    std::string function;  ///< demangled; may be empty when only a source line is known
    std::string file;      ///< source file; empty when unknown
    std::uint32_t line = 0;
  };
  virtual ~FrameNamer() = default;
  /// The name of the code at `link_address` of `module` (a return address's link-time address:
  /// the call is the instruction before it), `build_id` in hex or "". nullopt when unknown.
  virtual std::optional<Name> name(std::string_view module, std::string_view build_id, std::uint64_t link_address) = 0;
  /// About the modules asked for so far that could not be used, or only in part, for a
  /// report's notes. Default: none.
  virtual std::vector<std::string> notes() const { return {}; }
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
  /// Kernel thread id of the call that made the record (vramtrace traces' "th"); 0 = unknown
  /// (PyTorch's traces do not record it). Failed attempts of one request are told apart from
  /// another thread's by it (Note [one OOM per failed request], reporter/model/oom_count.h).
  std::uint32_t thread_id = 0;
  /// The hooked function the program called (vramtrace traces' "e": an index into the header's
  /// entry_points); 0 = unknown or not from a hook (PyTorch's traces). A retry is the same call
  /// again (Note [one OOM per failed request]).
  std::uint32_t entry_point = 0;
};

/// An OOM a trace records apart from its `oom` entries: the error message PyTorch raised, in a
/// history's header (torchtrace "oom"), or one that PyTorch's OOM observer saw (the tensor-level
/// sidecar's "ooms", docs/tensor-level.md). Every figure may be unknown. A history may hold no
/// `oom` entry for it (its ring ended before it, or the snapshot was taken before the failure):
/// the reports then count the OOM and say what is known of it (Note [one OOM per failed request]).
struct RecordedOom {
  std::int32_t device = 0;
  std::int64_t time_ns = 0;  ///< Unix-epoch nanoseconds, as TraceRecord::time_ns; 0 = unknown
  /// The device allocation that failed (the observer's alloc_size: the segment size asked for).
  std::optional<std::uint64_t> alloc_bytes;
  /// What the process was allowed on the device (the observer's third argument: the device's
  /// total, or the cap of set_per_process_memory_fraction).
  std::optional<std::uint64_t> allowed_bytes;
  std::optional<std::uint64_t> device_free_bytes;  ///< cudaMemGetInfo's free at the failure
  std::string message;                             ///< the error's text; "" = not recorded
  /// PyTorch's flat memory_stats() at the failure (num_ooms, num_alloc_retries, ...); empty when
  /// not recorded.
  std::vector<std::pair<std::string, std::int64_t>> stats;
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
  /// OOMs the trace records beyond its `oom` entries (RecordedOom), oldest first.
  std::vector<RecordedOom> recorded_ooms;

  /// Total memory of `device` in bytes: its own entry, else device_total_bytes when the trace
  /// does not name devices (PyTorch's traces describe one device); 0 when unknown. O(devices).
  std::uint64_t total_bytes_of(std::int32_t device) const noexcept {
    if (device_totals.empty()) return device_total_bytes;
    for (const auto& [d, b] : device_totals)
      if (d == device) return b;
    return 0;
  }
  /// A cap on the memory the program could use on a device, below the device's own total.
  struct Cap {
    std::int32_t device = -1;  ///< CUDA ordinal; -1 = every device without a cap of its own
    std::uint64_t bytes = 0;
    /// What set it, in words for a report: "the cap of vramtrace run --limit" (the shim's `limit`
    /// setting, which counts every device allocation of the process through the shim) or
    /// "PyTorch's memory fraction" (set_per_process_memory_fraction, which caps the reserved
    /// memory of PyTorch's allocator).
    std::string what;
    /// PyTorch's set_per_process_memory_fraction: PyTorch's allocator knows this cap (its
    /// garbage_collection_threshold acts against it). False for a cap the program does not see
    /// as such (the shim's `limit`, which makes the device look smaller).
    bool pytorch_fraction = false;
  };
  /// The caps the trace records: a vramtrace header's `limit` setting (its devices' totals are
  /// already the capped ones), a torchtrace header's "cap_gib" (PyTorch's memory fraction, GiB).
  /// Empty when none is recorded. Reports take cap_of.
  std::vector<Cap> caps;
  /// The smallest cap that applies to `device` (its own entries and those for every device);
  /// null when none does. O(caps).
  const Cap* cap_of(std::int32_t device) const noexcept {
    const Cap* best = nullptr;
    for (const Cap& c : caps) {
      bool own = c.device == device;
      bool any = c.device == -1;
      if (any) {
        bool shadowed = false;  // an ordinal with an entry of the same kind is not covered by `*`
        for (const Cap& o : caps) shadowed = shadowed || (o.device == device && o.what == c.what);
        if (shadowed) continue;
      }
      if ((own || any) && (!best || c.bytes < best->bytes)) best = &c;
    }
    return best;
  }
  /// What the process could use of `device`, in bytes: total_bytes_of, or the smallest cap
  /// that applies to it (cap_of) when that is lower or the total is unknown; 0 when neither is
  /// known. O(devices + caps).
  std::uint64_t usable_bytes_of(std::int32_t device) const noexcept {
    const std::uint64_t total = total_bytes_of(device);
    const Cap* cap = cap_of(device);
    if (cap && cap->bytes != 0 && (total == 0 || cap->bytes < total)) return cap->bytes;
    return total;
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
  /// The recording tool's own settings as the trace states them (a vramtrace header's
  /// "settings" object: reuse, stacks, limit, pytorch_no_cuda_memory_caching, ...), in the
  /// order written; empty for PyTorch's formats.
  std::vector<std::pair<std::string, std::string>> tool_settings;
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
  /// True when the input ended early, or says that the run it records did not end (a cut last
  /// line, a missing trailer; a snapshot whose sidecar's last write is not the exit write): the
  /// reports then say the run did not finish (Note [a run that did not finish] in
  /// reporter/model/unfinished_run.h). Known once next() returned false.
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
  /// Events the writer recorded that the file does not hold (dropped when its buffer was full,
  /// or lines lost from the file: fewer than its trailer counts, in all or for an action), known
  /// once next() returned false. Default: 0, for formats that cannot tell.
  virtual std::uint64_t lost_events() const { return 0; }
  /// Input bytes consumed so far and the input's size (compressed, as on disk; total 0 when
  /// unknown), for progress lines.
  virtual std::uint64_t bytes_read() const { return 0; }
  virtual std::uint64_t bytes_total() const { return 0; }
  /// The table behind TraceRecord::stack_id and BlockSnapshot::stack_id: shared so that a model
  /// can keep the frames after the reader is gone. Null for formats without stacks (the default).
  /// It grows while next() runs; a stack, once given, never changes.
  virtual std::shared_ptr<const StackTable> stacks() const { return nullptr; }
  /// Things a report should mention that the records themselves cannot say (a vramtrace trace
  /// whose events name a call stack it never defined, ...), one sentence each; complete once
  /// next() returned false. Default: none.
  virtual std::vector<std::string> notes() const { return {}; }
  /// Names the native frames of stacks() with `namer` (each frame once, when stacks() or notes()
  /// is next called), and adds its notes to notes(). Default: nothing, for formats whose frames
  /// come named (PyTorch's) or that have none.
  virtual void set_frame_namer(std::shared_ptr<FrameNamer> namer) {}
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
