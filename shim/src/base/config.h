// The shim's settings: VRAMTRACE_CONF, read once, lazily (never from a constructor).
#pragma once

#include "vramtrace/device_limits.h"
#include "vramtrace/settings.h"

namespace vramtrace::shim {

/// Which call stacks the shim records with each allocation (base/stacks.h), from
/// VRAMTRACE_STACKS (`native,python` by default, `native`, `python` or `none`) and
/// VRAMTRACE_STACK_DEPTH (frames, 1 to 256, default 64: at most that many native frames and that
/// many Python frames). A bad value gives one warning and the default; it never turns the shim off.
struct StackSettings {
  static constexpr unsigned kMaxDepth = 256;
  bool native = true;
  bool python = true;
  unsigned depth = 64;
  /// "native,python", "native", "python" or "none": the value as the header's settings name it.
  const char* name() const noexcept;
};

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
  /// VRAMTRACE_STACKS and VRAMTRACE_STACK_DEPTH.
  StackSettings stacks;
};

/// The configuration, parsed on first use by parse_settings_with_limits
/// (vramtrace/device_limits.h): the `limit` items, the rest with AllocatorSettings::parse (the
/// syntax of `replay --conf` and PYTORCH_CUDA_ALLOC_CONF); and the stack settings. Thread-safe.
const Config& config() noexcept;

/// config().enabled, cheap.
bool enabled() noexcept;

}  // namespace vramtrace::shim
