// Memory caps per device for the shim: the `limit` key of VRAMTRACE_CONF in both of its forms,
//   limit:14.58GiB                      every device
//   limit:[0:14.58GiB,1:20GiB,*:16GiB]  per CUDA ordinal; `*` = every device not listed
// (docs/configuration.md, "Memory cap"). The shim and `vramtrace run` (which checks VRAMTRACE_CONF
// before it starts the program) read it with parse_settings_with_limits, the settings code of
// settings.cpp: the same item splitting, the same size grammar (units.h). The list form follows
// the settings grammar's own lists (`roundup_power2_divisions:[64:8,>:2]`): KEY:VALUE items in [ ].
//
// AllocatorSettings::parse knows only the single-size form; split_device_limits takes every
// `limit` item out of the string so that the rest can go to it unchanged.
#pragma once

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

/// Reads the `limit` items of a settings string. `rest` receives the string without them
/// (whitespace removed, items rejoined with ','), for AllocatorSettings::parse. A later `limit`
/// item replaces an earlier one, as for every key. Sizes follow units.h's grammar (cards
/// included) and must be > 0. Returns false with `error` naming the item on a bad size, a bad
/// ordinal, a repeated ordinal or `*`, an empty list or list item (a stray ','), a missing or
/// stray bracket; `out` and `rest` are then unchanged. Thread-safe (pure).
bool split_device_limits(std::string_view conf, std::string& rest, DeviceLimits& out, std::string& error);

/// The whole settings string of the shim (VRAMTRACE_CONF) and of `vramtrace run --conf`: the
/// `limit` items, in either form, into `limits` (split_device_limits), the rest into `settings`
/// (AllocatorSettings::parse, on top of what `settings` holds). Returns false with the first
/// error of the two; `settings` and `limits` are then unchanged. Thread-safe (pure).
bool parse_settings_with_limits(std::string_view conf, AllocatorSettings& settings, DeviceLimits& limits,
                                std::string& error);

}  // namespace vramtrace
