// Encoding of vramtrace's JSON Lines trace. One JSON object per line, each with "a", its kind:
//
//   {"a":"header",...}     the first line, once
//   {"a":"device",...}     a device the process first reached after the header (1.1)
//   {"a":"module",...}     a loaded module, {"a":"string",...} a string of Python frames, and
//   {"a":"stack",...}      a call stack (1.2): each written once, before the first line that needs it
//   {"a":"<action>",...}   one line per allocator event (alloc, free_requested, ..., oom, mark)
//   {"a":"trailer",...}    the last line
//
// The fields of every record, their order and when each is left out are listed once, in
// schema.def; these encoders and the reader (vramtrace_reader.cpp) are expanded from that list,
// and docs/trace-format.md says what the fields mean. Numbers are plain decimal integers, so that
// every JSON reader can take them (addresses stay below 2^53 on every CUDA platform we know;
// readers must still parse them as 64-bit integers).
//
// These functions are pure: no I/O, no global state. Only the writer's background thread and
// tests call them.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "vramtrace/event.h"
#include "vramtrace/snapshot.h"
#include "vramtrace/trace/modules.h"

namespace vramtrace::trace {

inline constexpr std::string_view kFormatName = "vramtrace";
/// Major.minor. A reader refuses a newer major version; a newer minor only adds fields or record
/// kinds, which older readers skip.
inline constexpr std::string_view kFormatVersion = "1.2";
inline constexpr int kFormatMajor = 1;
/// The clock of the header's origin_monotonic_ns and of every event's "t".
inline constexpr std::string_view kClockName = "CLOCK_MONOTONIC";

/// One CUDA device as the header lists it.
struct DeviceInfo {
  std::int32_t id = 0;            ///< CUDA ordinal
  std::string name;               ///< cudaDeviceProp::name, e.g. "NVIDIA H200"
  std::uint64_t total_bytes = 0;  ///< total device memory (cudaMemGetInfo total)
  std::string uuid;               ///< "GPU-..." when known, else empty
  /// The driver's cuMemGetInfo (free, total; bytes, not capped) when the shim first met a context
  /// of this device, before that context's first allocation, and the device memory the shim held
  /// on the device at that moment (its segments and the memory it forwards). 0 = not measured.
  /// total - free - held is the device memory of the CUDA context and of everyone else then.
  std::uint64_t context_free_bytes = 0;
  std::uint64_t context_total_bytes = 0;
  std::uint64_t context_held_bytes = 0;
};

/// What the shim knows about the process's CUDA setup; the writer adds pid, host, command line
/// and clocks itself.
struct HeaderInfo {
  std::string tool_version;      ///< vramtrace version, e.g. "0.1.0"
  int cuda_driver_version = 0;   ///< cudaDriverGetVersion, e.g. 13000; 0 = unknown
  int cuda_runtime_version = 0;  ///< cudaRuntimeGetVersion of the program; 0 = unknown
  std::vector<DeviceInfo> devices;
  /// Effective allocator settings in PYTORCH_CUDA_ALLOC_CONF syntax ("" = defaults).
  std::string allocator_settings;
  /// Other effective settings, written as string values under "settings" (e.g. {"reuse","lazy_sync"}).
  std::vector<std::pair<std::string, std::string>> settings;
  /// Names of the entry point ids used in events' "e" (index = id; index 0 = not from the shim).
  std::vector<std::string> entry_points;
};

/// A `string` record (1.2): a file or function name of Python frames, by id.
struct StringRecord {
  std::uint32_t id = 0;
  std::string text;
};

/// One frame of a `stack` record: native (a return address and the id of the module it lies in,
/// 0 = none known) or Python (string ids of its file and function, and its line, 0 = unknown).
struct FrameRecord {
  bool python = false;
  std::uint32_t module = 0;
  std::uint64_t pc = 0;
  std::uint32_t file = 0;
  std::uint32_t line = 0;
  std::uint32_t name = 0;
};

/// A `stack` record (1.2): the frames of one call stack, innermost first.
struct StackRecord {
  std::uint32_t id = 0;
  std::vector<FrameRecord> frames;
};

/// Per-device final statistics for the trailer: PyTorch's flat names (flatten_stats), indexed by
/// device ordinal; an empty vector for a device leaves it out.
using FlatStats = std::vector<std::pair<std::string, std::int64_t>>;

/// Everything the header line holds.
struct HeaderFields {
  HeaderInfo info;
  std::int64_t pid = 0;
  std::int64_t ppid = 0;
  std::string host;
  std::string rank;        ///< from the launcher variables, "" if none
  std::string local_rank;  ///< rank within the host (LOCAL_RANK, ...), "" if none
  /// CUDA_VISIBLE_DEVICES as the process saw it at the start; written only when set, so that a
  /// report can tell which physical GPU each device ordinal names.
  std::optional<std::string> cuda_visible_devices;
  std::vector<std::string> command_line;  ///< argv of the process (/proc/self/cmdline)
  std::int64_t start_unix_ns = 0;         ///< CLOCK_REALTIME at the origin
  std::int64_t origin_monotonic_ns = 0;   ///< CLOCK_MONOTONIC at the origin: events' "t" counts from here
  // The writer's own settings, echoed so that a reader knows what "dropped" can mean.
  std::uint64_t buffer_events = 0;
  bool drop_when_full = false;
  std::uint32_t flush_interval_ms = 0;
  std::string compression;  ///< "none" or "zstd"
};

/// Everything the trailer line holds.
struct TrailerFields {
  std::int64_t time_ns = 0;             ///< relative to the origin, as events' "t"
  std::uint64_t events = 0;             ///< event lines written (header and trailer excluded)
  std::uint64_t dropped = 0;            ///< events lost because the buffer was full (drop mode)
  std::uint64_t counts[16] = {};        ///< event lines per Action (index = Action value)
  std::vector<FlatStats> device_stats;  ///< index = device ordinal
};

/// A growable output buffer that hands out raw space for encoders (no per-field reallocation).
class TextBuffer {
 public:
  TextBuffer() = default;
  explicit TextBuffer(std::size_t capacity) { reserve(capacity); }
  /// Returns a pointer to at least `n` writable bytes at the end; commit what was written with
  /// advance(). Throws std::bad_alloc.
  char* grow(std::size_t n) {
    if (size_ + n > capacity_) reserve(std::max(capacity_ * 2, size_ + n));
    return data_.get() + size_;
  }
  void advance(std::size_t n) noexcept { size_ += n; }
  void append(std::string_view s) {
    char* p = grow(s.size());
    if (!s.empty()) __builtin_memcpy(p, s.data(), s.size());
    size_ += s.size();
  }
  void push_back(char c) {
    *grow(1) = c;
    ++size_;
  }
  const char* data() const noexcept { return data_.get(); }
  std::size_t size() const noexcept { return size_; }
  bool empty() const noexcept { return size_ == 0; }
  void clear() noexcept { size_ = 0; }
  std::string_view view() const noexcept { return {data_.get(), size_}; }
  void reserve(std::size_t capacity);

 private:
  std::unique_ptr<char[]> data_;
  std::size_t size_ = 0;
  std::size_t capacity_ = 0;
};

/// Longest line encode_event can produce for an event that is not a mark or an oom.
inline constexpr std::size_t kMaxPlainEventLine = 256;

/// Appends one event line (with its '\n'). `origin_ns` is the header's origin_monotonic_ns.
/// For a mark, `text` is its name; for an oom, `text` is the snapshot object produced by
/// encode_snapshot (may be empty, then no "snapshot" key); ignored otherwise.
void encode_event(TextBuffer& out, const Event& e, std::int64_t origin_ns, std::string_view text = {});

/// Appends the allocator state as PyTorch's snapshot shape: {"segments":[{...,"blocks":[...]}]}
/// with PyTorch's key names (address, total_size, allocated_size, active_size, requested_size,
/// stream, segment_type, is_expandable, blocks[address,size,requested_size,state]). No newline.
void encode_snapshot(TextBuffer& out, const Snapshot& s);

/// Appends the header line (with its '\n').
void encode_header(TextBuffer& out, const HeaderFields& h);

/// Appends a `device` record (with its '\n'): a device the process reached after its header
/// was written; the same fields as an entry of the header's "devices".
void encode_device(TextBuffer& out, const DeviceInfo& d);

/// Appends a `module`, `string` or `stack` record (with its '\n'; format 1.2).
void encode_module(TextBuffer& out, const ModuleInfo& m);
void encode_string(TextBuffer& out, const StringRecord& s);
void encode_stack(TextBuffer& out, const StackRecord& s);

/// Appends the trailer line (with its '\n').
void encode_trailer(TextBuffer& out, const TrailerFields& t);

/// Appends `s` as a JSON string (quotes included). Control characters and '"' '\\' are escaped;
/// valid UTF-8 passes through; bytes that are not valid UTF-8 are written as \u00XX (Latin-1), so
/// that the line stays valid JSON whatever the program's arguments or mark names hold.
void append_json_string(TextBuffer& out, std::string_view s);

}  // namespace vramtrace::trace
