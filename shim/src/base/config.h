// The shim's settings: VRAMTRACE_CONF, read once, lazily (never from a constructor).
#pragma once

#include "vramtrace/device_limits.h"
#include "vramtrace/settings.h"

namespace vramtrace::shim {

struct Config {
  /// False after a bad VRAMTRACE_CONF: every hook then forwards untouched (no caching, no
  /// events, no substitution), after one line on stderr. The program is never taken down.
  bool enabled = true;
  /// Whether device allocations go through the caching allocator (false for reuse:none).
  bool caching = true;
  /// Allocator settings; `settings.limit_bytes` is always 0 here: the cap is per device
  /// (`limits`) and each pool gets its device's cap (context_pool.cpp).
  AllocatorSettings settings;
  /// The `limit` key, per device (memory_cap.h). Empty: no cap.
  DeviceLimits limits;
};

/// The configuration, parsed on first use by parse_settings_with_limits
/// (vramtrace/device_limits.h): the `limit` items, the rest with AllocatorSettings::parse (the
/// syntax of `replay --conf` and PYTORCH_CUDA_ALLOC_CONF). Thread-safe.
const Config& config() noexcept;

/// config().enabled, cheap.
bool enabled() noexcept;

}  // namespace vramtrace::shim
