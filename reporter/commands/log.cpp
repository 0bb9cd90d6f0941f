#include "commands/log.h"

#include <spdlog/pattern_formatter.h>
#include <spdlog/sinks/stdout_sinks.h>

#include <memory>
#include <string_view>

#include "analyses/printable.h"

namespace vramtrace::cli {

namespace {

// The message with its control characters escaped (printable()): messages quote a trace's own
// text (an action name, a workload, a path) and the command line's, and an ESC, CR or line break
// from them must not recolour, retitle or rewrite the user's terminal, nor add a line that looks
// like the command's own. Each message is one line.
class PrintableFormatter final : public spdlog::formatter {
 public:
  void format(const spdlog::details::log_msg& msg, spdlog::memory_buf_t& dest) override {
    const std::string line = printable(std::string_view(msg.payload.data(), msg.payload.size()));
    dest.append(line.data(), line.data() + line.size());
    dest.push_back('\n');
  }
  std::unique_ptr<spdlog::formatter> clone() const override { return std::make_unique<PrintableFormatter>(); }
};

}  // namespace

spdlog::logger& logger() {
  // Never destroyed: a message may come from a static destructor or an atexit handler.
  static spdlog::logger* const l = [] {
    auto* made = new spdlog::logger("vramtrace", std::make_shared<spdlog::sinks::stderr_sink_mt>());
    made->set_formatter(std::make_unique<PrintableFormatter>());
    made->set_level(spdlog::level::info);
    return made;
  }();
  return *l;
}

}  // namespace vramtrace::cli
