#include "commands/log.h"

#include <spdlog/sinks/stdout_sinks.h>

#include <memory>

namespace vramtrace::cli {

spdlog::logger& logger() {
  // Never destroyed: a message may come from a static destructor or an atexit handler.
  static spdlog::logger* const l = [] {
    auto* made = new spdlog::logger("vramtrace", std::make_shared<spdlog::sinks::stderr_sink_mt>());
    made->set_pattern("%v");
    made->set_level(spdlog::level::info);
    return made;
  }();
  return *l;
}

}  // namespace vramtrace::cli
