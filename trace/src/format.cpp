// Encoders for the trace's lines; the layout is drawn in vramtrace/trace/format.h and specified in
// docs/trace-format.md.
#include "vramtrace/trace/format.h"

#include <cstring>
#include <type_traits>

namespace vramtrace::trace {

void TextBuffer::reserve(std::size_t capacity) {
  if (capacity <= capacity_) return;
  std::unique_ptr<char[]> bigger(new char[capacity]);
  if (size_ != 0) std::memcpy(bigger.get(), data_.get(), size_);
  data_ = std::move(bigger);
  capacity_ = capacity;
}

namespace {

// `{"a":"alloc"` etc., one per action, from the same list as the enum.
struct ActionPrefix {
  const char* text;
  std::size_t size;
};
#define VRAMTRACE_ACTION_PREFIX(name) {"{\"a\":\"" #name "\"", sizeof("{\"a\":\"" #name "\"") - 1},
constexpr ActionPrefix kActionPrefix[] = {VRAMTRACE_ACTIONS(VRAMTRACE_ACTION_PREFIX)};
#undef VRAMTRACE_ACTION_PREFIX
constexpr std::size_t kNumActions = sizeof(kActionPrefix) / sizeof(kActionPrefix[0]);

#define VRAMTRACE_ACTION_STRING(name) #name,
constexpr const char* kActionNames[] = {VRAMTRACE_ACTIONS(VRAMTRACE_ACTION_STRING)};
#undef VRAMTRACE_ACTION_STRING

inline char* put(char* p, const char* s, std::size_t n) noexcept {
  std::memcpy(p, s, n);
  return p + n;
}
template <std::size_t N>
inline char* put_lit(char* p, const char (&s)[N]) noexcept {
  std::memcpy(p, s, N - 1);
  return p + N - 1;
}
// Decimal integers without 64-bit divisions where possible: the value is cut into 8-digit
// pieces, each formatted with 32-bit arithmetic and a two-digit table. About twice as fast as
// std::to_chars here, and integers are a quarter of the writer thread's time.
constexpr char kDigitPairs[] =
    "00010203040506070809101112131415161718192021222324252627282930313233343536373839"
    "40414243444546474849505152535455565758596061626364656667686970717273747576777879"
    "8081828384858687888990919293949596979899";

inline char* put2(char* p, std::uint32_t v) noexcept {  // exactly two digits, v < 100
  std::memcpy(p, kDigitPairs + 2 * v, 2);
  return p + 2;
}
inline char* put4(char* p, std::uint32_t v) noexcept {  // exactly four digits, v < 10^4
  return put2(put2(p, v / 100), v % 100);
}
inline char* put8(char* p, std::uint32_t v) noexcept {  // exactly eight digits, v < 10^8
  return put4(put4(p, v / 10000), v % 10000);
}
inline char* put_upto4(char* p, std::uint32_t v) noexcept {  // no leading zeros, v < 10^4
  if (v < 10) {
    *p = static_cast<char>('0' + v);
    return p + 1;
  }
  if (v < 100) return put2(p, v);
  if (v < 1000) {
    *p = static_cast<char>('0' + v / 100);
    return put2(p + 1, v % 100);
  }
  return put4(p, v);
}
inline char* put_upto8(char* p, std::uint32_t v) noexcept {  // no leading zeros, v < 10^8
  if (v < 10000) return put_upto4(p, v);
  return put4(put_upto4(p, v / 10000), v % 10000);
}
inline char* put_u64(char* p, std::uint64_t v) noexcept {
  if (v < 100000000) return put_upto8(p, static_cast<std::uint32_t>(v));
  if (v < 10000000000000000ull) {
    return put8(put_upto8(p, static_cast<std::uint32_t>(v / 100000000)), static_cast<std::uint32_t>(v % 100000000));
  }
  const std::uint64_t low16 = v % 10000000000000000ull;
  p = put_upto4(p, static_cast<std::uint32_t>(v / 10000000000000000ull));  // at most 1844
  return put8(put8(p, static_cast<std::uint32_t>(low16 / 100000000)), static_cast<std::uint32_t>(low16 % 100000000));
}
inline char* put_int(char* p, std::uint64_t v) noexcept { return put_u64(p, v); }
inline char* put_int(char* p, std::uint32_t v) noexcept { return put_u64(p, v); }
inline char* put_int(char* p, std::uint16_t v) noexcept { return put_u64(p, v); }
inline char* put_int(char* p, std::int64_t v) noexcept {
  if (v >= 0) return put_u64(p, static_cast<std::uint64_t>(v));
  *p = '-';
  return put_u64(p + 1, ~static_cast<std::uint64_t>(v) + 1);
}
inline char* put_int(char* p, std::int32_t v) noexcept { return put_int(p, static_cast<std::int64_t>(v)); }

// `,"key":v` (without the comma for a first member), v in decimal. Signed values go through
// int64 and unsigned ones through uint64, so every field prints exactly, whatever its width.
template <class Int>
void append_key_int(TextBuffer& out, std::string_view key, Int v, bool comma = true) {
  static_assert(std::is_integral_v<Int>);
  using Wide = std::conditional_t<std::is_signed_v<Int>, std::int64_t, std::uint64_t>;
  char* p = out.grow(key.size() + 32);
  char* start = p;
  if (comma) *p++ = ',';
  *p++ = '"';
  p = put(p, key.data(), key.size());
  *p++ = '"';
  *p++ = ':';
  p = put_int(p, static_cast<Wide>(v));
  out.advance(static_cast<std::size_t>(p - start));
}

void append_key_string(TextBuffer& out, std::string_view key, std::string_view v, bool comma = true) {
  if (comma) out.push_back(',');
  out.push_back('"');
  out.append(key);
  out.append("\":");
  append_json_string(out, v);
}

void append_key_bool(TextBuffer& out, std::string_view key, bool v) {
  out.append(",\"");
  out.append(key);
  out.append(v ? "\":true" : "\":false");
}

// Length of the valid UTF-8 sequence starting at s[0] (lead byte >= 0x80), 0 if invalid.
std::size_t utf8_sequence(const unsigned char* s, std::size_t n) noexcept {
  unsigned char c = s[0];
  std::size_t len;
  std::uint32_t min;
  if (c >= 0xC2 && c <= 0xDF) {
    len = 2, min = 0x80;
  } else if (c >= 0xE0 && c <= 0xEF) {
    len = 3, min = 0x800;
  } else if (c >= 0xF0 && c <= 0xF4) {
    len = 4, min = 0x10000;
  } else {
    return 0;
  }
  if (n < len) return 0;
  std::uint32_t cp = c & (0x7F >> len);
  for (std::size_t i = 1; i < len; ++i) {
    if ((s[i] & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (s[i] & 0x3F);
  }
  if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
  return len;
}

const char* block_state_text(BlockState s) noexcept {
  switch (s) {
    case BlockState::active_allocated:
      return "active_allocated";
    case BlockState::active_pending_free:
      return "active_pending_free";
    case BlockState::inactive:
      return "inactive";
  }
  return "inactive";
}

// "id":..,"name":..,"total_bytes":..[,"uuid":..] of a header device entry or a device record.
void append_device_fields(TextBuffer& out, const DeviceInfo& d) {
  append_key_int(out, "id", d.id, false);
  append_key_string(out, "name", d.name);
  append_key_int(out, "total_bytes", d.total_bytes);
  if (!d.uuid.empty()) append_key_string(out, "uuid", d.uuid);
}

}  // namespace

void append_json_string(TextBuffer& out, std::string_view s) {
  static constexpr char kHex[] = "0123456789abcdef";
  char* p = out.grow(s.size() * 6 + 2);  // worst case: every byte as \u00XX
  char* start = p;
  *p++ = '"';
  const auto* u = reinterpret_cast<const unsigned char*>(s.data());
  for (std::size_t i = 0; i < s.size();) {
    unsigned char c = u[i];
    if (c == '"' || c == '\\') {
      *p++ = '\\';
      *p++ = static_cast<char>(c);
      ++i;
    } else if (c < 0x20 || c == 0x7F) {
      if (c == '\n') {
        p = put_lit(p, "\\n");
      } else if (c == '\t') {
        p = put_lit(p, "\\t");
      } else {
        p = put_lit(p, "\\u00");
        *p++ = kHex[c >> 4];
        *p++ = kHex[c & 15];
      }
      ++i;
    } else if (c < 0x80) {
      *p++ = static_cast<char>(c);
      ++i;
    } else if (std::size_t len = utf8_sequence(u + i, s.size() - i); len != 0) {
      p = put(p, s.data() + i, len);
      i += len;
    } else {
      p = put_lit(p, "\\u00");  // not UTF-8: the byte as a Latin-1 character
      *p++ = kHex[c >> 4];
      *p++ = kHex[c & 15];
      ++i;
    }
  }
  *p++ = '"';
  out.advance(static_cast<std::size_t>(p - start));
}

void encode_event(TextBuffer& out, const Event& e, std::int64_t origin_ns, std::string_view text) {
  const auto action = static_cast<std::size_t>(e.action);
  if (action >= kNumActions) return;  // not one of ours: nothing sensible to write
  char* p = out.grow(kMaxPlainEventLine);
  char* const start = p;
  p = put(p, kActionPrefix[action].text, kActionPrefix[action].size);
  p = put_lit(p, ",\"t\":");
  p = put_int(p, static_cast<std::int64_t>(e.time_ns) - origin_ns);
  if (e.device != 0) {
    p = put_lit(p, ",\"d\":");
    p = put_int(p, e.device);
  }
  if (e.stream != 0) {
    p = put_lit(p, ",\"s\":");
    p = put_int(p, e.stream);
  }
  if (e.action == Action::oom) {
    p = put_lit(p, ",\"r\":");
    p = put_int(p, e.size_bytes);
    if (e.block_bytes != e.size_bytes) {
      p = put_lit(p, ",\"b\":");
      p = put_int(p, e.block_bytes);
    }
  }
  if (e.action != Action::mark && e.action != Action::oom) {
    p = put_lit(p, ",\"p\":");
    p = put_int(p, e.addr);
    p = put_lit(p, ",\"r\":");
    p = put_int(p, e.size_bytes);
    if (e.block_bytes != e.size_bytes) {
      p = put_lit(p, ",\"b\":");
      p = put_int(p, e.block_bytes);
    }
  }
  // Memory that bypassed the caching allocator: the shim's MemoryKind (docs/trace-format.md).
  if (!is_memory_kind(e.aux, MemoryKind::allocator) &&
      (e.action == Action::segment_alloc || e.action == Action::segment_free || e.action == Action::segment_map ||
       e.action == Action::segment_unmap)) {
    p = put_lit(p, ",\"k\":");
    p = put_int(p, e.aux);
  }
  if (e.thread_id != 0) {
    p = put_lit(p, ",\"th\":");
    p = put_int(p, e.thread_id);
  }
  if (e.entry_point != 0) {
    p = put_lit(p, ",\"e\":");
    p = put_int(p, e.entry_point);
  }
  if (e.action == Action::oom) {
    p = put_lit(p, ",\"free\":");
    p = put_int(p, e.aux);
    p = put_lit(p, ",\"retries\":");  // num_alloc_retries at the failure (Event::addr, 1.1)
    p = put_int(p, e.addr);
  }
  out.advance(static_cast<std::size_t>(p - start));
  if (e.action == Action::mark) {
    out.append(",\"name\":");
    append_json_string(out, text);
  } else if (e.action == Action::oom && !text.empty()) {
    out.append(",\"snapshot\":");
    out.append(text);
  }
  out.append("}\n");
}

void encode_snapshot(TextBuffer& out, const Snapshot& s) {
  out.append("{\"segments\":[");
  bool first_segment = true;
  for (const SegmentSnapshot& seg : s.segments) {
    if (!first_segment) out.push_back(',');
    first_segment = false;
    out.push_back('{');
    append_key_int(out, "device", seg.device, false);
    append_key_int(out, "address", seg.address);
    append_key_int(out, "total_size", seg.total_size);
    append_key_int(out, "allocated_size", seg.allocated_size);
    append_key_int(out, "active_size", seg.active_size);
    append_key_int(out, "requested_size", seg.requested_size);
    append_key_int(out, "stream", seg.stream);
    append_key_string(out, "segment_type", seg.is_large ? "large" : "small");
    append_key_bool(out, "is_expandable", seg.is_expandable);
    out.append(",\"blocks\":[");
    bool first_block = true;
    for (const BlockSnapshot& b : seg.blocks) {
      if (!first_block) out.push_back(',');
      first_block = false;
      out.push_back('{');
      append_key_int(out, "address", b.address, false);
      append_key_int(out, "size", b.size);
      append_key_int(out, "requested_size", b.requested_size);
      append_key_string(out, "state", block_state_text(b.state));
      if (!b.mapped) append_key_bool(out, "mapped", false);
      out.push_back('}');
    }
    out.append("]}");
  }
  out.append("]}");
}

void encode_device(TextBuffer& out, const DeviceInfo& d) {
  out.append("{\"a\":\"device\",");
  append_device_fields(out, d);
  out.append("}\n");
}

void encode_header(TextBuffer& out, const HeaderFields& h) {
  out.append("{\"a\":\"header\"");
  append_key_string(out, "format", kFormatName);
  append_key_string(out, "version", kFormatVersion);
  append_key_string(out, "tool_version", h.info.tool_version);
  append_key_int(out, "pid", h.pid);
  append_key_int(out, "ppid", h.ppid);
  append_key_string(out, "host", h.host);
  append_key_string(out, "rank", h.rank);
  append_key_string(out, "local_rank", h.local_rank);
  if (h.cuda_visible_devices) append_key_string(out, "cuda_visible_devices", *h.cuda_visible_devices);
  out.append(",\"command_line\":[");
  for (std::size_t i = 0; i < h.command_line.size(); ++i) {
    if (i != 0) out.push_back(',');
    append_json_string(out, h.command_line[i]);
  }
  out.push_back(']');
  append_key_int(out, "start_unix_ns", h.start_unix_ns);
  append_key_string(out, "clock", "CLOCK_MONOTONIC");
  append_key_int(out, "origin_monotonic_ns", h.origin_monotonic_ns);
  append_key_int(out, "cuda_driver_version", h.info.cuda_driver_version);
  append_key_int(out, "cuda_runtime_version", h.info.cuda_runtime_version);
  out.append(",\"devices\":[");
  for (std::size_t i = 0; i < h.info.devices.size(); ++i) {
    if (i != 0) out.push_back(',');
    out.push_back('{');
    append_device_fields(out, h.info.devices[i]);
    out.push_back('}');
  }
  out.push_back(']');
  append_key_string(out, "allocator_settings", h.info.allocator_settings);
  out.append(",\"settings\":{");
  for (std::size_t i = 0; i < h.info.settings.size(); ++i) {
    if (i != 0) out.push_back(',');
    append_json_string(out, h.info.settings[i].first);
    out.push_back(':');
    append_json_string(out, h.info.settings[i].second);
  }
  out.push_back('}');
  out.append(",\"entry_points\":[");
  for (std::size_t i = 0; i < h.info.entry_points.size(); ++i) {
    if (i != 0) out.push_back(',');
    append_json_string(out, h.info.entry_points[i]);
  }
  out.push_back(']');
  out.append(",\"trace\":{");
  append_key_int(out, "buffer_events", h.buffer_events, false);
  append_key_string(out, "on_full", h.drop_when_full ? "drop" : "wait");
  append_key_int(out, "flush_interval_ms", h.flush_interval_ms);
  append_key_string(out, "compression", h.compression);
  out.append("}}\n");
}

void encode_trailer(TextBuffer& out, const TrailerFields& t) {
  out.append("{\"a\":\"trailer\"");
  append_key_int(out, "t", t.time_ns);
  append_key_int(out, "events", t.events);
  append_key_int(out, "dropped", t.dropped);
  out.append(",\"counts\":{");
  bool first = true;
  for (std::size_t i = 0; i < kNumActions; ++i) {
    if (t.counts[i] == 0) continue;
    append_key_int(out, kActionNames[i], t.counts[i], !first);
    first = false;
  }
  out.push_back('}');
  out.append(",\"devices\":[");
  first = true;
  for (std::size_t d = 0; d < t.device_stats.size(); ++d) {
    if (t.device_stats[d].empty()) continue;
    if (!first) out.push_back(',');
    first = false;
    out.push_back('{');
    append_key_int(out, "device", d, false);
    out.append(",\"stats\":{");
    for (std::size_t i = 0; i < t.device_stats[d].size(); ++i) {
      if (i != 0) out.push_back(',');
      append_json_string(out, t.device_stats[d][i].first);
      char* p = out.grow(32);
      *p = ':';
      out.advance(static_cast<std::size_t>(put_int(p + 1, t.device_stats[d][i].second) - p));
    }
    out.append("}}");
  }
  out.append("]}\n");
}

}  // namespace vramtrace::trace
