// Note [a run that did not finish]: see unfinished_run.h.
#include "model/unfinished_run.h"

#include <fmt/format.h>

namespace vramtrace {

std::string unfinished_reason(bool incomplete, std::string_view incomplete_reason, std::uint64_t lost_events) {
  std::string out;
  if (incomplete) out = incomplete_reason.empty() ? std::string("cut last line") : std::string(incomplete_reason);
  if (lost_events != 0) {
    if (!out.empty()) out += "; ";
    out += fmt::format("it lost {} event{}: its writer dropped them, or the file lost lines", lost_events,
                       lost_events == 1 ? "" : "s");
  }
  return out;
}

std::string unfinished_run_line(std::string_view path, std::string_view reason) {
  return fmt::format(
      "THE RUN DID NOT FINISH: {}: {}. Its figures are what the trace holds, not the whole run's: a budget or peak "
      "read from them may not hold for the run.",
      path, reason);
}

}  // namespace vramtrace
