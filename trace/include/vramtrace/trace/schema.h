// The vocabulary of the trace schema (schema.def): the kinds of value a field holds, what a
// missing field means, and the sets of actions that carry an event field. The writer
// (format.cpp) and the reader (vramtrace_reader.cpp) overload their encoders and decoders on
// these tags, so both ends expand the same list with the same meaning.
//
// Header-only and constexpr: the writer is linked into the shim, which must stay free of
// run-time dependencies.
#pragma once

#include <cstdint>

#include "vramtrace/event.h"

namespace vramtrace::trace::schema {

/// What a missing field means, and so when the writer leaves a field out.
enum class Absent : std::uint8_t {
  never,     ///< always written; a line without it reads as 0, "" or false
  zero,      ///< left out when 0, empty or unset; a missing field reads as that
  equals_r,  ///< event "b": left out when equal to the event's "r"; a missing field reads as "r"
  unknown,   ///< always written, but missing in traces of older minor versions: reads as unknown
  is_true,   ///< a flag left out when true; a missing field reads as true
};

// The kinds of value. Each is an empty tag type; the writer and the reader overload on it.
struct time {};             ///< event "t": signed ns relative to the header's origin_monotonic_ns
struct integer {};          ///< a decimal integer; signed or unsigned as the C++ member
struct string {};           ///< a JSON string
struct optional_string {};  ///< a JSON string, left out when the std::optional is unset
struct boolean {};          ///< true or false
struct strings {};          ///< an array of strings; a reader skips other values
struct id_names {};         ///< an array of strings indexed by id; a reader keeps other values as ""
struct string_map {};       ///< an object of strings; a reader keeps other values as their JSON text
struct devices {};          ///< an array of device objects (VRAMTRACE_DEVICE_FIELD)
struct writer_settings {};  ///< the header's "trace" object (VRAMTRACE_WRITER_SETTING_FIELD)
struct on_full {};          ///< "drop" or "wait" (the writer's drop_when_full)
struct snapshot {};         ///< an allocator snapshot object (VRAMTRACE_SNAPSHOT_FIELD)
struct segments {};         ///< an array of segment objects (VRAMTRACE_SEGMENT_FIELD)
struct blocks {};           ///< an array of block objects (VRAMTRACE_BLOCK_FIELD)
struct pool {};             ///< "large" or "small" (SegmentSnapshot::is_large); other text reads as large
struct block_state {};      ///< "active_allocated", "active_pending_free" or "inactive"
struct action_counts {};    ///< an object: action name -> event lines, actions with none left out
struct device_stats {};     ///< an array of per-device objects (VRAMTRACE_TRAILER_DEVICE_FIELD)
struct flat_stats {};       ///< an object: PyTorch flat statistic name -> integer
struct frames {};           ///< an array of frame objects: native (VRAMTRACE_NATIVE_FRAME_FIELD, with "pc") or Python
                            ///< (VRAMTRACE_PYTHON_FRAME_FIELD, with "f")

/// The bit of `a` in a set of actions.
constexpr std::uint32_t bit(Action a) noexcept { return std::uint32_t{1} << static_cast<unsigned>(a); }

/// True when the set `actions` holds `a`.
constexpr bool carries(std::uint32_t actions, Action a) noexcept { return (actions & bit(a)) != 0; }

/// The sets of actions whose event lines carry a field (schema.def's `actions` column).
namespace carried_by {
#define VRAMTRACE_SCHEMA_ACTION_BIT(name) | bit(Action::name)
inline constexpr std::uint32_t all = 0u VRAMTRACE_ACTIONS(VRAMTRACE_SCHEMA_ACTION_BIT);
#undef VRAMTRACE_SCHEMA_ACTION_BIT
inline constexpr std::uint32_t all_but_mark = all & ~bit(Action::mark);
/// Actions with an address: all but mark and oom (an oom has none; its Event::addr holds the retries).
inline constexpr std::uint32_t addressed = all_but_mark & ~bit(Action::oom);
inline constexpr std::uint32_t segments =
    bit(Action::segment_alloc) | bit(Action::segment_free) | bit(Action::segment_map) | bit(Action::segment_unmap);
inline constexpr std::uint32_t oom = bit(Action::oom);
/// Actions whose events carry a call stack (carries_stack in vramtrace/event.h).
inline constexpr std::uint32_t stacked = [] {
  std::uint32_t s = 0;
  for (unsigned a = 0; a < 32; ++a)
    if (a <= static_cast<unsigned>(Action::mark) && carries_stack(static_cast<Action>(a))) s |= std::uint32_t{1} << a;
  return s;
}();
inline constexpr std::uint32_t mark = bit(Action::mark);
}  // namespace carried_by

}  // namespace vramtrace::trace::schema
