// Reader of PyTorch's allocator history written as JSON lines (see readers.h and
// tests/data/torch-h200/README.md). Entries are parsed with simdjson's on-demand API.
#include <simdjson.h>

#include <cmath>
#include <cstring>

#include <nlohmann/json.hpp>

#include <fmt/format.h>

#include "readers/readers.h"
#include "vramtrace/trace/byte_source.h"

namespace vramtrace {
namespace {

namespace od = simdjson::ondemand;

class TorchTraceReader final : public TraceReader {
 public:
  explicit TorchTraceReader(const std::string& path) : lines_(LineSource::open(path)) {
    header_.path = path;
    header_.format = "torchtrace";
    // The header is optional: a first line with "action" is already an entry.
    std::string_view line;
    while (lines_->next_line(line)) {
      if (is_blank(line)) continue;
      if (line.find("\"action\"") != std::string_view::npos && line.find("\"kind\"") == std::string_view::npos) {
        pending_line_ = true;
        pending_ = std::string(line);
      } else {
        read_header(line);
      }
      break;
    }
  }

  const TraceHeader& header() const override { return header_; }

  bool next(TraceRecord& out) override {
    std::string_view line;
    for (;;) {
      if (pending_line_) {
        pending_line_ = false;
        pending_.reserve(pending_.size() + LineSource::kPadding);
        parse_entry(std::string_view(pending_.data(), pending_.size()), pending_.capacity(), out);
        return true;
      }
      if (!lines_->next_line(line)) {
        if (lines_->stream_truncated())
          throw TraceError(fmt::format(
              "{}: {} stream ends early after line {} (compressed offset {}): the file is cut off", header_.path,
              compression_name(lines_->compression()), lines_->line_number(), lines_->bytes_read()));
        return false;
      }
      if (is_blank(line)) continue;
      if (!lines_->truncated()) {
        parse_entry(line, line.size() + LineSource::kPadding, out);
        return true;
      }
      // The last line, without its '\n': whole, it is read; cut mid-way (a process that died while
      // it wrote the history), the trace ends before it and says so (incomplete()), as a vramtrace
      // trace does.
      try {
        parse_entry(line, line.size() + LineSource::kPadding, out);
      } catch (const TraceError&) {
        // A compressed stream that ends early is a damaged copy, said as such (docs/reliability.md).
        if (lines_->stream_truncated()) throw;
        cut_line_ = true;
        return false;
      }
      return true;
    }
  }

  std::string position() const override { return fmt::format("line {}", lines_->line_number()); }
  bool incomplete() const override { return lines_->truncated(); }
  std::string incomplete_reason() const override {
    return cut_line_ ? "its last line is cut mid-way: the file is truncated" : TraceReader::incomplete_reason();
  }
  std::uint64_t bytes_read() const override { return lines_->bytes_read(); }
  std::uint64_t bytes_total() const override { return lines_->bytes_total(); }

 private:
  static bool is_blank(std::string_view s) {
    for (char c : s)
      if (c != ' ' && c != '\t' && c != '\r') return false;
    return true;
  }

  [[noreturn]] void fail(const std::string& what) const {
    const std::uint64_t line = lines_->line_number();
    // A damaged compressed stream decodes to wrong bytes before its checksum says so: then the
    // damage, not the line's content, is the error.
    if (std::string damage = lines_->damage(); !damage.empty())
      throw TraceError(
          fmt::format("{}; the file is damaged, so line {} is not what was written ({})", damage, line, what));
    std::string cut = lines_->truncated() ? " (the last line is cut off: the file is truncated)" : "";
    throw TraceError(fmt::format("{}: line {}: {}{}", header_.path, line, what, cut));
  }

  void read_header(std::string_view line) {
    nlohmann::json h;
    try {
      h = nlohmann::json::parse(line);
    } catch (const std::exception& e) {
      fail(fmt::format("not a JSON header line: {}", e.what()));
    }
    if (!h.is_object()) fail("the first line is not a JSON object");
    auto str = [&](const char* key) -> std::string {
      auto it = h.find(key);
      return it != h.end() && it->is_string() ? it->get<std::string>() : std::string();
    };
    header_.workload = str("workload");
    header_.settings = str("conf");
    if (auto it = h.find("total"); it != h.end() && it->is_number_unsigned())
      header_.device_total_bytes = it->get<std::uint64_t>();
    // The cap the run was under, "cap_gib": set_per_process_memory_fraction's share of the device
    // in GiB (null without one). A cap is a positive size below 2^63 bytes; anything else is not
    // one and is left out.
    if (auto it = h.find("cap_gib"); it != h.end() && it->is_number()) {
      const double gib = it->get<double>();
      if (gib > 0 && gib < 8.0e9)
        header_.caps.push_back(
            {-1, static_cast<std::uint64_t>(std::llround(gib * 1073741824.0)), "PyTorch's memory fraction", true});
    }
    if (auto it = h.find("stats"); it != h.end() && it->is_object()) {
      for (const auto& [k, v] : it->items())
        if (v.is_number_integer()) header_.recorded_stats.emplace_back(k, v.get<std::int64_t>());
    }
    // A run that died of an OOM: the message PyTorch raised ("oom", null otherwise). The
    // history may hold no `oom` entry for it (Note [one OOM per failed request]).
    if (auto it = h.find("oom"); it != h.end() && it->is_string() && !it->get<std::string>().empty()) {
      RecordedOom o;
      o.message = it->get<std::string>();
      header_.recorded_ooms.push_back(std::move(o));
    }
  }

  std::uint64_t get_u64(od::value v, std::string_view key) {
    std::uint64_t x = 0;
    auto err = v.get_uint64().get(x);
    if (err) fail(fmt::format("field \"{}\": expected an unsigned integer ({})", key, simdjson::error_message(err)));
    return x;
  }

  enum KeyId { kOther, kAction, kAddr, kSize, kStream, kTime, kDeviceFree, kDevice };
  static int key_id(std::string_view k) {
    switch (k.size()) {
      case 4:
        if (std::memcmp(k.data(), "addr", 4) == 0) return kAddr;
        if (std::memcmp(k.data(), "size", 4) == 0) return kSize;
        return kOther;
      case 6:
        if (std::memcmp(k.data(), "action", 6) == 0) return kAction;
        if (std::memcmp(k.data(), "stream", 6) == 0) return kStream;
        if (std::memcmp(k.data(), "device", 6) == 0) return kDevice;
        return kOther;
      case 7:
        return std::memcmp(k.data(), "time_us", 7) == 0 ? kTime : kOther;
      case 11:
        return std::memcmp(k.data(), "device_free", 11) == 0 ? kDeviceFree : kOther;
      default:
        return kOther;
    }
  }

  /// Fast path for the common shape: one flat object whose values are unsigned integers or
  /// strings without escapes. Returns false (nothing decided) for anything else, which then goes
  /// through simdjson for a full parse and exact error messages.
  bool parse_simple(std::string_view line, TraceRecord& out) {
    const char* p = line.data();
    const char* end = p + line.size();
    auto ws = [&] {
      while (p < end && (*p == ' ' || *p == '\t')) ++p;
    };
    ws();
    if (p == end || *p != '{') return false;
    ++p;
    out = TraceRecord{};
    bool have_action = false, have_addr = false, have_size = false;
    for (;;) {
      ws();
      if (p == end || *p != '"') return false;
      const char* k = ++p;
      while (p < end && *p != '"' && *p != '\\') ++p;
      if (p == end || *p != '"') return false;
      std::string_view key(k, static_cast<std::size_t>(p - k));
      ++p;
      ws();
      if (p == end || *p != ':') return false;
      ++p;
      ws();
      if (p == end) return false;
      if (*p == '"') {
        const char* v = ++p;
        while (p < end && *p != '"' && *p != '\\') ++p;
        if (p == end || *p != '"') return false;
        std::string_view val(v, static_cast<std::size_t>(p - v));
        ++p;
        int k = key_id(key);
        if (k == kAction) {
          auto a = parse_action(val);
          if (!a) return false;
          out.action = *a;
          have_action = true;
        } else if (k != kOther) {
          return false;  // a string where a number belongs: let the full parser say so
        }
      } else if (*p >= '0' && *p <= '9') {
        if (*p == '0' && p + 1 < end && p[1] >= '0' && p[1] <= '9') return false;
        std::uint64_t x = 0;
        const char* d = p;
        while (p < end && *p >= '0' && *p <= '9') {
          std::uint64_t digit = static_cast<std::uint64_t>(*p - '0');
          if (x > (UINT64_MAX - digit) / 10) return false;
          x = x * 10 + digit;
          ++p;
        }
        if (p < end && (*p == '.' || *p == 'e' || *p == 'E')) return false;
        (void)d;
        switch (key_id(key)) {
          case kAddr:
            out.addr = x;
            have_addr = true;
            break;
          case kSize:
            out.size = x;
            have_size = true;
            break;
          case kStream:
            out.stream = x;
            break;
          case kTime:
            if (x > static_cast<std::uint64_t>(INT64_MAX / 1000)) return false;
            out.time_ns = static_cast<std::int64_t>(x) * 1000;
            break;
          case kDeviceFree:
            out.device_free = x;
            break;
          case kDevice:
            if (x > 1023) return false;
            out.device = static_cast<std::int32_t>(x);
            break;
          case kAction:
            return false;
          default:
            break;
        }
      } else {
        return false;  // arrays, objects, negatives, true/false/null: the full parser
      }
      ws();
      if (p == end) return false;
      if (*p == ',') {
        ++p;
        continue;
      }
      if (*p != '}') return false;
      ++p;
      ws();
      if (p != end) return false;
      break;
    }
    if (!have_action || !have_size) return false;
    if (!have_addr && out.action != Action::oom && out.action != Action::snapshot && out.action != Action::mark)
      return false;
    if (out.size > (std::uint64_t{1} << 60)) return false;
    return true;
  }

  void parse_entry(std::string_view line, std::size_t capacity, TraceRecord& out) {
    if (parse_simple(line, out)) return;
    // simdjson's on-demand parser stops at the end of the object; content after it is an error.
    std::size_t last = line.find_last_not_of(" \t\r");
    if (last == std::string_view::npos || line[last] != '}') {
      if (line.find('{') == std::string_view::npos || last == std::string_view::npos) fail("not a JSON object");
      fail("not JSON: the line does not end with '}' (cut off, or content after the object)");
    }
    od::document doc;
    auto err = parser_.iterate(line.data(), line.size(), capacity).get(doc);
    if (err) fail(fmt::format("not JSON: {}", simdjson::error_message(err)));
    od::object obj;
    if ((err = doc.get_object().get(obj))) fail(fmt::format("not a JSON object: {}", simdjson::error_message(err)));
    out = TraceRecord{};
    bool have_action = false, have_addr = false, have_size = false;
    for (auto field_result : obj) {
      od::field field;
      if ((err = std::move(field_result).get(field)))
        fail(fmt::format("malformed JSON: {}", simdjson::error_message(err)));
      std::string_view key;
      if ((err = field.unescaped_key().get(key)))
        fail(fmt::format("malformed JSON key: {}", simdjson::error_message(err)));
      od::value v = field.value();
      if (key == "action") {
        std::string_view name;
        if ((err = v.get_string().get(name))) fail("field \"action\": expected a string");
        auto a = parse_action(name);
        if (!a) fail(fmt::format("unknown action \"{}\"", name));
        out.action = *a;
        have_action = true;
      } else if (key == "addr") {
        out.addr = get_u64(v, key);
        have_addr = true;
      } else if (key == "size") {
        out.size = get_u64(v, key);
        have_size = true;
      } else if (key == "stream") {
        out.stream = get_u64(v, key);
      } else if (key == "time_us") {
        std::int64_t t = 0;
        if ((err = v.get_int64().get(t))) fail("field \"time_us\": expected an integer");
        out.time_ns = us_to_ns(t);
      } else if (key == "device_free") {
        out.device_free = get_u64(v, key);
      } else if (key == "device") {
        std::int64_t d = 0;
        if ((err = v.get_int64().get(d)) || d < 0 || d > 1023)
          fail("field \"device\": expected a device index 0..1023");
        out.device = static_cast<std::int32_t>(d);
      }
      // other keys (frames, user_metadata, compile_context, ...) are skipped
    }
    if (!have_action) fail("entry without \"action\"");
    if (!have_size) fail(fmt::format("\"{}\" entry without \"size\"", action_name(out.action)));
    if (!have_addr && out.action != Action::oom && out.action != Action::snapshot && out.action != Action::mark)
      fail(fmt::format("\"{}\" entry without \"addr\"", action_name(out.action)));
    if (out.size > (std::uint64_t{1} << 60)) fail(fmt::format("absurd size {} bytes (more than 1 EiB)", out.size));
  }

  std::unique_ptr<LineSource> lines_;
  TraceHeader header_;
  od::parser parser_;
  bool pending_line_ = false;
  bool cut_line_ = false;  // the last line was cut mid-way and left out
  std::string pending_;
};

}  // namespace

std::unique_ptr<TraceReader> open_torch_trace(const std::string& path) {
  return std::make_unique<TorchTraceReader>(path);
}

}  // namespace vramtrace
