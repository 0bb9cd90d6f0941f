// Encoders for the trace's lines. The fields, their order and when each is left out come from
// the schema list (vramtrace/trace/schema.def); docs/trace-format.md is the normative text.
#include "vramtrace/trace/format.h"

#include <cstring>
#include <type_traits>

#include "vramtrace/trace/schema.h"

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

// --- values, one encoder per kind of value in schema.h --------------------------------------

// Writes the members of one JSON object as `"key":value`, with a comma before all but the first
// (or before every one when the object's opening already has a member, as `{"a":"header"`).
class ObjectWriter {
 public:
  ObjectWriter(TextBuffer& out, bool first) noexcept : out_(out), first_(first) {}
  /// Writes the key and its colon; the value follows in the returned buffer.
  TextBuffer& key(std::string_view k) {
    if (!first_) out_.push_back(',');
    first_ = false;
    out_.push_back('"');
    out_.append(k);
    out_.append("\":");
    return out_;
  }

 private:
  TextBuffer& out_;
  bool first_;
};

// Declared before field() so that its template finds every overload.
template <class Int>
void write_value(TextBuffer& out, schema::integer, Int v);
void write_value(TextBuffer& out, schema::string, std::string_view v);
void write_value(TextBuffer& out, schema::optional_string, const std::optional<std::string>& v);
void write_value(TextBuffer& out, schema::boolean, bool v);
void write_value(TextBuffer& out, schema::strings, const std::vector<std::string>& v);
void write_value(TextBuffer& out, schema::id_names, const std::vector<std::string>& v);
void write_value(TextBuffer& out, schema::string_map, const std::vector<std::pair<std::string, std::string>>& v);
void write_value(TextBuffer& out, schema::devices, const std::vector<DeviceInfo>& v);
void write_value(TextBuffer& out, schema::writer_settings, const HeaderFields& h);
void write_value(TextBuffer& out, schema::on_full, bool drop_when_full);
void write_value(TextBuffer& out, schema::segments, const std::vector<SegmentSnapshot>& v);
void write_value(TextBuffer& out, schema::blocks, const std::vector<BlockSnapshot>& v);
void write_value(TextBuffer& out, schema::pool, bool is_large);
void write_value(TextBuffer& out, schema::block_state, BlockState v);
void write_value(TextBuffer& out, schema::action_counts, const std::uint64_t (&counts)[16]);
void write_value(TextBuffer& out, schema::device_stats, const std::vector<FlatStats>& v);
void write_value(TextBuffer& out, schema::flat_stats, const FlatStats& v);
void write_value(TextBuffer& out, schema::frames, const std::vector<FrameRecord>& v);

template <class T>
struct IsOptional : std::false_type {};
template <class T>
struct IsOptional<std::optional<T>> : std::true_type {};

// Whether a field whose value is `v` is left out (schema::Absent). equals_r is for events only.
template <schema::Absent A, class V>
bool omitted(const V& v) {
  static_assert(A != schema::Absent::equals_r, "equals_r compares with an event's \"r\"");
  if constexpr (A == schema::Absent::zero) {
    if constexpr (std::is_arithmetic_v<V>)
      return v == 0;
    else if constexpr (IsOptional<V>::value)
      return !v.has_value();
    else
      return v.empty();
  } else if constexpr (A == schema::Absent::is_true) {
    return v == true;
  } else {
    return false;
  }
}

// One `"key":value` member, unless the schema leaves it out.
template <schema::Absent A, class Tag, class V>
void field(ObjectWriter& w, std::string_view key, Tag tag, const V& v) {
  if (omitted<A>(v)) return;
  write_value(w.key(key), tag, v);
}

// `[{...},{...}]`, each object's members written by `members(ObjectWriter&, item)`.
template <class List, class Members>
void write_objects(TextBuffer& out, const List& items, Members members) {
  out.push_back('[');
  bool first = true;
  for (const auto& item : items) {
    if (!first) out.push_back(',');
    first = false;
    out.push_back('{');
    ObjectWriter w(out, true);
    members(w, item);
    out.push_back('}');
  }
  out.push_back(']');
}

// The members of each record, expanded from schema.def.
void write_device_fields(ObjectWriter& w, const DeviceInfo& d) {
#define VRAMTRACE_DEVICE_FIELD(key, type, member, absent) \
  field<schema::Absent::absent>(w, #key, schema::type{}, d.member);
#include "vramtrace/trace/schema.def"
}
void write_segment_fields(ObjectWriter& w, const SegmentSnapshot& s) {
#define VRAMTRACE_SEGMENT_FIELD(key, type, member, absent) \
  field<schema::Absent::absent>(w, #key, schema::type{}, s.member);
#include "vramtrace/trace/schema.def"
}
void write_block_fields(ObjectWriter& w, const BlockSnapshot& b) {
#define VRAMTRACE_BLOCK_FIELD(key, type, member, absent) \
  field<schema::Absent::absent>(w, #key, schema::type{}, b.member);
#include "vramtrace/trace/schema.def"
}
void write_frame_fields(ObjectWriter& w, const FrameRecord& f) {
  if (f.python) {
#define VRAMTRACE_PYTHON_FRAME_FIELD(key, type, member, absent) \
  field<schema::Absent::absent>(w, #key, schema::type{}, f.member);
#include "vramtrace/trace/schema.def"
  } else {
#define VRAMTRACE_NATIVE_FRAME_FIELD(key, type, member, absent) \
  field<schema::Absent::absent>(w, #key, schema::type{}, f.member);
#include "vramtrace/trace/schema.def"
  }
}

template <class Int>
void write_value(TextBuffer& out, schema::integer, Int v) {
  // Signed values go through int64 and unsigned ones through uint64, so that every field prints
  // exactly, whatever its width.
  static_assert(std::is_integral_v<Int>);
  using Wide = std::conditional_t<std::is_signed_v<Int>, std::int64_t, std::uint64_t>;
  char* p = out.grow(24);
  out.advance(static_cast<std::size_t>(put_int(p, static_cast<Wide>(v)) - p));
}
void write_value(TextBuffer& out, schema::string, std::string_view v) { append_json_string(out, v); }
void write_value(TextBuffer& out, schema::optional_string, const std::optional<std::string>& v) {
  append_json_string(out, *v);
}
void write_value(TextBuffer& out, schema::boolean, bool v) { out.append(v ? "true" : "false"); }
void write_value(TextBuffer& out, schema::strings, const std::vector<std::string>& v) {
  out.push_back('[');
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (i != 0) out.push_back(',');
    append_json_string(out, v[i]);
  }
  out.push_back(']');
}
void write_value(TextBuffer& out, schema::id_names, const std::vector<std::string>& v) {
  write_value(out, schema::strings{}, v);
}
void write_value(TextBuffer& out, schema::string_map, const std::vector<std::pair<std::string, std::string>>& v) {
  out.push_back('{');
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (i != 0) out.push_back(',');
    append_json_string(out, v[i].first);
    out.push_back(':');
    append_json_string(out, v[i].second);
  }
  out.push_back('}');
}
void write_value(TextBuffer& out, schema::devices, const std::vector<DeviceInfo>& v) {
  write_objects(out, v, write_device_fields);
}
void write_value(TextBuffer& out, schema::writer_settings, const HeaderFields& h) {
  out.push_back('{');
  ObjectWriter w(out, true);
#define VRAMTRACE_WRITER_SETTING_FIELD(key, type, writes, reads, absent) \
  field<schema::Absent::absent>(w, #key, schema::type{}, writes);
#include "vramtrace/trace/schema.def"
  out.push_back('}');
}
void write_value(TextBuffer& out, schema::on_full, bool drop_when_full) {
  append_json_string(out, drop_when_full ? "drop" : "wait");
}
void write_value(TextBuffer& out, schema::segments, const std::vector<SegmentSnapshot>& v) {
  write_objects(out, v, write_segment_fields);
}
void write_value(TextBuffer& out, schema::blocks, const std::vector<BlockSnapshot>& v) {
  write_objects(out, v, write_block_fields);
}
void write_value(TextBuffer& out, schema::pool, bool is_large) {
  append_json_string(out, is_large ? "large" : "small");
}
void write_value(TextBuffer& out, schema::block_state, BlockState v) {
  switch (v) {
    case BlockState::active_allocated:
      return append_json_string(out, "active_allocated");
    case BlockState::active_pending_free:
      return append_json_string(out, "active_pending_free");
    case BlockState::inactive:
      break;
  }
  append_json_string(out, "inactive");
}
void write_value(TextBuffer& out, schema::action_counts, const std::uint64_t (&counts)[16]) {
  out.push_back('{');
  ObjectWriter w(out, true);
  for (std::size_t i = 0; i < kNumActions; ++i) {
    if (counts[i] != 0) write_value(w.key(kActionNames[i]), schema::integer{}, counts[i]);
  }
  out.push_back('}');
}
void write_value(TextBuffer& out, schema::device_stats, const std::vector<FlatStats>& v) {
  // Index = device ordinal; a device without statistics is left out.
  out.push_back('[');
  bool first = true;
  for (std::size_t device = 0; device < v.size(); ++device) {
    if (v[device].empty()) continue;
    if (!first) out.push_back(',');
    first = false;
    out.push_back('{');
    ObjectWriter w(out, true);
    const std::pair<std::size_t, const FlatStats&> e{device, v[device]};
#define VRAMTRACE_TRAILER_DEVICE_FIELD(key, type, member, absent) \
  field<schema::Absent::absent>(w, #key, schema::type{}, e.member);
#include "vramtrace/trace/schema.def"
    out.push_back('}');
  }
  out.push_back(']');
}
void write_value(TextBuffer& out, schema::flat_stats, const FlatStats& v) {
  out.push_back('{');
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (i != 0) out.push_back(',');
    append_json_string(out, v[i].first);  // PyTorch's names need no escape; other writers' may
    out.push_back(':');
    write_value(out, schema::integer{}, v[i].second);
  }
  out.push_back('}');
}

void write_value(TextBuffer& out, schema::frames, const std::vector<FrameRecord>& v) {
  write_objects(out, v, write_frame_fields);
}

// --- event fields: integers straight into the line's reserved space -------------------------

template <class Int>
Int event_value(schema::integer, Int v, std::int64_t /*origin_ns*/) noexcept {
  return v;
}
inline std::int64_t event_value(schema::time, std::uint64_t monotonic_ns, std::int64_t origin_ns) noexcept {
  return static_cast<std::int64_t>(monotonic_ns) - origin_ns;
}

// Whether an event's integer field is written (schema::Absent); `r` is the event's "r".
template <schema::Absent A, class Int>
bool event_written(Int v, std::uint64_t r) noexcept {
  static_assert(A != schema::Absent::is_true, "is_true is for flags");
  if constexpr (A == schema::Absent::zero)
    return v != 0;
  else if constexpr (A == schema::Absent::equals_r)
    return v != r;
  else
    return true;
}
template <schema::Absent A>
bool text_written(std::string_view text) noexcept {
  if constexpr (A == schema::Absent::zero)
    return !text.empty();
  else
    return true;
}

void write_text(TextBuffer& out, schema::string, std::string_view text) { append_json_string(out, text); }
void write_text(TextBuffer& out, schema::snapshot, std::string_view encoded) { out.append(encoded); }
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
  // The value's test comes first: it varies least from event to event (a "k" is 0 whatever the
  // action), so the branches stay predictable in any mix of actions.
  const std::uint32_t action_bit = schema::bit(e.action);
#define VRAMTRACE_EVENT_FIELD(key, type, member, actions, absent)                                                    \
  {                                                                                                                  \
    const auto v = event_value(schema::type{}, e.member, origin_ns);                                                 \
    if (event_written<schema::Absent::absent>(v, e.size_bytes) && (schema::carried_by::actions & action_bit) != 0) { \
      p = put_lit(p, ",\"" #key "\":");                                                                              \
      p = put_int(p, v);                                                                                             \
    }                                                                                                                \
  }
#include "vramtrace/trace/schema.def"
  out.advance(static_cast<std::size_t>(p - start));
#define VRAMTRACE_EVENT_TEXT_FIELD(key, type, actions, absent)                                                \
  if (schema::carries(schema::carried_by::actions, e.action) && text_written<schema::Absent::absent>(text)) { \
    out.append(",\"" #key "\":");                                                                             \
    write_text(out, schema::type{}, text);                                                                    \
  }
#include "vramtrace/trace/schema.def"
  out.append("}\n");
}

void encode_snapshot(TextBuffer& out, const Snapshot& s) {
  out.push_back('{');
  ObjectWriter w(out, true);
#define VRAMTRACE_SNAPSHOT_FIELD(key, type, member, absent) \
  field<schema::Absent::absent>(w, #key, schema::type{}, s.member);
#include "vramtrace/trace/schema.def"
  out.push_back('}');
}

void encode_device(TextBuffer& out, const DeviceInfo& d) {
  out.append("{\"a\":\"device\"");
  ObjectWriter w(out, false);
  write_device_fields(w, d);
  out.append("}\n");
}

void encode_header(TextBuffer& out, const HeaderFields& h) {
  out.append("{\"a\":\"header\"");
  ObjectWriter w(out, false);
#define VRAMTRACE_HEADER_FIELD(key, type, writes, reads, absent) \
  field<schema::Absent::absent>(w, #key, schema::type{}, writes);
#include "vramtrace/trace/schema.def"
  out.append("}\n");
}

void encode_module(TextBuffer& out, const ModuleInfo& m) {
  out.append("{\"a\":\"module\"");
  ObjectWriter w(out, false);
#define VRAMTRACE_MODULE_FIELD(key, type, member, absent) \
  field<schema::Absent::absent>(w, #key, schema::type{}, m.member);
#include "vramtrace/trace/schema.def"
  out.append("}\n");
}

void encode_string(TextBuffer& out, const StringRecord& s) {
  out.append("{\"a\":\"string\"");
  ObjectWriter w(out, false);
#define VRAMTRACE_STRING_FIELD(key, type, member, absent) \
  field<schema::Absent::absent>(w, #key, schema::type{}, s.member);
#include "vramtrace/trace/schema.def"
  out.append("}\n");
}

void encode_stack(TextBuffer& out, const StackRecord& s) {
  out.append("{\"a\":\"stack\"");
  ObjectWriter w(out, false);
#define VRAMTRACE_STACK_FIELD(key, type, member, absent) \
  field<schema::Absent::absent>(w, #key, schema::type{}, s.member);
#include "vramtrace/trace/schema.def"
  out.append("}\n");
}

void encode_trailer(TextBuffer& out, const TrailerFields& t) {
  out.append("{\"a\":\"trailer\"");
  ObjectWriter w(out, false);
#define VRAMTRACE_TRAILER_FIELD(key, type, member, absent) \
  field<schema::Absent::absent>(w, #key, schema::type{}, t.member);
#include "vramtrace/trace/schema.def"
  out.append("}\n");
}

}  // namespace vramtrace::trace
