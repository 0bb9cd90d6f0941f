#include "base/hooks.h"

#include <algorithm>
#include <array>
#include <cstring>

namespace vramtrace::shim {
namespace {

const char* const kNames[] = {
    "none",
#define VT_HOOK(level, policy, name, ret, params, args) #name,
#include "base/hooks.def"
#undef VT_HOOK
};

const Level kLevels[] = {
    Level::driver,
#define VT_HOOK(level, policy, name, ret, params, args) Level::level,
#include "base/hooks.def"
#undef VT_HOOK
};

void* const kWrappers[] = {
    nullptr,
#define VT_HOOK(level, policy, name, ret, params, args) reinterpret_cast<void*>(&::name),
#include "base/hooks.def"
#undef VT_HOOK
};

// Hook ids sorted by name, for hook_by_name (built once, constant afterwards).
struct ByName {
  std::array<std::uint16_t, kHookCount - 1> ids{};
  ByName() {
    for (std::size_t i = 1; i < kHookCount; ++i) ids[i - 1] = static_cast<std::uint16_t>(i);
    std::sort(ids.begin(), ids.end(), [](auto a, auto b) { return std::strcmp(kNames[a], kNames[b]) < 0; });
  }
};

}  // namespace

const char* hook_name(std::uint16_t id) noexcept { return id < kHookCount ? kNames[id] : "?"; }
Level hook_level(Hook h) noexcept { return kLevels[static_cast<std::size_t>(h)]; }
void* hook_wrapper(Hook h) noexcept { return kWrappers[static_cast<std::size_t>(h)]; }

Hook hook_by_name(const char* name) noexcept {
  static const ByName index;
  if (!name) return Hook::none;
  auto it = std::lower_bound(index.ids.begin(), index.ids.end(), name,
                             [](std::uint16_t id, const char* n) { return std::strcmp(kNames[id], n) < 0; });
  if (it != index.ids.end() && std::strcmp(kNames[*it], name) == 0) return static_cast<Hook>(*it);
  return Hook::none;
}

}  // namespace vramtrace::shim
