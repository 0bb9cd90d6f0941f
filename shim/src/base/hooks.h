// Hook identities generated from hooks.def: the Hook enum (the `entry_point` of every event),
// names, levels, and the exported declarations.
#pragma once

#include <cstdint>

#include "base/cuda_api.h"

#define VT_EXPORT __attribute__((visibility("default")))
#define VT_UNPAREN(...) __VA_ARGS__

namespace vramtrace::shim {

/// One id per hooked function; 0 means "not from the shim" (Event::entry_point).
enum class Hook : std::uint16_t {
  none = 0,
#define VT_HOOK(level, policy, name, ret, params, args) name,
#include "base/hooks.def"
#undef VT_HOOK
  count
};
inline constexpr std::size_t kHookCount = static_cast<std::size_t>(Hook::count);

enum class Level : std::uint8_t { runtime, driver, nvml };

/// Exact ABI name of a hook ("cuMemAlloc_v2"); "none" for Hook::none, "?" for an out-of-range id.
const char* hook_name(std::uint16_t id) noexcept;
/// Level of a hook (runtime, driver or nvml).
Level hook_level(Hook h) noexcept;
/// Id of an exact ABI name, Hook::none if we do not hook it. O(log n), no allocation.
Hook hook_by_name(const char* name) noexcept;
/// Our exported wrapper for a hook.
void* hook_wrapper(Hook h) noexcept;

}  // namespace vramtrace::shim

// The exported wrappers, declared once so that every hand-written definition is checked against
// both this list and the CUDA headers' own declarations.
extern "C" {
#define VT_HOOK(level, policy, name, ret, params, args) VT_EXPORT ret name params;
#include "base/hooks.def"
#undef VT_HOOK
}
