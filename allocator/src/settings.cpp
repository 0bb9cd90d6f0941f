// Parsing of allocator settings (PYTORCH_CUDA_ALLOC_CONF syntax); sizes are read by units.h.
// Key rules follow c10/cuda/CUDAAllocatorConfig.cpp and c10/core/AllocatorConfig.cpp; see
// docs/configuration.md for the user-facing table.
#include "vramtrace/settings.h"

#include "vramtrace/device_limits.h"
#include "vramtrace/size_rules.h"

#include "text.h"

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

using detail::strip_spaces;

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
  if (v == "True") {
    out = true;
    return true;
  }
  if (v == "False") {
    out = false;
    return true;
  }
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
    error =
        "setting '" + key + "': " + why + " (expected a power of two such as 4, or a list such as [64:8,256:4,>:2])";
    return false;
  };
  if (v.empty()) return bad("empty value");
  if (v.front() != '[') {
    std::uint64_t d = 0;
    if (!parse_u64(v, d) || !is_pow2_or_zero(d) || d > 1024)
      return bad("'" + std::string(v) + "' is not a power of two");
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
    if (s[i] == '[')
      ++depth;
    else if (s[i] == ']')
      --depth;
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

// A size of the `limit` key, alone (limit:14GiB) or in the per-device list: units.h's grammar, > 0.
bool parse_limit_size(std::string_view v, std::uint64_t& out_bytes, std::string& error) {
  std::uint64_t bytes = 0;
  std::string size_error;
  if (!parse_size(v, bytes, size_error)) {
    error = "setting 'limit': " + size_error;
    return false;
  }
  if (bytes == 0) {
    error = "setting 'limit': must be greater than 0";
    return false;
  }
  out_bytes = bytes;
  return true;
}

// One KEY:VALUE item on top of `s`. On a refusal `s` may be half-changed: callers parse into a copy.
bool parse_item(std::string_view item, AllocatorSettings& s, std::string& error) {
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
    if (!parse_limit_size(v, s.limit_bytes, error)) return false;
  } else if (key == "reuse") {
    bool known = false;
    for (ReusePolicy p : {ReusePolicy::lazy_sync, ReusePolicy::device_sync, ReusePolicy::lazy_barrier,
                          ReusePolicy::stream_ordered, ReusePolicy::none}) {
      if (v != reuse_policy_name(p)) continue;
      s.reuse = p;
      known = true;
    }
    if (!known) {
      error = "setting 'reuse': expected lazy_sync, device_sync, lazy_barrier, stream_ordered or none, got '" +
              std::string(v) + "'";
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
  return true;
}

}  // namespace

bool AllocatorSettings::parse(std::string_view conf, AllocatorSettings& out, std::string& error) {
  AllocatorSettings s = out;
  const std::string text = strip_spaces(conf);
  s.text = text;
  for (std::string_view item : split_top_level(text)) {
    if (item.empty()) continue;
    if (!parse_item(item, s, error)) {
      // `tune --candidates` separates its settings by ';', which makes this slip easy.
      if (item.find(';') != std::string_view::npos)
        error += " (settings are separated by ',', as in PYTORCH_CUDA_ALLOC_CONF, not ';')";
      return false;
    }
  }
  out = s;
  return true;
}

AllocatorSettings AllocatorSettings::parse_recorded(std::string_view conf, std::vector<RejectedSetting>* rejected) {
  AllocatorSettings s;
  const std::string text = strip_spaces(conf);
  s.text = text;
  for (std::string_view item : split_top_level(text)) {
    if (item.empty()) continue;
    AllocatorSettings with = s;
    std::string error;
    if (parse_item(item, with, error)) {
      s = std::move(with);
    } else if (rejected != nullptr) {
      const auto colon = item.find(':');
      const bool has_value = colon != std::string_view::npos;
      rejected->push_back({std::string(item.substr(0, colon)),
                           has_value ? std::string(item.substr(colon + 1)) : std::string(), has_value,
                           std::move(error)});
    }
  }
  return s;
}

std::uint32_t AllocatorSettings::divisions_for(std::uint64_t bytes) const noexcept {
  return roundup_power2_divisions[roundup_power2_interval(bytes)];
}

std::string AllocatorSettings::to_string() const {
  AllocatorSettings d;
  std::string out;
  auto add = [&](const std::string& item) {
    if (!out.empty()) out += ',';
    out += item;
  };
  if (max_split_size_bytes != d.max_split_size_bytes)
    add("max_split_size_mb:" + std::to_string(max_split_size_bytes / kMiB));
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
  if (reuse != d.reuse) add(std::string("reuse:") + reuse_policy_name(reuse));
  return out;
}

// ---- the per-device form of `limit` (device_limits.h) ------------------------------------------

namespace {

bool parse_ordinal(std::string_view s, int& out) {
  if (s.empty() || s.size() > 4) return false;
  int v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
    v = v * 10 + (c - '0');
  }
  out = v;
  return true;
}

// A cap of the list form: a size (a ':' in it means two items ran together).
bool parse_cap(std::string_view v, std::uint64_t& out, std::string& error) {
  if (v.find(':') != std::string_view::npos) {
    error = "setting 'limit': '" + std::string(v) + "' is not a size (a ',' missing between list items?)";
    return false;
  }
  return parse_limit_size(v, out, error);
}

}  // namespace

bool split_device_limits(std::string_view conf, std::string& rest, DeviceLimits& out, std::string& error) {
  const std::string text = strip_spaces(conf);
  DeviceLimits limits;
  std::string kept;
  for (std::string_view item : split_top_level(text)) {
    if (item.rfind("limit:", 0) != 0) {
      if (item.empty()) continue;
      if (!kept.empty()) kept += ',';
      kept.append(item);
      continue;
    }
    std::string_view v = item.substr(6);
    DeviceLimits one;
    const std::size_t brackets_inside =
        v.size() < 2 ? std::string_view::npos : v.substr(1, v.size() - 2).find_first_of("[]");
    const bool list = !v.empty() && v.front() == '[';
    if ((!list && v.find_first_of("[]") != std::string_view::npos) ||
        (list && brackets_inside != std::string_view::npos)) {
      error = "setting 'limit': unbalanced '[' or ']' in '" + std::string(v) +
              "' (expected limit:SIZE or limit:[0:14GiB,1:20GiB,*:16GiB])";
      return false;
    }
    if (!list) {
      if (!parse_cap(v, one.others_bytes, error)) return false;
    } else {
      if (v.back() != ']') {
        error =
            "setting 'limit': missing ']' in '" + std::string(v) + "' (expected e.g. limit:[0:14GiB,1:20GiB,*:16GiB])";
        return false;
      }
      std::string_view body = v.substr(1, v.size() - 2);
      if (body.empty()) {
        error = "setting 'limit': empty list (expected e.g. limit:[0:14GiB,1:20GiB,*:16GiB])";
        return false;
      }
      bool star_seen = false;
      for (bool more = true; more;) {
        auto comma = body.find(',');
        std::string_view e = body.substr(0, comma);
        more = comma != std::string_view::npos;
        if (more) body = body.substr(comma + 1);
        if (e.empty()) {
          error = "setting 'limit': an empty item in the list '" + std::string(v) + "' (a stray ',')";
          return false;
        }
        auto colon = e.find(':');
        if (colon == std::string_view::npos) {
          error = "setting 'limit': list item '" + std::string(e) + "' is not DEVICE:SIZE (DEVICE a CUDA ordinal or *)";
          return false;
        }
        std::string_view k = e.substr(0, colon), size = e.substr(colon + 1);
        std::uint64_t bytes = 0;
        if (!parse_cap(size, bytes, error)) return false;
        if (k == "*") {
          if (star_seen) {
            error = "setting 'limit': * is listed twice";
            return false;
          }
          star_seen = true;
          one.others_bytes = bytes;
          continue;
        }
        int dev = 0;
        if (!parse_ordinal(k, dev)) {
          error = "setting 'limit': device '" + std::string(k) + "' is not a CUDA ordinal (0, 1, ...) or *";
          return false;
        }
        for (const auto& [d, b] : one.by_device) {
          if (d == dev) {
            error = "setting 'limit': device " + std::to_string(dev) + " is listed twice";
            return false;
          }
        }
        one.by_device.emplace_back(dev, bytes);
      }
    }
    limits = std::move(one);
  }
  out = std::move(limits);
  rest = std::move(kept);
  return true;
}

bool parse_settings_with_limits(std::string_view conf, AllocatorSettings& settings, DeviceLimits& limits,
                                std::string& error) {
  std::string rest;
  DeviceLimits l;
  AllocatorSettings s = settings;
  if (!split_device_limits(conf, rest, l, error) || !AllocatorSettings::parse(rest, s, error)) return false;
  settings = std::move(s);
  limits = std::move(l);
  return true;
}

}  // namespace vramtrace
