// Reader of vramtrace's own JSON Lines trace (docs/trace-format.md). The fields it knows, their
// types and what a missing one means come from the schema list (vramtrace/trace/schema.def), the
// same list the writer is expanded from.
//
// Event lines (the bulk) are parsed with simdjson's On-Demand API from a reused padded buffer;
// the rare header, trailer and oom lines with nlohmann::json. Memory stays bounded: one line and
// the decompression buffers of LineSource.
#include "vramtrace/trace/vramtrace_reader.h"

#include <sys/stat.h>

#include <fmt/format.h>
#include <simdjson.h>

#include <array>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <deque>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <string_view>
#include <type_traits>
#include <unordered_map>

#include "vramtrace/device_limits.h"
#include "vramtrace/trace/byte_source.h"
#include "vramtrace/trace/format.h"
#include "vramtrace/trace/schema.h"

namespace vramtrace {

namespace {

// Note [text that is not UTF-8]: a JSON Lines trace is UTF-8 (docs/trace-format.md), but a mark
// name or a frame's text comes from the traced program, which may hand the writer any bytes (a
// file name in Latin-1, a Python str with a lone surrogate, written as the escape \ud800). One
// such name must not make a whole trace unreadable: repair_utf8 replaces each invalid byte
// sequence and each lone surrogate escape by U+FFFD, as Python's errors="replace" and
// WHATWG's decoder do, and the reader reports how many lines it repaired.

// Length of the valid UTF-8 sequence starting at s[i], or 0 when it is not one (overlong forms,
// surrogates and code points above U+10FFFF are invalid: RFC 3629, section 4).
std::size_t utf8_sequence(std::string_view s, std::size_t i) {
  const auto c = [&](std::size_t k) { return i + k < s.size() ? static_cast<unsigned char>(s[i + k]) : 0u; };
  const unsigned b0 = c(0);
  if (b0 < 0x80) return 1;
  const auto cont = [&](std::size_t k) { return (c(k) & 0xC0u) == 0x80u; };
  if (b0 >= 0xC2 && b0 <= 0xDF) return cont(1) ? 2 : 0;
  if (b0 >= 0xE0 && b0 <= 0xEF) {
    const unsigned lo = b0 == 0xE0 ? 0xA0 : 0x80, hi = b0 == 0xED ? 0x9F : 0xBF;
    return c(1) >= lo && c(1) <= hi && cont(2) ? 3 : 0;
  }
  if (b0 >= 0xF0 && b0 <= 0xF4) {
    const unsigned lo = b0 == 0xF0 ? 0x90 : 0x80, hi = b0 == 0xF4 ? 0x8F : 0xBF;
    return c(1) >= lo && c(1) <= hi && cont(2) && cont(3) ? 4 : 0;
  }
  return 0;
}

// The value of the four hex digits at s[i..i+4), or -1.
int hex4(std::string_view s, std::size_t i) {
  if (i + 4 > s.size()) return -1;
  int v = 0;
  for (std::size_t k = 0; k < 4; ++k) {
    const char h = s[i + k];
    const int d = h >= '0' && h <= '9'   ? h - '0'
                  : h >= 'a' && h <= 'f' ? h - 'a' + 10
                  : h >= 'A' && h <= 'F' ? h - 'A' + 10
                                         : -1;
    if (d < 0) return -1;
    v = v * 16 + d;
  }
  return v;
}

/// Copies `line` into `out` with every invalid UTF-8 sequence and every lone UTF-16 surrogate
/// escape (\uD800-\uDFFF not in a high-low pair) replaced by U+FFFD (Note [text that is not
/// UTF-8]). Returns the number of replacements; 0 leaves `out` equal to `line`. O(line). Pure.
std::size_t repair_utf8(std::string_view line, std::string& out) {
  static constexpr std::string_view kReplacement = "\xEF\xBF\xBD";
  out.clear();
  out.reserve(line.size() + 16);
  std::size_t replaced = 0;
  for (std::size_t i = 0; i < line.size();) {
    if (line[i] == '\\' && i + 1 < line.size()) {
      if (line[i + 1] != 'u') {  // a two-character escape: copied whole, so "\\\\u" is not read as \u
        out.append(line.substr(i, 2));
        i += 2;
        continue;
      }
      const int u = hex4(line, i + 2);
      if (u >= 0xD800 && u <= 0xDBFF) {
        const int low = line.substr(i + 6, 2) == "\\u" ? hex4(line, i + 8) : -1;
        if (low >= 0xDC00 && low <= 0xDFFF) {
          out.append(line.substr(i, 12));
          i += 12;
          continue;
        }
      }
      if (u >= 0xD800 && u <= 0xDFFF) {
        out += "\\ufffd";
        ++replaced;
        i += 6;
        continue;
      }
      out.append(line.substr(i, 2));
      i += 2;
      continue;
    }
    if (const std::size_t n = utf8_sequence(line, i); n != 0) {
      out.append(line.substr(i, n));
      i += n;
    } else {
      out += kReplacement;
      ++replaced;
      ++i;  // one replacement per bad byte, as Python's errors="replace" does for a stray byte
    }
  }
  return replaced;
}

constexpr int kReadableMajor = 1;

using nlohmann::json;
namespace schema = trace::schema;

std::int64_t json_int(const json& j, const char* key, std::int64_t fallback = 0) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_number_integer()) return fallback;
  return it->get<std::int64_t>();
}
std::uint64_t json_uint(const json& j, const char* key, std::uint64_t fallback = 0) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_number_integer()) return fallback;
  if (it->is_number_unsigned()) return it->get<std::uint64_t>();
  return static_cast<std::uint64_t>(it->get<std::int64_t>());
}
std::string json_string(const json& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_string()) return {};
  return it->get<std::string>();
}

// --- values, one decoder per kind of value in schema.h (the encoders are in format.cpp) --------
// Each takes the object `j` that should hold `key` and leaves the member as the schema says a
// missing field reads when the key is absent or of another type. They throw only where
// nlohmann::json's value() does (a flag read from something that is not an object).

// The members of each record, expanded from schema.def (defined below the decoders).
void read_device_fields(const json& j, VramtraceHeaderDetails::Device& d);
void read_segment_fields(const json& j, SegmentSnapshot& s);
void read_block_fields(const json& j, BlockSnapshot& b);
void read_trailer_device_fields(const json& j,
                                std::pair<std::int32_t, std::vector<std::pair<std::string, std::int64_t>>>& e);
void read_writer_setting_fields(const json& j, VramtraceHeaderDetails& d);

template <schema::Absent A, class Int>
void read_value(const json& j, const char* key, schema::integer, Int& m) {
  static_assert(std::is_integral_v<Int>);
  if constexpr (std::is_signed_v<Int>)
    m = static_cast<Int>(json_int(j, key));
  else
    m = static_cast<Int>(json_uint(j, key));
}
template <schema::Absent A>
void read_value(const json& j, const char* key, schema::string, std::string& m) {
  m = json_string(j, key);
}
template <schema::Absent A>
void read_value(const json& j, const char* key, schema::optional_string, std::optional<std::string>& m) {
  if (auto v = j.find(key); v != j.end() && v->is_string()) m = v->get<std::string>();
}
template <schema::Absent A>
void read_value(const json& j, const char* key, schema::boolean, bool& m) {
  m = j.value(key, A == schema::Absent::is_true);
}
template <schema::Absent A>
void read_value(const json& j, const char* key, schema::strings, std::vector<std::string>& m) {
  if (auto c = j.find(key); c != j.end() && c->is_array()) {
    for (const json& a : *c) {
      if (a.is_string()) m.push_back(a.get<std::string>());
    }
  }
}
template <schema::Absent A>
void read_value(const json& j, const char* key, schema::id_names, std::vector<std::string>& m) {
  if (auto e = j.find(key); e != j.end() && e->is_array()) {
    for (const json& a : *e) m.push_back(a.is_string() ? a.get<std::string>() : std::string());
  }
}
template <schema::Absent A>
void read_value(const json& j, const char* key, schema::string_map,
                std::vector<std::pair<std::string, std::string>>& m) {
  if (auto s = j.find(key); s != j.end() && s->is_object()) {
    for (auto it = s->begin(); it != s->end(); ++it) {
      m.emplace_back(it.key(), it->is_string() ? it->get<std::string>() : it->dump());
    }
  }
}
template <schema::Absent A>
void read_value(const json& j, const char* key, schema::devices, std::vector<VramtraceHeaderDetails::Device>& m) {
  if (auto ds = j.find(key); ds != j.end() && ds->is_array()) {
    for (const json& jd : *ds) {
      VramtraceHeaderDetails::Device d;
      read_device_fields(jd, d);
      m.push_back(std::move(d));
    }
  }
}
template <schema::Absent A>
void read_value(const json& j, const char* key, schema::writer_settings, VramtraceHeaderDetails& d) {
  if (auto t = j.find(key); t != j.end() && t->is_object()) read_writer_setting_fields(*t, d);
}
template <schema::Absent A>
void read_value(const json& j, const char* key, schema::on_full, std::string& m) {
  m = json_string(j, key);
}
template <schema::Absent A>
void read_value(const json& j, const char* key, schema::segments, std::vector<SegmentSnapshot>& m) {
  auto segs = j.find(key);
  if (segs == j.end() || !segs->is_array()) return;
  for (const json& js : *segs) {
    SegmentSnapshot seg;
    read_segment_fields(js, seg);
    m.push_back(std::move(seg));
  }
}
template <schema::Absent A>
void read_value(const json& j, const char* key, schema::blocks, std::vector<BlockSnapshot>& m) {
  if (auto blocks = j.find(key); blocks != j.end() && blocks->is_array()) {
    for (const json& jb : *blocks) {
      BlockSnapshot b;
      read_block_fields(jb, b);
      m.push_back(b);
    }
  }
}
template <schema::Absent A>
void read_value(const json& j, const char* key, schema::pool, bool& is_large) {
  is_large = json_string(j, key) != "small";
}
template <schema::Absent A>
void read_value(const json& j, const char* key, schema::block_state, BlockState& m) {
  std::string st = json_string(j, key);
  m = st == "active_allocated"      ? BlockState::active_allocated
      : st == "active_pending_free" ? BlockState::active_pending_free
                                    : BlockState::inactive;
}
template <schema::Absent A>
void read_value(const json& j, const char* key, schema::action_counts,
                std::vector<std::pair<std::string, std::uint64_t>>& m) {
  m.clear();
  if (auto c = j.find(key); c != j.end() && c->is_object()) {
    for (auto it = c->begin(); it != c->end(); ++it) {
      if (it->is_number_integer()) m.emplace_back(it.key(), it->get<std::uint64_t>());
    }
  }
}
template <schema::Absent A>
void read_value(const json& j, const char* key, schema::device_stats,
                std::vector<std::pair<std::int32_t, std::vector<std::pair<std::string, std::int64_t>>>>& m) {
  m.clear();
  if (auto ds = j.find(key); ds != j.end() && ds->is_array()) {
    for (const json& jd : *ds) {
      std::pair<std::int32_t, std::vector<std::pair<std::string, std::int64_t>>> e;
      read_trailer_device_fields(jd, e);
      m.push_back(std::move(e));
    }
  }
}
template <schema::Absent A>
void read_value(const json& j, const char* key, schema::flat_stats,
                std::vector<std::pair<std::string, std::int64_t>>& m) {
  if (auto st = j.find(key); st != j.end() && st->is_object()) {
    for (auto it = st->begin(); it != st->end(); ++it) {
      if (it->is_number_integer()) m.emplace_back(it.key(), it->get<std::int64_t>());
    }
  }
}

void read_device_fields(const json& j, VramtraceHeaderDetails::Device& d) {
#define VRAMTRACE_DEVICE_FIELD(key, type, member, absent) \
  read_value<schema::Absent::absent>(j, #key, schema::type{}, d.member);
#include "vramtrace/trace/schema.def"
}
void read_segment_fields(const json& j, SegmentSnapshot& s) {
#define VRAMTRACE_SEGMENT_FIELD(key, type, member, absent) \
  read_value<schema::Absent::absent>(j, #key, schema::type{}, s.member);
#include "vramtrace/trace/schema.def"
}
void read_block_fields(const json& j, BlockSnapshot& b) {
#define VRAMTRACE_BLOCK_FIELD(key, type, member, absent) \
  read_value<schema::Absent::absent>(j, #key, schema::type{}, b.member);
#include "vramtrace/trace/schema.def"
}
void read_trailer_device_fields(const json& j,
                                std::pair<std::int32_t, std::vector<std::pair<std::string, std::int64_t>>>& e) {
#define VRAMTRACE_TRAILER_DEVICE_FIELD(key, type, member, absent) \
  read_value<schema::Absent::absent>(j, #key, schema::type{}, e.member);
#include "vramtrace/trace/schema.def"
}
void read_writer_setting_fields(const json& j, VramtraceHeaderDetails& d) {
#define VRAMTRACE_WRITER_SETTING_FIELD(key, type, writes, reads, absent) \
  read_value<schema::Absent::absent>(j, #key, schema::type{}, reads);
#include "vramtrace/trace/schema.def"
}
void read_header_fields(const json& j, VramtraceHeaderDetails& d) {
#define VRAMTRACE_HEADER_FIELD(key, type, writes, reads, absent) \
  read_value<schema::Absent::absent>(j, #key, schema::type{}, reads);
#include "vramtrace/trace/schema.def"
}

Snapshot parse_snapshot(const json& j) {
  Snapshot s;
#define VRAMTRACE_SNAPSHOT_FIELD(key, type, member, absent) \
  read_value<schema::Absent::absent>(j, #key, schema::type{}, s.member);
#include "vramtrace/trace/schema.def"
  return s;
}

void parse_trailer(const json& j, VramtraceTrailer& t) {
  t.present = true;
#define VRAMTRACE_TRAILER_FIELD(key, type, member, absent) \
  read_value<schema::Absent::absent>(j, #key, schema::type{}, t.member);
#include "vramtrace/trace/schema.def"
}

// The kinds of the records of call stacks (format 1.2; Reader::read_stack_record).
bool is_stack_record(std::string_view kind) noexcept { return kind == "module" || kind == "string" || kind == "stack"; }

// --- event lines: the fields of schema.def, by key -------------------------------------------

enum class EventKey : std::uint8_t {
#define VRAMTRACE_EVENT_FIELD(key, type, member, actions, absent) key,
#define VRAMTRACE_EVENT_TEXT_FIELD(key, type, actions, absent) key,
#include "vramtrace/trace/schema.def"
  unknown,
};
constexpr std::string_view kEventKeys[] = {
#define VRAMTRACE_EVENT_FIELD(key, type, member, actions, absent) #key,
#define VRAMTRACE_EVENT_TEXT_FIELD(key, type, actions, absent) #key,
#include "vramtrace/trace/schema.def"
};
constexpr std::size_t kNumEventKeys = sizeof(kEventKeys) / sizeof(kEventKeys[0]);
static_assert(kNumEventKeys == static_cast<std::size_t>(EventKey::unknown));

// Whether a key's value may be negative: "t", and integers whose Event member is signed.
template <class Tag, class Member>
constexpr bool signed_field() {
  return std::is_same_v<Tag, schema::time> || std::is_signed_v<Member>;
}
constexpr bool kSignedKey[] = {
#define VRAMTRACE_EVENT_FIELD(key, type, member, actions, absent) signed_field<schema::type, decltype(Event::member)>(),
#define VRAMTRACE_EVENT_TEXT_FIELD(key, type, actions, absent) false,
#include "vramtrace/trace/schema.def"
    false,  // unknown
};

// One-letter keys (most of a line) by their letter; longer ones are looked up in kEventKeys.
constexpr auto kOneLetterKeys = [] {
  std::array<EventKey, 256> t{};
  t.fill(EventKey::unknown);
  for (std::size_t i = 0; i < kNumEventKeys; ++i) {
    if (kEventKeys[i].size() == 1) t[static_cast<unsigned char>(kEventKeys[i][0])] = static_cast<EventKey>(i);
  }
  return t;
}();

EventKey event_key(std::string_view key) noexcept {
  if (key.size() == 1) return kOneLetterKeys[static_cast<unsigned char>(key[0])];
  for (std::size_t i = 0; i < kNumEventKeys; ++i) {
    if (kEventKeys[i] == key) return static_cast<EventKey>(i);
  }
  return EventKey::unknown;
}

// Where a parsed field goes: a signed or unsigned 64-bit integer, optional when the schema says
// a missing field means something else than 0 ("b" reads as "r"; "retries" as unknown).
template <class Tag, class Member, schema::Absent A>
struct IntegerSlot {
  using Wide = std::conditional_t<signed_field<Tag, Member>(), std::int64_t, std::uint64_t>;
  using type =
      std::conditional_t<A == schema::Absent::equals_r || A == schema::Absent::unknown, std::optional<Wide>, Wide>;
};
// Text fields: a mark's name (a view into the parser's buffer, valid until the next line); the
// oom's snapshot is read separately (Reader::read_event_text), so nothing is kept for it here.
template <class Tag>
struct TextSlot {
  using type = std::string_view;
};
template <>
struct TextSlot<schema::snapshot> {
  using type = bool;
};

// One event line's fields, each member named after its key.
struct LineFields {
  std::string_view action;
#define VRAMTRACE_EVENT_FIELD(key, kind, member, actions, absent) \
  typename IntegerSlot<schema::kind, decltype(Event::member), schema::Absent::absent>::type key{};
#define VRAMTRACE_EVENT_TEXT_FIELD(key, kind, actions, absent) typename TextSlot<schema::kind>::type key{};
#include "vramtrace/trace/schema.def"
};

// A value of the fast path (parse_canonical), already checked against the field's signedness.
inline void take_integer(std::int64_t& slot, std::uint64_t, std::int64_t sv) noexcept { slot = sv; }
inline void take_integer(std::uint64_t& slot, std::uint64_t v, std::int64_t) noexcept { slot = v; }
inline void take_integer(std::optional<std::int64_t>& slot, std::uint64_t, std::int64_t sv) noexcept { slot = sv; }
inline void take_integer(std::optional<std::uint64_t>& slot, std::uint64_t v, std::int64_t) noexcept { slot = v; }

// A value of the general path (simdjson), of the field's type or an error.
inline simdjson::error_code get_field(simdjson::ondemand::value& value, std::int64_t& slot) {
  return value.get_int64().get(slot);
}
inline simdjson::error_code get_field(simdjson::ondemand::value& value, std::uint64_t& slot) {
  return value.get_uint64().get(slot);
}
template <class Int>
simdjson::error_code get_field(simdjson::ondemand::value& value, std::optional<Int>& slot) {
  Int v = 0;
  simdjson::error_code err = get_field(value, v);
  if (!err) slot = v;
  return err;
}
inline simdjson::error_code get_field(simdjson::ondemand::value& value, std::string_view& slot) {
  return value.get_string().get(slot);
}
inline simdjson::error_code get_field(simdjson::ondemand::value&, bool&) {
  return simdjson::SUCCESS;  // an object read with nlohmann::json afterwards; skipped here
}

std::uint64_t saturating_add(std::uint64_t a, std::uint64_t b) noexcept {
  std::uint64_t sum = 0;
  return __builtin_add_overflow(a, b, &sum) ? UINT64_MAX : sum;
}

// The trailer of an uncompressed file, read from its last 1 MiB; nullopt if absent or compressed.
std::optional<VramtraceTrailer> peek_trailer(const std::string& path) {
  // Only a regular file can be read from its end (a pipe is read from its copy, by ByteSource).
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return std::nullopt;
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  unsigned char magic[4] = {};
  in.read(reinterpret_cast<char*>(magic), 4);
  if ((magic[0] == 0x1f && magic[1] == 0x8b) ||
      (magic[0] == 0x28 && magic[1] == 0xb5 && magic[2] == 0x2f && magic[3] == 0xfd)) {
    return std::nullopt;
  }
  in.clear();
  in.seekg(0, std::ios::end);
  const std::streamoff size = in.tellg();
  if (size <= 0) return std::nullopt;
  const std::streamoff start = size > (1 << 20) ? size - (1 << 20) : 0;
  in.seekg(start);
  std::string tail(static_cast<std::size_t>(size - start), '\0');
  in.read(tail.data(), static_cast<std::streamsize>(tail.size()));
  if (tail.empty() || tail.back() != '\n') return std::nullopt;
  std::size_t line_end = tail.size() - 1;
  std::size_t line_start = tail.rfind('\n', line_end - 1);
  line_start = line_start == std::string::npos ? 0 : line_start + 1;
  std::string_view line(tail.data() + line_start, line_end - line_start);
  if (line.find("\"trailer\"") == std::string_view::npos) return std::nullopt;
  json j = json::parse(line, nullptr, false);
  if (j.is_discarded() || !j.is_object() || json_string(j, "a") != "trailer") return std::nullopt;
  VramtraceTrailer t;
  parse_trailer(j, t);
  return t;
}

class Reader final : public VramtraceTraceReader {
 public:
  explicit Reader(const std::string& path) : source_(LineSource::open(path)) {
    header_.path = path;
    header_.format = "vramtrace";
    read_header();
    if (auto t = peek_trailer(path)) {
      trailer_ = std::move(*t);
      fill_recorded_stats();
    }
  }

  const TraceHeader& header() const override { return header_; }
  const VramtraceHeaderDetails& details() const override { return details_; }
  const VramtraceTrailer& trailer() const override { return trailer_; }
  std::string position() const override { return "line " + std::to_string(source_->line_number()); }
  bool incomplete() const override { return incomplete_; }
  std::string incomplete_reason() const override {
    if (!incomplete_) return {};
    if (cut_) return "its last line is cut";
    return "no trailer: the process did not finish tracing; killed, crashed or still running";
  }
  std::uint64_t nul_bytes() const override { return nul_bytes_; }
  std::uint64_t block_bytes() const override { return block_bytes_; }
  std::uint32_t thread_id() const override { return thread_id_; }
  std::uint32_t entry_point() const override { return entry_point_; }
  std::uint32_t memory_kind() const override { return memory_kind_; }
  const std::string& mark_name() const override { return mark_name_; }
  const Snapshot* oom_snapshot() const override { return has_snapshot_ ? &snapshot_ : nullptr; }
  std::uint64_t skipped_records() const override { return skipped_; }

  bool next(TraceRecord& out) override {
    if (finished_) return false;
    std::string_view line;
    for (;;) {
      if (!source_->next_line(line)) {
        finished_ = true;
        if (!saw_trailer_) {
          incomplete_ = true;
          trailer_.present = false;
        }
        // A last line without its '\n' is a cut line, unless it was only NUL padding.
        if (source_->stream_truncated() || (source_->truncated() && !last_line_nul_)) {
          incomplete_ = true;
          cut_ = true;
        }
        return false;
      }
      if (line.empty()) continue;
      if (line.find_first_not_of('\0') == std::string_view::npos) {
        // NUL bytes where lines should be: blocks a file system allocated but never wrote
        // (a crash or power loss while the file grew). Nothing was recorded there.
        nul_bytes_ += line.size() + 1;
        last_line_nul_ = true;
        continue;
      }
      last_line_nul_ = false;
      if (saw_trailer_) {
        if (line.front() != '{') fail("junk after the trailer: " + excerpt(line) + " (not a record)");
        fail("a record after the trailer (two traces concatenated?)");
      }
      int kind = parse_line(line, out);
      if (kind == kEvent) {
        ++event_lines_;
        ++lines_by_action_[static_cast<std::size_t>(out.action)];
      }
      if (kind == kEvent) return true;
      if (kind == kCut) {
        incomplete_ = true;
        cut_ = true;
        finished_ = true;
        return false;
      }
      // kTrailer, kSkipped, kMeta: go on (the trailer must be the last line)
    }
  }

 private:
  enum Kind { kEvent, kTrailer, kSkipped, kMeta, kCut };

  // The start of a bad line, printable, for messages.
  static std::string excerpt(std::string_view line) {
    std::string out = "'";
    for (char c : line.substr(0, 40)) out += (c >= 0x20 && c < 0x7f) ? c : '?';
    return out + (line.size() > 40 ? "...'" : "'");
  }

  [[noreturn]] void fail(const std::string& what) const {
    const std::uint64_t line = source_->line_number();
    // A damaged compressed stream decodes to wrong bytes before its checksum says so: then the
    // damage, not the line's content, is the error.
    if (std::string damage = source_->damage(); !damage.empty())
      throw TraceError(damage + "; the file is damaged, so line " + std::to_string(line) +
                       " is not what was written (" + what + ")");
    throw TraceError(header_.path + ":" + std::to_string(line) + ": " + what);
  }

  json parse_json_line(std::string_view line) {
    json j = parse_lenient(line);
    if (j.is_discarded() || !j.is_object()) fail("not a JSON object");
    return j;
  }

  // nlohmann::json refuses what simdjson refuses: text that is not UTF-8 is repaired first
  // (Note [text that is not UTF-8]) and counted in notes(). Discarded when still invalid.
  json parse_lenient(std::string_view line) {
    json j = json::parse(line, nullptr, false);
    if (!j.is_discarded()) return j;
    std::string fixed;
    if (repair_utf8(line, fixed) == 0) return j;
    j = json::parse(fixed, nullptr, false);
    if (!j.is_discarded() && repaired_lines_++ == 0) repaired_first_line_ = source_->line_number();
    return j;
  }

  void read_header() {
    std::string_view line;
    if (!source_->next_line(line)) {
      if (source_->stream_truncated() || source_->bytes_read() > 0) {
        throw TraceError(header_.path +
                         ": no complete line: the file was cut before its header was written out (a process "
                         "killed before the trace writer's first flush?); nothing to read");
      }
      throw TraceError(header_.path + ": empty file, not a vramtrace trace (docs/trace-format.md)");
    }
    json j = parse_lenient(line);
    if (j.is_discarded() && source_->truncated() && line.rfind("{\"a\":\"header\",\"format\":\"vramtrace\"", 0) == 0) {
      throw TraceError(header_.path +
                       ":1: the header line is cut (the process was killed while the file was "
                       "being created?); nothing to read");
    }
    if (!j.is_discarded() && j.is_object()) read_header_fields(j, details_);
    if (j.is_discarded() || !j.is_object() || details_.format != "vramtrace") {
      throw TraceError(header_.path +
                       ":1: not a vramtrace trace: the first line must be a header with \"format\":\"vramtrace\"");
    }
    int major = 0;
    const std::string& v = details_.version;
    auto r = std::from_chars(v.data(), v.data() + v.size(), major);
    if (r.ec != std::errc() || r.ptr == v.data()) {
      throw TraceError(header_.path + ":1: vramtrace trace with an unreadable version \"" + v + "\"");
    }
    if (major > kReadableMajor) {
      throw TraceError(header_.path + ":1: vramtrace trace format version " + v +
                       " is newer than this vramtrace reads (" + std::to_string(kReadableMajor) +
                       ".x); use a newer vramtrace");
    }

    for (std::size_t i = 0; i < details_.command_line.size(); ++i) {
      if (i != 0) header_.workload += ' ';
      header_.workload += details_.command_line[i];
    }
    header_.settings = details_.allocator_settings;
    header_.tool_settings = details_.settings;
    header_.pid = details_.pid;
    header_.host = details_.host;
    header_.rank = details_.rank;
    header_.local_rank = details_.local_rank;
    header_.cuda_visible_devices = details_.cuda_visible_devices;
    for (const auto& d : details_.devices) note_device_total(d.id, d.total_bytes);
    note_caps();
  }

  // The shim's `limit` setting ("settings": {"limit": "[0:15654932480,*:21474836480]"} or one
  // size) as the header's caps. A value this reader cannot parse is left out: the devices' totals
  // are the capped ones anyway, and a report must not fail on a setting it only adds to.
  void note_caps() {
    for (const auto& [key, value] : details_.settings) {
      if (key != "limit") continue;
      DeviceLimits limits;
      std::string rest, error;
      if (!split_device_limits("limit:" + value, rest, limits, error)) continue;
      header_.caps.clear();
      constexpr const char* kWhat = "the cap of vramtrace run --limit";
      if (limits.others_bytes) header_.caps.push_back({-1, limits.others_bytes, kWhat});
      for (const auto& [d, b] : limits.by_device) header_.caps.push_back({d, b, kWhat});
    }
  }

  // Devices by ordinal; device_total_bytes is the lowest-numbered one's.
  void note_device_total(std::int32_t id, std::uint64_t total) {
    for (auto& [d, b] : header_.device_totals) {
      if (d == id) {
        b = total;
        return;
      }
    }
    header_.device_totals.emplace_back(id, total);
    std::int32_t lowest = header_.device_totals.front().first;
    header_.device_total_bytes = header_.device_totals.front().second;
    for (const auto& [d, b] : header_.device_totals) {
      if (d < lowest) {
        lowest = d;
        header_.device_total_bytes = b;
      }
    }
  }

  void fill_recorded_stats() {
    header_.recorded_stats.clear();
    header_.recorded_device_stats.clear();
    const std::vector<std::pair<std::string, std::int64_t>>* best = nullptr;
    std::int32_t best_device = 0;
    for (const auto& [device, stats] : trailer_.device_stats) {
      if (best == nullptr || device < best_device) {
        best = &stats;
        best_device = device;
      }
    }
    if (best != nullptr) header_.recorded_stats = *best;
    header_.recorded_device_stats = trailer_.device_stats;
  }

  // The fast path, for lines exactly as our writer makes them: {"a":"<kind>" then ,"key":<integer>
  // pairs, no spaces, no escapes, no other value types. Returns false for anything else, which
  // then goes through simdjson (mark names, oom snapshots, other writers, malformed lines).
  static bool parse_canonical(std::string_view line, LineFields& f) {
    const char* p = line.data();
    const char* const end = p + line.size();
    if (line.size() < 8 || std::memcmp(p, "{\"a\":\"", 6) != 0) return false;
    p += 6;
    const char* a0 = p;
    while (p < end && *p != '"') {
      if (*p == '\\') return false;
      ++p;
    }
    if (p == end) return false;
    f.action = std::string_view(a0, static_cast<std::size_t>(p - a0));
    ++p;
    for (;;) {
      if (p == end) return false;
      if (*p == '}') return p + 1 == end;
      if (*p != ',' || ++p == end || *p != '"') return false;
      const char* k0 = ++p;
      while (p < end && *p != '"') {
        if (*p == '\\') return false;
        ++p;
      }
      if (p == end) return false;
      std::string_view key(k0, static_cast<std::size_t>(p - k0));
      if (++p == end || *p != ':') return false;
      ++p;
      bool negative = false;
      if (p < end && *p == '-') {
        negative = true;
        ++p;
      }
      const char* d0 = p;
      std::uint64_t v = 0;
      while (p < end && *p >= '0' && *p <= '9') {
        v = v * 10 + static_cast<std::uint64_t>(*p - '0');
        ++p;
      }
      const std::size_t digits = static_cast<std::size_t>(p - d0);
      if (digits == 0 || digits > 18 || (digits > 1 && *d0 == '0')) return false;  // big or not JSON: slow path
      if (p < end && (*p == '.' || *p == 'e' || *p == 'E')) return false;
      const EventKey id = event_key(key);
      if (negative && !kSignedKey[static_cast<std::size_t>(id)]) return false;  // unsigned: not ours
      const std::int64_t sv = negative ? -static_cast<std::int64_t>(v) : static_cast<std::int64_t>(v);
      switch (id) {
#define VRAMTRACE_EVENT_FIELD(key, type, member, actions, absent) \
  case EventKey::key:                                             \
    take_integer(f.key, v, sv);                                   \
    break;
#include "vramtrace/trace/schema.def"
        default:
          break;  // text fields take no integer; unknown keys: a newer minor version
      }
    }
  }

  // Any valid JSON object line, with simdjson On-Demand. Returns the error (SUCCESS when parsed).
  simdjson::error_code parse_general(std::string_view line, LineFields& f) {
    if (padded_.size() < line.size() + simdjson::SIMDJSON_PADDING)
      padded_.resize(line.size() + simdjson::SIMDJSON_PADDING + 256);
    std::memcpy(padded_.data(), line.data(), line.size());
    simdjson::padded_string_view view(padded_.data(), line.size(), padded_.size());
    simdjson::error_code err = simdjson::SUCCESS;
    simdjson::ondemand::document doc;
    err = parser_.iterate(view).get(doc);
    simdjson::ondemand::object obj;
    if (!err) err = doc.get_object().get(obj);
    if (err) return err;
    for (auto field : obj) {
      std::string_view key;
      if ((err = field.unescaped_key().get(key))) break;
      simdjson::ondemand::value value;
      if ((err = field.value().get(value))) break;
      if (key == "a") {
        err = value.get_string().get(f.action);
        // A record of call stacks shares keys with events ("s" of a string): not an event line.
        if (!err && is_stack_record(f.action)) break;
      } else {
        switch (event_key(key)) {
#define VRAMTRACE_EVENT_FIELD(key, type, member, actions, absent) \
  case EventKey::key:                                             \
    err = get_field(value, f.key);                                \
    break;
#define VRAMTRACE_EVENT_TEXT_FIELD(key, type, actions, absent) \
  case EventKey::key:                                          \
    err = get_field(value, f.key);                             \
    break;
#include "vramtrace/trace/schema.def"
          default:
            break;  // unknown keys: a newer minor version
        }
      }
      if (err) break;
    }
    return err;
  }

  // Note [impossible values]: a value no writer can produce is refused with the field that holds
  // it (the file and line come from fail): shown as memory it would read as "-1 B", a negative
  // rounding waste, a device no replay accepts or a trace that lasts centuries. The bounds:
  //  - sizes up to 1 EiB (the PyTorch-history reader's bound);
  //  - a block at least its request: the allocator hands out the request rounded up, never down
  //    (docs/pytorch-allocator.md, "Rounding"), and the writer leaves "b" out when equal;
  //  - devices 0..1023 (replay's);
  //  - times from kEarliestNs before the header's origin to kLatestNs after it: the shim stamps an
  //    event with CLOCK_MONOTONIC when its hook runs and the writer subtracts the origin it took
  //    when it opened the file, so an event is stamped before the origin only by the time the
  //    first hooked call took to open the file (milliseconds); ten years bounds any real run.
  static constexpr std::int64_t kEarliestNs = -10'000'000'000;                       // 10 s
  static constexpr std::int64_t kLatestNs = 10LL * 366 * 24 * 3600 * 1'000'000'000;  // 10 years
  void refuse_impossible(Action action, const LineFields& f) {
    constexpr std::uint64_t kMaxBytes = std::uint64_t{1} << 60;
    constexpr std::int64_t kMaxDevice = 1023;
    if (action != Action::mark && f.r > kMaxBytes)
      fail(fmt::format("field \"r\": impossible size {} bytes (more than 1 EiB)", f.r));
    const bool block = action == Action::alloc || action == Action::free_requested || action == Action::free_completed;
    if (block && f.b && *f.b > kMaxBytes)
      fail(fmt::format("field \"b\": impossible block size {} bytes (more than 1 EiB)", *f.b));
    if (block && f.b && *f.b != 0 && *f.b < f.r)  // 0: not recorded, rounded by the model
      fail(
          fmt::format("field \"b\": a block of {} bytes below its request \"r\" of {} bytes (an allocator rounds "
                      "a request up, never down)",
                      *f.b, f.r));
    if (static_cast<std::int64_t>(f.d) < 0 || static_cast<std::int64_t>(f.d) > kMaxDevice)
      fail(fmt::format("field \"d\": device {} outside 0..{}", static_cast<std::int64_t>(f.d), kMaxDevice));
    if (f.t < kEarliestNs || f.t > kLatestNs)
      fail(
          fmt::format("field \"t\": impossible time {} ns after the header's origin (an event is stamped at most "
                      "10 s before the origin and at most 10 years after it)",
                      f.t));
  }

  // One line: an event (filled into `out`), the trailer, a skipped kind, or a cut last line.
  int parse_line(std::string_view line, TraceRecord& out) {
    LineFields f;
    if (!parse_canonical(line, f)) {
      f = LineFields{};
      simdjson::error_code err = parse_general(line, f);
      if ((err == simdjson::UTF8_ERROR || err == simdjson::STRING_ERROR) && repair_utf8(line, repaired_) != 0) {
        // Note [text that is not UTF-8]: read the repaired line, and say so in notes().
        f = LineFields{};
        if (parse_general(repaired_, f) == simdjson::SUCCESS) {
          if (repaired_lines_++ == 0) repaired_first_line_ = source_->line_number();
          line = repaired_;
          err = simdjson::SUCCESS;
        } else {
          f = LineFields{};
          err = parse_general(line, f);
        }
      }
      if (err) {
        // A record of call stacks whose "a" is not its first key.
        if (json j = parse_lenient(line); !j.is_discarded() && j.is_object()) {
          if (const std::string kind = json_string(j, "a"); is_stack_record(kind)) {
            read_stack_record(kind, j);
            return kMeta;
          }
        }
        if (is_last_cut_line()) return kCut;
        if (line.front() != '{') fail("not a JSON object: " + excerpt(line) + " (one JSON object per line expected)");
        fail(fmt::format("malformed event ({}): {}", simdjson::error_message(err), excerpt(line)));
      }
    }
    const std::string_view action_text = f.action;
    if (action_text.empty()) fail("a record without its kind \"a\"");

    if (action_text == "trailer") {
      parse_trailer(parse_json_line(line), trailer_);
      fill_recorded_stats();
      saw_trailer_ = true;
      return kTrailer;
    }
    if (action_text == "header") fail("a second header (two traces concatenated?)");
    if (action_text == "device") {
      // A device the process reached after the header was written (format 1.1).
      json j = parse_json_line(line);
      VramtraceHeaderDetails::Device d;
      read_device_fields(j, d);
      if (d.id < 0) fail("a device record with a negative id");
      note_device_total(d.id, d.total_bytes);
      bool known = false;
      for (auto& old : details_.devices) {
        if (old.id == d.id) {
          old = d;
          known = true;
        }
      }
      if (!known) details_.devices.push_back(std::move(d));
      return kMeta;
    }
    if (is_stack_record(action_text)) {
      read_stack_record(action_text, parse_json_line(line));
      return kMeta;
    }
    std::optional<Action> action = parse_action(action_text);
    if (!action || *action == Action::snapshot) {
      ++skipped_;
      ++event_lines_;
      if (action)
        ++lines_by_action_[static_cast<std::size_t>(*action)];
      else
        ++skipped_by_kind_[std::string(action_text)];
      return kSkipped;
    }
    refuse_impossible(*action, f);
    out = TraceRecord{};
    out.action = *action;
    out.addr = f.p;
    out.size = f.r;
    out.stream = f.s;
    // Saturate: a hostile trace's offsets must not overflow (found by fuzzing: docs/reliability.md,
    // finding 2).
    if (__builtin_add_overflow(details_.start_unix_ns, f.t, &out.time_ns))
      out.time_ns = f.t < 0 ? INT64_MIN : INT64_MAX;
    out.device = static_cast<std::int32_t>(f.d);
    out.device_free = f.free;
    out.block_size =
        (*action == Action::alloc || *action == Action::free_requested || *action == Action::free_completed)
            ? (f.b ? *f.b : f.r)
            : 0;
    out.oom_retries =
        f.retries && *f.retries <= static_cast<std::uint64_t>(INT64_MAX) ? static_cast<std::int64_t>(*f.retries) : -1;
    block_bytes_ = f.b ? *f.b : f.r;
    thread_id_ = static_cast<std::uint32_t>(f.th);
    out.thread_id = thread_id_;
    entry_point_ = static_cast<std::uint32_t>(f.e);
    out.entry_point = entry_point_;
    memory_kind_ = static_cast<std::uint32_t>(f.k);
    out.memory_kind = static_cast<std::uint8_t>(f.k);
    if (f.st != 0 && schema::carries(schema::carried_by::stacked, *action)) out.stack_id = table_stack(f.st);
    mark_name_.assign(f.name);  // empty when the line has none
    has_snapshot_ = false;
#define VRAMTRACE_EVENT_TEXT_FIELD(key, type, actions, absent) \
  if (schema::carries(schema::carried_by::actions, *action)) read_event_text(line, #key, schema::type{});
#include "vramtrace/trace/schema.def"
    return kEvent;
  }

  // Text fields beyond what simdjson gave: a mark's name is in LineFields already; the oom's
  // snapshot object is read with nlohmann::json, from every line of an action that carries it
  // (so such a line must be valid for both parsers).
  void read_event_text(std::string_view, const char*, schema::string) {}
  void read_event_text(std::string_view line, const char* key, schema::snapshot) {
    json j = parse_json_line(line);
    if (auto snap = j.find(key); snap != j.end() && snap->is_object()) {
      snapshot_ = parse_snapshot(*snap);
      has_snapshot_ = true;
    }
  }

  // A line that does not parse is accepted only as the file's last line without its '\n' (the
  // writer was killed mid-line, Note [trace durability]).
  bool is_last_cut_line() { return source_->truncated(); }

  // --- call stacks (format 1.2) ---------------------------------------------------------------
  // Modules and strings by their trace id; stacks go into stacks_ (ids dense from 1 in order of
  // appearance, as every reader's StackTable) through a map from the trace's ids. A record of
  // the right kind but the wrong shape is skipped with a note (the events that name it then
  // read without a stack): a call stack is never worth refusing the figures of a trace.

  void note_once(std::string& slot, std::string text) {
    if (slot.empty()) slot = std::move(text);
  }

  void read_stack_record(std::string_view kind, const json& j) {
    const std::string where = "line " + std::to_string(source_->line_number());
    const auto id_it = j.find("id");
    if (id_it == j.end() || !id_it->is_number_unsigned() || id_it->get<std::uint64_t>() == 0 ||
        id_it->get<std::uint64_t>() > UINT32_MAX) {
      ++damaged_records_;
      note_once(damaged_example_, where + ": a " + std::string(kind) + " record without a valid \"id\"");
      return;
    }
    const auto id = static_cast<std::uint32_t>(id_it->get<std::uint64_t>());
    if (kind == "module") {
      trace::ModuleInfo m;
#define VRAMTRACE_MODULE_FIELD(key, type, member, absent) \
  read_value<schema::Absent::absent>(j, #key, schema::type{}, m.member);
#include "vramtrace/trace/schema.def"
      modules_[id] = std::move(m);
    } else if (kind == "string") {
      trace::StringRecord r;
#define VRAMTRACE_STRING_FIELD(key, type, member, absent) \
  read_value<schema::Absent::absent>(j, #key, schema::type{}, r.member);
#include "vramtrace/trace/schema.def"
      strings_[id] = std::move(r.text);
    } else {
      read_stack(id, j, where);
    }
  }

  void read_stack(std::uint32_t id, const json& j, const std::string& where) {
    const auto frames = j.find("frames");
    if (frames == j.end() || !frames->is_array()) {
      ++damaged_records_;
      note_once(damaged_example_, where + ": a stack record without its \"frames\"");
      return;
    }
    std::deque<std::string> text;  // the frames' strings until the table copies them (never moved)
    std::vector<Frame> out;
    out.reserve(frames->size());
    for (const json& jf : *frames) {
      trace::FrameRecord f;
      if (!jf.is_object() || (!jf.contains("pc") && !jf.contains("f"))) {
        ++damaged_records_;
        note_once(damaged_example_, where + ": a stack frame that is neither native (\"pc\") nor Python (\"f\")");
        return;
      }
      f.python = jf.contains("f");
      if (f.python) {
#define VRAMTRACE_PYTHON_FRAME_FIELD(key, type, member, absent) \
  read_value<schema::Absent::absent>(jf, #key, schema::type{}, f.member);
#include "vramtrace/trace/schema.def"
        Frame fr;
        fr.filename = string_of(f.file, where);
        fr.name = string_of(f.name, where);
        fr.line = f.line;
        out.push_back(fr);
      } else {
#define VRAMTRACE_NATIVE_FRAME_FIELD(key, type, member, absent) \
  read_value<schema::Absent::absent>(jf, #key, schema::type{}, f.member);
#include "vramtrace/trace/schema.def"
        out.push_back(native_frame(f, where, text));
      }
    }
    if (stack_ids_.count(id) != 0) {
      note_once(redefined_example_,
                where + ": stack " + std::to_string(id) + " is defined a second time; the first is kept");
      return;
    }
    stack_ids_[id] = stacks_->intern(out);
  }

  std::string_view string_of(std::uint32_t id, const std::string& where) {
    if (auto it = strings_.find(id); it != strings_.end()) return it->second;
    ++unknown_strings_;
    note_once(unknown_string_example_, where + ": string " + std::to_string(id));
    return "??";
  }

  // A native frame: "libfoo.so+0x1234" (the link-time address of the return address in its
  // module) until a symbolizer names it; "0x7f..." when it lay in no module the writer knew.
  Frame native_frame(const trace::FrameRecord& f, const std::string& where, std::deque<std::string>& text) {
    Frame fr;
    const trace::ModuleInfo* m = nullptr;
    if (f.module != 0) {
      if (auto it = modules_.find(f.module); it != modules_.end())
        m = &it->second;
      else {
        ++unknown_modules_;
        note_once(unknown_module_example_, where + ": module " + std::to_string(f.module));
      }
    }
    if (m == nullptr || f.pc < m->bias) {
      text.push_back(fmt::format("0x{:x}", f.pc));
      fr.name = text.back();
      return fr;
    }
    fr.module = m->path;
    fr.build_id = m->build_id;
    fr.address = f.pc - m->bias;
    const std::size_t slash = m->path.rfind('/');
    text.push_back(
        fmt::format("{}+0x{:x}", slash == std::string::npos ? m->path : m->path.substr(slash + 1), fr.address));
    fr.name = text.back();
    return fr;
  }

  std::uint32_t table_stack(std::uint64_t trace_id) {
    if (trace_id <= UINT32_MAX) {
      if (auto it = stack_ids_.find(static_cast<std::uint32_t>(trace_id)); it != stack_ids_.end()) return it->second;
    }
    ++unknown_stack_events_;
    if (unknown_stack_example_ == 0) unknown_stack_example_ = source_->line_number();
    return 0;
  }

 public:
  std::shared_ptr<const StackTable> stacks() const override {
    name_frames();
    return stacks_;
  }

  void set_frame_namer(std::shared_ptr<FrameNamer> namer) override { namer_ = std::move(namer); }

  // Note [lost events]: the events the writer dropped (its full buffer under
  // VRAMTRACE_TRACE_ON_FULL=drop; never written, so not in the trailer's "events"), plus the event
  // lines the trailer says were written that the file does not hold. Those are counted in total
  // ("events") and per action ("counts"), and the larger shortfall is taken: a file that lost
  // allocations but holds as many lines in all (lines it should not have, an edited file) still
  // lost them. Lines beyond the counts are not lost events. Unknown (0) without a trailer: the
  // trace is incomplete() then. Saturates instead of wrapping on a hostile trailer.
  std::uint64_t lost_events() const override {
    if (!trailer_.present || !finished_) return 0;
    auto shortfall = [](std::uint64_t written, std::uint64_t held) { return written > held ? written - held : 0; };
    std::uint64_t by_action = 0;
    for (const auto& [name, written] : trailer_.counts) {
      std::uint64_t held = 0;
      if (const std::optional<Action> a = parse_action(name))
        held = lines_by_action_[static_cast<std::size_t>(*a)];
      else if (const auto it = skipped_by_kind_.find(name); it != skipped_by_kind_.end())
        held = it->second;
      by_action = saturating_add(by_action, shortfall(written, held));
    }
    return saturating_add(trailer_.dropped, std::max(shortfall(trailer_.events, event_lines_), by_action));
  }

  std::vector<std::string> notes() const override {
    name_frames();
    std::vector<std::string> out;
    if (unknown_stack_events_ != 0)
      out.push_back(
          fmt::format("{} events name a call stack that the trace never defined (first at line {}); they are counted "
                      "without a stack",
                      unknown_stack_events_, unknown_stack_example_));
    if (damaged_records_ != 0)
      out.push_back(
          fmt::format("{} damaged call-stack records were skipped ({}); their events are counted without a stack",
                      damaged_records_, damaged_example_));
    if (unknown_modules_ != 0)
      out.push_back(fmt::format("{} native frames name a module the trace never defined ({}); shown by address",
                                unknown_modules_, unknown_module_example_));
    if (unknown_strings_ != 0)
      out.push_back(fmt::format("{} Python frames name a string the trace never defined ({}); shown as ??",
                                unknown_strings_, unknown_string_example_));
    if (!redefined_example_.empty()) out.push_back(redefined_example_);
    if (repaired_lines_ != 0)
      out.push_back(
          fmt::format("{} lines held text that is not UTF-8 (first at line {}): read with each bad byte "
                      "or lone surrogate replaced by U+FFFD",
                      repaired_lines_, repaired_first_line_));
    if (namer_)
      for (std::string& n : namer_->notes()) out.push_back(std::move(n));
    return out;
  }

 private:
  // The namer's names for the native frames of the stacks read since the last call (const: the
  // names are found when the stacks are asked for; nothing the caller sees changes but names).
  void name_frames() const {
    if (!namer_) return;
    for (std::uint32_t id = named_ + 1; id <= stacks_->size(); ++id) {
      const std::vector<Frame>& frames = *stacks_->get(id);
      for (std::size_t i = 0; i < frames.size(); ++i) {
        const Frame& f = frames[i];
        if (f.module.empty() || !f.filename.empty()) continue;
        const std::optional<FrameNamer::Name> n = namer_->name(f.module, f.build_id, f.address);
        if (!n || (n->function.empty() && n->file.empty())) continue;
        Frame named = f;
        named.filename = n->file;
        named.line = n->file.empty() ? 0 : n->line;
        if (!n->function.empty()) named.name = n->function;
        stacks_->replace_frame(id, i, named);
      }
    }
    named_ = static_cast<std::uint32_t>(stacks_->size());
  }

 private:
  std::unique_ptr<LineSource> source_;
  TraceHeader header_;
  VramtraceHeaderDetails details_;
  VramtraceTrailer trailer_;
  simdjson::ondemand::parser parser_;
  std::string padded_;
  bool finished_ = false;
  bool saw_trailer_ = false;
  bool cut_ = false;
  bool last_line_nul_ = false;
  std::uint64_t nul_bytes_ = 0;
  bool incomplete_ = false;
  std::uint64_t block_bytes_ = 0;
  std::uint32_t thread_id_ = 0;
  std::uint32_t entry_point_ = 0;
  std::uint32_t memory_kind_ = 0;
  std::string mark_name_;
  Snapshot snapshot_;
  bool has_snapshot_ = false;
  std::uint64_t skipped_ = 0;
  std::uint64_t event_lines_ = 0;  // event lines read (events and skipped ones), for lost_events
  // The same per action (by Action's value; Action has fewer than 32), and per kind this reader
  // does not know (skipped lines of a newer minor version), for the trailer's "counts".
  std::array<std::uint64_t, 32> lines_by_action_{};
  static_assert(static_cast<std::size_t>(Action::mark) < 32, "lines_by_action_ is indexed by Action");
  std::unordered_map<std::string, std::uint64_t> skipped_by_kind_;
  std::shared_ptr<StackTable> stacks_ = std::make_shared<StackTable>();
  std::unordered_map<std::uint32_t, trace::ModuleInfo> modules_;
  std::unordered_map<std::uint32_t, std::string> strings_;
  std::unordered_map<std::uint32_t, std::uint32_t> stack_ids_;  // trace id -> stacks_ id
  std::uint64_t unknown_stack_events_ = 0;
  std::uint64_t unknown_stack_example_ = 0;
  std::uint64_t damaged_records_ = 0;
  std::string damaged_example_;
  std::uint64_t unknown_modules_ = 0;
  std::string unknown_module_example_;
  std::uint64_t unknown_strings_ = 0;
  std::string unknown_string_example_;
  std::string repaired_;  // the last line repair_utf8 mended; the fields of that line point into it
  std::uint64_t repaired_lines_ = 0;
  std::uint64_t repaired_first_line_ = 0;
  std::string redefined_example_;
  std::shared_ptr<FrameNamer> namer_;
  mutable std::uint32_t named_ = 0;  // stacks 1..named_ went through the namer
};

}  // namespace

std::unique_ptr<VramtraceTraceReader> open_vramtrace_trace_details(const std::string& path) {
  return std::make_unique<Reader>(path);
}

std::unique_ptr<TraceReader> open_vramtrace_trace(const std::string& path) {
  return open_vramtrace_trace_details(path);
}

}  // namespace vramtrace
