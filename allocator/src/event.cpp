// The clock every event is stamped with (event.h).
#include "vramtrace/event.h"

#include <time.h>

namespace vramtrace {

std::uint64_t event_time_ns() noexcept {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<std::uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<std::uint64_t>(ts.tv_nsec);
}

}  // namespace vramtrace
