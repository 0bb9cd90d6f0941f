#include "base/config.h"

#include <charconv>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <string_view>

#include "base/log.h"

namespace vramtrace::shim {

const char* StackSettings::name() const noexcept {
  return native && python ? "native,python" : native ? "native" : python ? "python" : "none";
}

namespace {

bool same_word(std::string_view a, std::string_view b) noexcept {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if ((a[i] | 0x20) != b[i]) return false;
  return true;
}

// VRAMTRACE_STACKS: "none", or a comma-separated list of "native" and "python" (any case).
bool parse_stacks(std::string_view v, StackSettings& out) noexcept {
  if (same_word(v, "none")) {
    out.native = out.python = false;
    return true;
  }
  bool native = false, python = false;
  while (true) {
    const std::size_t comma = v.find(',');
    const std::string_view item = v.substr(0, comma);
    if (same_word(item, "native"))
      native = true;
    else if (same_word(item, "python"))
      python = true;
    else
      return false;
    if (comma == std::string_view::npos) break;
    v.remove_prefix(comma + 1);
  }
  out.native = native;
  out.python = python;
  return true;
}

StackSettings load_stacks() noexcept {
  StackSettings s;
  const StackSettings defaults;
  if (const char* v = std::getenv("VRAMTRACE_STACKS"); v && *v && !parse_stacks(v, s)) {
    s = defaults;
    log_line(LogLevel::warn,
             "VRAMTRACE_STACKS: '{}' is not a stack setting (native,python, native, python, none); using {}", v,
             defaults.name());
  }
  if (const char* v = std::getenv("VRAMTRACE_STACK_DEPTH"); v && *v) {
    unsigned depth = 0;
    const char* end = v + std::strlen(v);
    auto r = std::from_chars(v, end, depth);
    if (r.ec == std::errc() && r.ptr == end && depth >= 1 && depth <= StackSettings::kMaxDepth) {
      s.depth = depth;
    } else {
      log_line(LogLevel::warn, "VRAMTRACE_STACK_DEPTH: '{}' is not a number of frames from 1 to {}; using {}", v,
               StackSettings::kMaxDepth, defaults.depth);
    }
  }
  return s;
}

Config load() noexcept {
  Config c;
  c.stacks = load_stacks();
  const char* conf = std::getenv("VRAMTRACE_CONF");
  if (!conf || !*conf) {
    log_line(LogLevel::info, "VRAMTRACE_CONF is not set: PyTorch's default settings");
    return c;
  }
  std::string error;
  AllocatorSettings parsed;
  DeviceLimits limits;
  bool ok = false;
  try {
    ok = parse_settings_with_limits(conf, parsed, limits, error);
  } catch (...) {
    error = "could not be parsed";
  }
  if (!ok) {
    log_line(LogLevel::warn, "VRAMTRACE_CONF: {}; passing every CUDA call through untouched", error);
    c.enabled = false;
    c.caching = false;
    return c;
  }
  c.settings = std::move(parsed);
  c.limits = std::move(limits);
  c.caching = c.settings.reuse != ReusePolicy::none;
  if (log_enabled(LogLevel::info)) log_line(LogLevel::info, "VRAMTRACE_CONF: {}", c.settings.to_string());
  return c;
}

}  // namespace

const Config& config() noexcept {
  // Never destroyed: hooks run during exit, after static destructors (atexit handlers registered
  // before our first call run after them).
  static const Config* c = new Config(load());
  return *c;
}

bool enabled() noexcept { return config().enabled; }

}  // namespace vramtrace::shim
