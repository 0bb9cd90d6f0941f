// Memory caps per device for the shim: the `limit` key of VRAMTRACE_CONF in both of its forms,
//   limit:14.58GiB                      every device
//   limit:[0:14.58GiB,1:20GiB,*:16GiB]  per CUDA ordinal; `*` = every device not listed
// (docs/configuration.md, "Memory cap"). Header-only so that the shim and `vramtrace run` (which
// checks VRAMTRACE_CONF before it starts the program) read one grammar. The list form follows the
// settings grammar's own lists (`roundup_power2_divisions:[64:8,>:2]`): KEY:VALUE items in [ ].
//
// AllocatorSettings::parse knows only the single-size form; split_device_limits takes every
// `limit` item out of the string so that the rest can go to it unchanged.
#pragma once

#include <cctype>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "vramtrace/settings.h"

namespace vramtrace {

/// Caps in bytes by CUDA device ordinal. 0 = no cap.
struct DeviceLimits {
  std::uint64_t others_bytes = 0;                        ///< `limit:SIZE` or `*:SIZE`
  std::vector<std::pair<int, std::uint64_t>> by_device;  ///< listed ordinals, in the order given

  /// Cap of CUDA device `device` (its own entry, else `others_bytes`); 0 = uncapped. O(listed).
  std::uint64_t for_device(int device) const noexcept {
    for (const auto& [d, b] : by_device)
      if (d == device) return b;
    return others_bytes;
  }
  /// Whether any device is capped.
  bool any() const noexcept { return others_bytes != 0 || !by_device.empty(); }
  /// The smallest cap in force (0 if none): used where the device cannot be identified.
  std::uint64_t smallest() const noexcept {
    std::uint64_t m = others_bytes;
    for (const auto& [d, b] : by_device)
      if (m == 0 || b < m) m = b;
    return m;
  }
};

namespace device_limits_detail {
inline bool parse_ordinal(std::string_view s, int& out) {
  if (s.empty() || s.size() > 4) return false;
  int v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
    v = v * 10 + (c - '0');
  }
  out = v;
  return true;
}
inline bool parse_cap(std::string_view v, std::uint64_t& out, std::string& error) {
  std::string e;
  if (v.find(':') != std::string_view::npos) {
    error = "setting 'limit': '" + std::string(v) + "' is not a size (a ',' missing between list items?)";
    return false;
  }
  if (!parse_size(v, out, e)) {
    error = "setting 'limit': " + e;
    return false;
  }
  if (out == 0) {
    error = "setting 'limit': must be greater than 0";
    return false;
  }
  return true;
}
}  // namespace device_limits_detail

/// Reads the `limit` items of a settings string. `rest` receives the string without them
/// (whitespace removed, items rejoined with ','), for AllocatorSettings::parse. A later `limit`
/// item replaces an earlier one, as for every key. Returns false with `error` naming the item on
/// a bad size, a bad ordinal, a repeated ordinal or `*`, an empty list or list item (a stray ','), a missing
/// or stray bracket; `out` and `rest`
/// are then unchanged. Thread-safe (pure).
inline bool split_device_limits(std::string_view conf, std::string& rest, DeviceLimits& out, std::string& error) {
  using namespace device_limits_detail;
  std::string text;
  for (char c : conf)
    if (!std::isspace(static_cast<unsigned char>(c))) text.push_back(c);
  std::vector<std::string_view> items;
  {
    std::string_view s = text;
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
  }
  DeviceLimits limits;
  std::string kept;
  for (std::string_view item : items) {
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

}  // namespace vramtrace
