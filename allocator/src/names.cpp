// Names of enums, generated from the lists in the headers.
#include <string_view>

#include "vramtrace/event.h"
#include "vramtrace/settings.h"
#include "vramtrace/snapshot.h"
#include "vramtrace/types.h"

namespace vramtrace {

const char* status_name(Status s) noexcept {
  switch (s) {
    case Status::ok:
      return "ok";
    case Status::out_of_memory:
      return "out_of_memory";
    case Status::invalid_value:
      return "invalid_value";
    case Status::not_supported:
      return "not_supported";
    case Status::device_error:
      return "device_error";
  }
  return "unknown";
}

const char* action_name(Action a) noexcept {
  switch (a) {
#define VRAMTRACE_ACTION_CASE(name) \
  case Action::name:                \
    return #name;
    VRAMTRACE_ACTIONS(VRAMTRACE_ACTION_CASE)
#undef VRAMTRACE_ACTION_CASE
  }
  return "unknown";
}

std::optional<Action> parse_action(std::string_view name) noexcept {
#define VRAMTRACE_ACTION_PARSE(n) \
  if (name == #n) return Action::n;
  VRAMTRACE_ACTIONS(VRAMTRACE_ACTION_PARSE)
#undef VRAMTRACE_ACTION_PARSE
  return std::nullopt;
}

const char* reuse_policy_name(ReusePolicy p) noexcept {
  switch (p) {
    case ReusePolicy::lazy_sync:
      return "lazy_sync";
    case ReusePolicy::device_sync:
      return "device_sync";
    case ReusePolicy::lazy_barrier:
      return "lazy_barrier";
    case ReusePolicy::stream_ordered:
      return "stream_ordered";
    case ReusePolicy::none:
      return "none";
  }
  return "lazy_sync";
}

const char* block_state_name(BlockState s) noexcept {
  switch (s) {
    case BlockState::active_allocated:
      return "active_allocated";
    case BlockState::active_pending_free:
      return "active_pending_free";
    case BlockState::inactive:
      return "inactive";
  }
  return "unknown";
}

}  // namespace vramtrace
