#include "base/config.h"

#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>

namespace vramtrace::shim {
namespace {

void say(const std::string& s) noexcept {
  ssize_t n = write(2, s.data(), s.size());
  (void)n;
}

Config load() noexcept {
  Config c;
  const char* conf = std::getenv("VRAMTRACE_CONF");
  if (!conf || !*conf) return c;
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
    say("vramtrace: VRAMTRACE_CONF: " + error + "; passing every CUDA call through untouched\n");
    c.enabled = false;
    c.caching = false;
    return c;
  }
  c.settings = std::move(parsed);
  c.limits = std::move(limits);
  c.caching = c.settings.reuse != ReusePolicy::none;
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
