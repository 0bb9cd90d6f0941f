// Parsing of allocator settings (PYTORCH_CUDA_ALLOC_CONF syntax), byte sizes, and size formatting.
// Key rules follow c10/cuda/CUDAAllocatorConfig.cpp and c10/core/AllocatorConfig.cpp; see
// docs/configuration.md for the user-facing table.
#include "vramtrace/settings.h"

#include <algorithm>
#include <bit>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

namespace vramtrace {
namespace {

std::string strip_spaces(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s)
    if (!std::isspace(static_cast<unsigned char>(c))) out.push_back(c);
  return out;
}

bool parse_u64(std::string_view s, std::uint64_t& out) {
  if (s.empty()) return false;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc() && p == s.data() + s.size();
}

bool parse_double(std::string_view s, double& out) {
  if (s.empty() || s.size() > 64) return false;
  std::string tmp(s);
  char* end = nullptr;
  out = std::strtod(tmp.c_str(), &end);
  return end == tmp.c_str() + tmp.size() && std::isfinite(out);
}

bool parse_bool(std::string_view key, std::string_view v, bool& out, std::string& error) {
  // PyTorch's tokenizer accepts exactly "True" and "False".
  if (v == "True") { out = true; return true; }
  if (v == "False") { out = false; return true; }
  error = "setting '" + std::string(key) + "': expected True or False, got '" + std::string(v) + "'";
  return false;
}

bool parse_mb_at_least(std::string_view key, std::string_view v, std::uint64_t min_mb, std::uint64_t& out_bytes,
                       std::string& error) {
  std::uint64_t mb = 0;
  if (!parse_u64(v, mb) || mb < min_mb || mb > (std::uint64_t{1} << 40)) {
    error = "setting '" + std::string(key) + "': expected a whole number of MiB >= " + std::to_string(min_mb) +
            ", got '" + std::string(v) + "'";
    return false;
  }
  out_bytes = mb * kMiB;
  return true;
}

bool is_pow2_or_zero(std::uint64_t v) { return v == 0 || std::has_single_bit(v); }

// roundup_power2_divisions: "4" (all intervals) or "[64:8,128:2,>:1]". Key K (MiB, a power of
// two) sets interval log2(K); the first key's value also fills every smaller interval; ">" fills
// every interval above the last key; others stay 0 (the AllocatorConfigTest behaviour).
bool parse_divisions(std::string_view v, std::array<std::uint32_t, 16>& out, std::string& error) {
  const std::string key = "roundup_power2_divisions";
  std::array<std::uint32_t, 16> result{};
  auto bad = [&](const std::string& why) {
    error = "setting '" + key + "': " + why + " (expected a power of two such as 4, or a list such as [64:8,256:4,>:2])";
    return false;
  };
  if (v.empty()) return bad("empty value");
  if (v.front() != '[') {
    std::uint64_t d = 0;
    if (!parse_u64(v, d) || !is_pow2_or_zero(d) || d > 1024) return bad("'" + std::string(v) + "' is not a power of two");
    result.fill(static_cast<std::uint32_t>(d));
    out = result;
    return true;
  }
  if (v.back() != ']') return bad("missing ']'");
  std::string_view body = v.substr(1, v.size() - 2);
  if (body.empty()) return bad("empty list");
  bool first = true;
  int last_index = -1;
  while (!body.empty()) {
    auto comma = body.find(',');
    std::string_view item = body.substr(0, comma);
    body = comma == std::string_view::npos ? std::string_view{} : body.substr(comma + 1);
    auto colon = item.find(':');
    if (colon == std::string_view::npos) return bad("list item '" + std::string(item) + "' is not KEY:VALUE");
    std::string_view k = item.substr(0, colon), val = item.substr(colon + 1);
    std::uint64_t d = 0;
    if (!parse_u64(val, d) || !is_pow2_or_zero(d) || d > 1024)
      return bad("divisions '" + std::string(val) + "' is not a power of two");
    if (k == ">") {
      for (int i = last_index + 1; i < 16; ++i) result[i] = static_cast<std::uint32_t>(d);
      continue;
    }
    std::uint64_t mb = 0;
    if (!parse_u64(k, mb) || mb == 0 || !std::has_single_bit(mb))
      return bad("interval '" + std::string(k) + "' is not a power of two in MB");
    int index = std::min(15, static_cast<int>(std::bit_width(mb)) - 1);
    if (first) {
      for (int i = 0; i < index; ++i) result[i] = static_cast<std::uint32_t>(d);
      first = false;
    }
    result[index] = static_cast<std::uint32_t>(d);
    last_index = index;
  }
  out = result;
  return true;
}

// Splits "a:1,b:[x:1,y:2],c:3" at top-level commas.
std::vector<std::string_view> split_top_level(std::string_view s) {
  std::vector<std::string_view> items;
  int depth = 0;
  std::size_t start = 0;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '[') ++depth;
    else if (s[i] == ']') --depth;
    else if (s[i] == ',' && depth == 0) {
      items.push_back(s.substr(start, i - start));
      start = i + 1;
    }
  }
  items.push_back(s.substr(start));
  return items;
}

constexpr const char* kKnownKeys =
    "max_split_size_mb, max_non_split_rounding_mb, roundup_power2_divisions, garbage_collection_threshold, "
    "expandable_segments, per_process_memory_fraction, backend, limit, reuse (and PyTorch's "
    "release_lock_on_cudamalloc, pinned_*, graph_capture_record_stream_reuse, which are accepted and ignored)";

}  // namespace

bool AllocatorSettings::parse(std::string_view conf, AllocatorSettings& out, std::string& error) {
  AllocatorSettings s = out;
  const std::string text = strip_spaces(conf);
  s.text = text;
  if (text.empty()) {
    out = s;
    return true;
  }
  for (std::string_view item : split_top_level(text)) {
    if (item.empty()) continue;
    auto colon = item.find(':');
    if (colon == std::string_view::npos) {
      error = "setting '" + std::string(item) + "' has no value: expected KEY:VALUE";
      return false;
    }
    std::string_view key = item.substr(0, colon), v = item.substr(colon + 1);
    const std::string k(key);
    if (key == "max_split_size_mb") {
      if (!parse_mb_at_least(key, v, 20, s.max_split_size_bytes, error)) return false;
    } else if (key == "max_non_split_rounding_mb") {
      if (!parse_mb_at_least(key, v, 20, s.max_non_split_rounding_bytes, error)) return false;
    } else if (key == "roundup_power2_divisions") {
      if (!parse_divisions(v, s.roundup_power2_divisions, error)) return false;
    } else if (key == "garbage_collection_threshold") {
      double t = 0;
      if (!parse_double(v, t) || !(t > 0.0 && t < 1.0)) {
        error = "setting 'garbage_collection_threshold': expected a number between 0 and 1 (exclusive), got '" +
                std::string(v) + "'";
        return false;
      }
      s.garbage_collection_threshold = t;
    } else if (key == "per_process_memory_fraction") {
      double f = 0;
      if (!parse_double(v, f) || !(f > 0.0 && f <= 1.0)) {
        error = "setting 'per_process_memory_fraction': expected a number in (0, 1], got '" + std::string(v) + "'";
        return false;
      }
      s.per_process_memory_fraction = f;
    } else if (key == "expandable_segments") {
      if (!parse_bool(key, v, s.expandable_segments, error)) return false;
    } else if (key == "backend") {
      if (v != "native") {
        error = "setting 'backend': only 'native' is modelled (PyTorch's caching allocator); got '" + std::string(v) +
                "'. Traces recorded with backend:cudaMallocAsync can be read, but not re-simulated with it";
        return false;
      }
    } else if (key == "limit") {
      std::string size_error;
      if (!parse_size(v, s.limit_bytes, size_error) || s.limit_bytes == 0) {
        error = "setting 'limit': " + (size_error.empty() ? std::string("must be greater than 0") : size_error);
        return false;
      }
    } else if (key == "reuse") {
      if (v == "lazy_sync") s.reuse = ReusePolicy::lazy_sync;
      else if (v == "device_sync") s.reuse = ReusePolicy::device_sync;
      else if (v == "stream_ordered") s.reuse = ReusePolicy::stream_ordered;
      else if (v == "none") s.reuse = ReusePolicy::none;
      else {
        error = "setting 'reuse': expected lazy_sync, device_sync, stream_ordered or none, got '" + std::string(v) + "'";
        return false;
      }
    } else if (key == "release_lock_on_cudamalloc" || key == "pinned_use_cuda_host_register" ||
               key == "pinned_use_background_threads" || key == "graph_capture_record_stream_reuse" ||
               key == "pinned_free_catch_all" || key == "throw_on_cudamalloc_oom") {
      bool ignored = false;
      if (!parse_bool(key, v, ignored, error)) return false;
    } else if (key == "pinned_num_register_threads" || key == "pinned_reserve_segment_size_mb") {
      std::uint64_t ignored = 0;
      if (!parse_u64(v, ignored)) {
        error = "setting '" + k + "': expected a whole number, got '" + std::string(v) + "'";
        return false;
      }
    } else {
      error = "unknown setting '" + k + "'; known settings: " + kKnownKeys;
      return false;
    }
  }
  out = s;
  return true;
}

std::uint32_t AllocatorSettings::divisions_for(std::uint64_t bytes) const noexcept {
  // Interval index = floor(log2(size)) - 20, clamped to [0, 15] (1 MiB .. 64 GiB).
  int log_size = bytes == 0 ? 0 : std::bit_width(bytes) - 1;
  int index = std::clamp(log_size - 20, 0, 15);
  return roundup_power2_divisions[index];
}

std::string AllocatorSettings::to_string() const {
  AllocatorSettings d;
  std::string out;
  auto add = [&](const std::string& item) {
    if (!out.empty()) out += ',';
    out += item;
  };
  if (max_split_size_bytes != d.max_split_size_bytes) add("max_split_size_mb:" + std::to_string(max_split_size_bytes / kMiB));
  if (max_non_split_rounding_bytes != d.max_non_split_rounding_bytes)
    add("max_non_split_rounding_mb:" + std::to_string(max_non_split_rounding_bytes / kMiB));
  if (roundup_power2_divisions != d.roundup_power2_divisions) {
    bool uniform = true;
    for (auto v : roundup_power2_divisions) uniform &= v == roundup_power2_divisions[0];
    if (uniform) {
      add("roundup_power2_divisions:" + std::to_string(roundup_power2_divisions[0]));
    } else {
      std::string list = "[";
      for (int i = 0; i < 16; ++i) {
        if (i) list += ',';
        list += std::to_string(std::uint64_t{1} << i) + ":" + std::to_string(roundup_power2_divisions[i]);
      }
      add("roundup_power2_divisions:" + list + "]");
    }
  }
  char buf[64];
  if (garbage_collection_threshold != 0.0) {
    std::snprintf(buf, sizeof buf, "%g", garbage_collection_threshold);
    add(std::string("garbage_collection_threshold:") + buf);
  }
  if (per_process_memory_fraction != 1.0) {
    std::snprintf(buf, sizeof buf, "%g", per_process_memory_fraction);
    add(std::string("per_process_memory_fraction:") + buf);
  }
  if (expandable_segments) add("expandable_segments:True");
  if (limit_bytes != 0) add("limit:" + std::to_string(limit_bytes));
  if (reuse == ReusePolicy::device_sync) add("reuse:device_sync");
  if (reuse == ReusePolicy::stream_ordered) add("reuse:stream_ordered");
  if (reuse == ReusePolicy::none) add("reuse:none");
  return out;
}

bool parse_size(std::string_view text, std::uint64_t& out_bytes, std::string& error) {
  std::string s = strip_spaces(text);
  if (s.empty()) {
    error = "empty size";
    return false;
  }
  std::size_t i = 0;
  while (i < s.size() && (std::isdigit(static_cast<unsigned char>(s[i])) || s[i] == '.')) ++i;
  std::string number = s.substr(0, i), unit = s.substr(i);
  for (auto& c : unit) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  double value = 0;
  if (number.empty() || number.find('.') != number.rfind('.') || !parse_double(number, value)) {
    error = "'" + std::string(text) + "' is not a size (examples: 1048576, 512MiB, 16GB, 14.58GiB)";
    return false;
  }
  double mult = 0;
  if (unit.empty() || unit == "b") mult = 1;
  else if (unit == "k" || unit == "kib") mult = 1024.0;
  else if (unit == "m" || unit == "mib") mult = 1024.0 * 1024;
  else if (unit == "g" || unit == "gib") mult = 1024.0 * 1024 * 1024;
  else if (unit == "t" || unit == "tib") mult = 1024.0 * 1024 * 1024 * 1024;
  else if (unit == "kb") mult = 1e3;
  else if (unit == "mb") mult = 1e6;
  else if (unit == "gb") mult = 1e9;
  else if (unit == "tb") mult = 1e12;
  else {
    error = "'" + std::string(text) + "' has an unknown unit '" + unit + "' (use B, KiB, MiB, GiB, TiB, KB, MB, GB, TB)";
    return false;
  }
  if (unit.empty() && number.find('.') != std::string::npos) {
    error = "'" + std::string(text) + "': a size in bytes must be a whole number";
    return false;
  }
  const double bytes = value * mult;
  if (bytes > static_cast<double>(std::uint64_t{1} << 60)) {
    error = "'" + std::string(text) + "' is absurdly large (more than 1 EiB)";
    return false;
  }
  if (unit.empty()) {
    std::uint64_t whole = 0;
    if (!parse_u64(number, whole)) {
      error = "'" + std::string(text) + "' is not a whole number of bytes";
      return false;
    }
    // The double check above cannot see 2^60 + 1 (it rounds to 2^60): check the integer too.
    // Found by tests/fuzz/fuzz_size.cpp (regressions/size/above-2pow60-integer).
    if (whole > (std::uint64_t{1} << 60)) {
      error = "'" + std::string(text) + "' is absurdly large (more than 1 EiB)";
      return false;
    }
    out_bytes = whole;
    return true;
  }
  out_bytes = static_cast<std::uint64_t>(std::floor(bytes));
  return true;
}

std::string format_size(std::uint64_t bytes) {
  // c10's format_size: <= 1 KiB in bytes, <= 1 MiB in KiB, <= 1 GiB in MiB, else GiB.
  char buf[64];
  if (bytes <= 1024) {
    std::snprintf(buf, sizeof buf, "%llu bytes", static_cast<unsigned long long>(bytes));
  } else if (bytes <= kMiB) {
    std::snprintf(buf, sizeof buf, "%.2f KiB", static_cast<double>(bytes) / 1024.0);
  } else if (bytes <= kGiB) {
    std::snprintf(buf, sizeof buf, "%.2f MiB", static_cast<double>(bytes) / kMiB);
  } else {
    std::snprintf(buf, sizeof buf, "%.2f GiB", static_cast<double>(bytes) / kGiB);
  }
  return buf;
}

}  // namespace vramtrace
