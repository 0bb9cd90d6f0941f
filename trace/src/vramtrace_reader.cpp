// Reader of vramtrace's own JSON Lines trace (docs/trace-format.md).
//
// Event lines (the bulk) are parsed with simdjson's On-Demand API from a reused padded buffer;
// the rare header, trailer and oom lines with nlohmann::json. Memory stays bounded: one line and
// the decompression buffers of LineSource.
#include "vramtrace/trace/vramtrace_reader.h"

#include <simdjson.h>

#include <charconv>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>

#include "vramtrace/trace/byte_source.h"

namespace vramtrace {

namespace {

constexpr int kReadableMajor = 1;

using nlohmann::json;

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

Snapshot parse_snapshot(const json& j) {
  Snapshot s;
  auto segs = j.find("segments");
  if (segs == j.end() || !segs->is_array()) return s;
  for (const json& js : *segs) {
    SegmentSnapshot seg;
    seg.device = static_cast<std::int32_t>(json_int(js, "device"));
    seg.address = json_uint(js, "address");
    seg.total_size = json_uint(js, "total_size");
    seg.allocated_size = json_uint(js, "allocated_size");
    seg.active_size = json_uint(js, "active_size");
    seg.requested_size = json_uint(js, "requested_size");
    seg.stream = json_uint(js, "stream");
    seg.is_large = json_string(js, "segment_type") != "small";
    seg.is_expandable = js.value("is_expandable", false);
    if (auto blocks = js.find("blocks"); blocks != js.end() && blocks->is_array()) {
      for (const json& jb : *blocks) {
        BlockSnapshot b;
        b.address = json_uint(jb, "address");
        b.size = json_uint(jb, "size");
        b.requested_size = json_uint(jb, "requested_size");
        std::string st = json_string(jb, "state");
        b.state = st == "active_allocated"      ? BlockState::active_allocated
                  : st == "active_pending_free" ? BlockState::active_pending_free
                                                : BlockState::inactive;
        b.mapped = jb.value("mapped", true);
        seg.blocks.push_back(b);
      }
    }
    s.segments.push_back(std::move(seg));
  }
  return s;
}

void parse_trailer(const json& j, VramtraceTrailer& t) {
  t.present = true;
  t.time_ns = json_int(j, "t");
  t.events = json_uint(j, "events");
  t.dropped = json_uint(j, "dropped");
  t.counts.clear();
  if (auto c = j.find("counts"); c != j.end() && c->is_object()) {
    for (auto it = c->begin(); it != c->end(); ++it) {
      if (it->is_number_integer()) t.counts.emplace_back(it.key(), it->get<std::uint64_t>());
    }
  }
  t.device_stats.clear();
  if (auto ds = j.find("devices"); ds != j.end() && ds->is_array()) {
    for (const json& jd : *ds) {
      std::vector<std::pair<std::string, std::int64_t>> stats;
      if (auto st = jd.find("stats"); st != jd.end() && st->is_object()) {
        for (auto it = st->begin(); it != st->end(); ++it) {
          if (it->is_number_integer()) stats.emplace_back(it.key(), it->get<std::int64_t>());
        }
      }
      t.device_stats.emplace_back(static_cast<std::int32_t>(json_int(jd, "device")), std::move(stats));
    }
  }
}

// The trailer of an uncompressed file, read from its last 1 MiB; nullopt if absent or compressed.
std::optional<VramtraceTrailer> peek_trailer(const std::string& path) {
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
    throw TraceError(header_.path + ":" + std::to_string(source_->line_number()) + ": " + what);
  }

  json parse_json_line(std::string_view line) {
    json j = json::parse(line, nullptr, false);
    if (j.is_discarded() || !j.is_object()) fail("not a JSON object");
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
    json j = json::parse(line, nullptr, false);
    if (j.is_discarded() && source_->truncated() && line.rfind("{\"a\":\"header\",\"format\":\"vramtrace\"", 0) == 0) {
      throw TraceError(header_.path + ":1: the header line is cut (the process was killed while the file was "
                                      "being created?); nothing to read");
    }
    if (j.is_discarded() || !j.is_object() || json_string(j, "format") != "vramtrace") {
      throw TraceError(header_.path +
                       ":1: not a vramtrace trace: the first line must be a header with \"format\":\"vramtrace\"");
    }
    details_.version = json_string(j, "version");
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
    details_.tool_version = json_string(j, "tool_version");
    details_.pid = json_int(j, "pid");
    details_.ppid = json_int(j, "ppid");
    details_.host = json_string(j, "host");
    details_.rank = json_string(j, "rank");
    details_.local_rank = json_string(j, "local_rank");
    if (auto v = j.find("cuda_visible_devices"); v != j.end() && v->is_string())
      details_.cuda_visible_devices = v->get<std::string>();
    if (auto c = j.find("command_line"); c != j.end() && c->is_array()) {
      for (const json& a : *c) {
        if (a.is_string()) details_.command_line.push_back(a.get<std::string>());
      }
    }
    details_.start_unix_ns = json_int(j, "start_unix_ns");
    details_.origin_monotonic_ns = json_int(j, "origin_monotonic_ns");
    details_.cuda_driver_version = static_cast<int>(json_int(j, "cuda_driver_version"));
    details_.cuda_runtime_version = static_cast<int>(json_int(j, "cuda_runtime_version"));
    if (auto ds = j.find("devices"); ds != j.end() && ds->is_array()) {
      for (const json& jd : *ds) {
        VramtraceHeaderDetails::Device d;
        d.id = static_cast<std::int32_t>(json_int(jd, "id"));
        d.name = json_string(jd, "name");
        d.total_bytes = json_uint(jd, "total_bytes");
        d.uuid = json_string(jd, "uuid");
        details_.devices.push_back(std::move(d));
      }
    }
    details_.allocator_settings = json_string(j, "allocator_settings");
    if (auto s = j.find("settings"); s != j.end() && s->is_object()) {
      for (auto it = s->begin(); it != s->end(); ++it) {
        details_.settings.emplace_back(it.key(), it->is_string() ? it->get<std::string>() : it->dump());
      }
    }
    if (auto e = j.find("entry_points"); e != j.end() && e->is_array()) {
      for (const json& a : *e) details_.entry_points.push_back(a.is_string() ? a.get<std::string>() : std::string());
    }
    if (auto t = j.find("trace"); t != j.end() && t->is_object()) details_.on_full = json_string(*t, "on_full");

    for (std::size_t i = 0; i < details_.command_line.size(); ++i) {
      if (i != 0) header_.workload += ' ';
      header_.workload += details_.command_line[i];
    }
    header_.settings = details_.allocator_settings;
    header_.pid = details_.pid;
    header_.host = details_.host;
    header_.rank = details_.rank;
    header_.local_rank = details_.local_rank;
    header_.cuda_visible_devices = details_.cuda_visible_devices;
    for (const auto& d : details_.devices) note_device_total(d.id, d.total_bytes);
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

  // One line: an event (filled into `out`), the trailer, a skipped kind, or a cut last line.
  struct LineFields {
    std::string_view action;
    std::int64_t t = 0, d = 0;
    std::uint64_t s = 0, p = 0, r = 0, free_bytes = 0, th = 0, e = 0, k = 0;
    std::optional<std::uint64_t> retries;
    std::optional<std::uint64_t> b;
    bool has_name = false;
  };

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
      if (negative && key != "t" && key != "d") return false;
      const std::int64_t sv = negative ? -static_cast<std::int64_t>(v) : static_cast<std::int64_t>(v);
      if (key.size() == 1) {
        switch (key[0]) {
          case 't':
            f.t = sv;
            break;
          case 'd':
            f.d = sv;
            break;
          case 's':
            f.s = v;
            break;
          case 'p':
            f.p = v;
            break;
          case 'r':
            f.r = v;
            break;
          case 'b':
            f.b = v;
            break;
          case 'e':
            f.e = v;
            break;
          case 'k':
            f.k = v;
            break;
          default:
            break;
        }
      } else if (key == "th") {
        f.th = v;
      } else if (key == "free") {
        f.free_bytes = v;
      } else if (key == "retries") {
        f.retries = v;
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
      if (key.size() == 1) {
        switch (key[0]) {
          case 'a':
            err = value.get_string().get(f.action);
            break;
          case 't':
            err = value.get_int64().get(f.t);
            break;
          case 'd':
            err = value.get_int64().get(f.d);
            break;
          case 's':
            err = value.get_uint64().get(f.s);
            break;
          case 'p':
            err = value.get_uint64().get(f.p);
            break;
          case 'r':
            err = value.get_uint64().get(f.r);
            break;
          case 'b': {
            std::uint64_t v = 0;
            err = value.get_uint64().get(v);
            f.b = v;
            break;
          }
          case 'e':
            err = value.get_uint64().get(f.e);
            break;
          case 'k':
            err = value.get_uint64().get(f.k);
            break;
          default:
            break;  // unknown one-letter keys: a newer minor version
        }
      } else if (key == "th") {
        err = value.get_uint64().get(f.th);
      } else if (key == "free") {
        err = value.get_uint64().get(f.free_bytes);
      } else if (key == "retries") {
        std::uint64_t v = 0;
        err = value.get_uint64().get(v);
        if (!err) f.retries = v;
      } else if (key == "name") {
        std::string_view name;
        err = value.get_string().get(name);
        if (!err) {
          mark_name_.assign(name);
          f.has_name = true;
        }
      }
      if (err) break;
    }
    return err;
  }

  // One line: an event (filled into `out`), the trailer, a skipped kind, or a cut last line.
  int parse_line(std::string_view line, TraceRecord& out) {
    LineFields f;
    if (!parse_canonical(line, f)) {
      f = LineFields{};
      if (simdjson::error_code err = parse_general(line, f)) {
        if (is_last_cut_line()) return kCut;
        if (line.front() != '{') fail("not a JSON object: " + excerpt(line) + " (one JSON object per line expected)");
        fail(std::string("malformed event: ") + simdjson::error_message(err));
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
      d.id = static_cast<std::int32_t>(json_int(j, "id"));
      d.name = json_string(j, "name");
      d.total_bytes = json_uint(j, "total_bytes");
      d.uuid = json_string(j, "uuid");
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
    std::optional<Action> action = parse_action(action_text);
    if (!action || *action == Action::snapshot) {
      ++skipped_;
      return kSkipped;
    }
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
    out.device_free = f.free_bytes;
    out.block_size = (*action == Action::alloc || *action == Action::free_requested || *action == Action::free_completed)
                         ? (f.b ? *f.b : f.r)
                         : 0;
    out.oom_retries = f.retries && *f.retries <= static_cast<std::uint64_t>(INT64_MAX) ? static_cast<std::int64_t>(*f.retries) : -1;
    block_bytes_ = f.b ? *f.b : f.r;
    thread_id_ = static_cast<std::uint32_t>(f.th);
    entry_point_ = static_cast<std::uint32_t>(f.e);
    memory_kind_ = static_cast<std::uint32_t>(f.k);
    out.memory_kind = static_cast<std::uint8_t>(f.k);
    if (!f.has_name) mark_name_.clear();
    has_snapshot_ = false;
    if (*action == Action::oom) {
      json j = parse_json_line(line);
      if (auto snap = j.find("snapshot"); snap != j.end() && snap->is_object()) {
        snapshot_ = parse_snapshot(*snap);
        has_snapshot_ = true;
      }
    }
    return kEvent;
  }

  // A line that does not parse is accepted only as the file's last line without its '\n' (the
  // writer was killed mid-line, Note [trace durability]).
  bool is_last_cut_line() { return source_->truncated(); }

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
};

}  // namespace

std::unique_ptr<VramtraceTraceReader> open_vramtrace_trace_details(const std::string& path) {
  return std::make_unique<Reader>(path);
}

std::unique_ptr<TraceReader> open_vramtrace_trace(const std::string& path) {
  return open_vramtrace_trace_details(path);
}

}  // namespace vramtrace
