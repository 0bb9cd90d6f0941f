#include "base/config.h"

#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>

#include "base/log.h"

namespace vramtrace::shim {
namespace {

Config load() noexcept {
  Config c;
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
