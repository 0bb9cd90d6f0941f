#include "commands/log.h"

#include <spdlog/pattern_formatter.h>
#include <spdlog/sinks/stdout_sinks.h>

#include <memory>
#include <string_view>

#include "analyses/printable.h"

namespace vramtrace::cli {

namespace {

// The message as it was written, but with its control characters escaped (printable()) line by
// line: messages quote a trace's own text (an action name, a workload, a path), and an ESC or CR
// from a trace made elsewhere must not recolour, retitle or rewrite the user's terminal. The
// line breaks of the message itself are kept.
class PrintableFormatter final : public spdlog::formatter {
 public:
  void format(const spdlog::details::log_msg& msg, spdlog::memory_buf_t& dest) override {
    std::string_view rest(msg.payload.data(), msg.payload.size());
    for (;;) {
      const std::size_t nl = rest.find('\n');
      const std::string line = printable(rest.substr(0, nl));
      dest.append(line.data(), line.data() + line.size());
      if (nl == std::string_view::npos) break;
      dest.push_back('\n');
      rest.remove_prefix(nl + 1);
    }
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
