// The shim's diagnostics: one spdlog logger per process, levels from VRAMTRACE_LOG_LEVEL, and the
// debug log of interposition decisions ("why is my program's memory not traced").
//
// Lines, on stderr (fd 2), one write each:
//   warn, error:          "vramtrace: <message>"            (the text printed before levels existed)
//   info, debug, trace:   "vramtrace[<pid>] <level>: <message>"
//
// Note [log without locks]: the shim logs from any thread of any program, inside the loader lock
// (dlsym during dlopen), in a fork child whose other threads are gone, and while the process
// exits. So the logger's one sink formats nothing and takes no lock: it hands the message to
// write_log_line, which writes prefix, message and newline with one writev(2) from the stack.
// spdlog's own stderr sinks lock a global console mutex, which a thread may hold at fork and
// never release in the child; its pattern formatter keeps per-sink caches that need that lock.
// The logger object is created on first use and never destroyed (hooks run after static
// destructors).
//
// Note [async-signal-safe log]: in a signal handler, the fork child handler and during exit
// (once exiting() is true) nothing may allocate or take a lock. Those places call log_raw,
// which checks the level and calls write_log_line directly: no formatting library, no logger
// object, no heap. log_line routes to the same path by itself once exit has begun, so a hook
// that logs while the process exits is safe too. Nothing else calls log_raw.
#pragma once

#include <fmt/format.h>

#include <atomic>
#include <concepts>
#include <cstdint>
#include <initializer_list>
#include <string_view>

#include "base/hooks.h"

namespace vramtrace::shim {

/// Levels of VRAMTRACE_LOG_LEVEL, in increasing severity. The default is warn: warnings and
/// errors, exactly what the shim printed before levels existed.
enum class LogLevel : int { trace = 1, debug, info, warn, error, off };
inline constexpr LogLevel kDefaultLogLevel = LogLevel::warn;

/// Reads "trace", "debug", "info", "warn", "error" or "off" (any case). False for anything else
/// (`out` unchanged).
bool parse_log_level(std::string_view text, LogLevel& out) noexcept;

namespace detail {
/// The threshold as an int; 0 until VRAMTRACE_LOG_LEVEL was read. Constant-initialised, so it
/// is valid before any constructor runs.
extern constinit std::atomic<int> g_log_threshold;
bool log_enabled_slow(LogLevel level) noexcept;
void vlog(LogLevel level, fmt::string_view format, fmt::format_args args) noexcept;
}  // namespace detail

/// Whether messages of `level` are shown. At the default level this is one relaxed atomic load
/// and a compare for debug and trace (the check every hook makes before logging anything); the
/// first call before VRAMTRACE_LOG_LEVEL was read reads it. Thread-safe, async-signal-safe once
/// the level was read (log_init).
inline bool log_enabled(LogLevel level) noexcept {
  const int t = detail::g_log_threshold.load(std::memory_order_relaxed);
  return static_cast<int>(level) >= t && (t != 0 || detail::log_enabled_slow(level));
}

/// Reads VRAMTRACE_LOG_LEVEL (once; later calls do nothing). A value that is not a level prints
/// one warning and leaves the default. Called by the library constructor, and by the first
/// log_enabled if something logs before it. Thread-safe. Never from a signal handler.
void log_init() noexcept;

/// Logs one line at `level` through the process's logger (fmt syntax, checked at compile time).
/// Does nothing below the threshold; the arguments are evaluated all the same, so guard a costly
/// one with log_enabled. Never throws and keeps errno; a message that cannot be formatted is
/// dropped. Once exit has begun it writes through the path of log_raw (no heap, no lock).
/// Thread-safe; not for signal handlers or the fork child handler (use log_raw).
template <class... Args>
void log_line(LogLevel level, fmt::format_string<Args...> format, Args&&... args) noexcept {
  if (!log_enabled(level)) return;
  detail::vlog(level, format, fmt::make_format_args(args...));
}

/// An integer a raw line writes in decimal (bool and char are not numbers there).
template <class T>
concept RawInteger = std::integral<T> && !std::same_as<T, bool> && !std::same_as<T, char>;

/// One piece of a raw line: text, or an integer written in decimal into the piece itself.
class RawPart {
 public:
  RawPart(std::string_view text) noexcept : text_(text) {}
  RawPart(const char* text) noexcept : text_(text ? text : "(null)") {}
  template <RawInteger T>
  RawPart(T value) noexcept {
    set_number(value < 0, value < 0 ? 0 - static_cast<std::uint64_t>(value) : static_cast<std::uint64_t>(value));
  }
  std::string_view view() const noexcept {
    return number_ ? std::string_view(digits_ + start_, sizeof digits_ - start_) : text_;
  }

 private:
  void set_number(bool negative, std::uint64_t magnitude) noexcept;
  std::string_view text_;
  char digits_[21] = {};
  unsigned char start_ = sizeof digits_;
  bool number_ = false;
};

/// Note [async-signal-safe log]: writes "vramtrace...: " + parts + "\n" at `level` with one
/// writev(2) (at most 16 parts; more are dropped). No allocation, no lock, errno preserved. For
/// signal handlers, the fork child handler and exit only. Before the level was read, the default
/// level applies (the variable is not read here: getenv is not async-signal-safe).
void log_raw(LogLevel level, std::initializer_list<RawPart> parts) noexcept;

/// The one writer behind every shim log line (Note [log without locks]): prefix for `level`,
/// parts, newline, one writev(2) to fd 2, retried on EINTR and short writes. Async-signal-safe.
void write_log_line(LogLevel level, std::initializer_list<RawPart> parts) noexcept;

// ---------------------------------------------------------------------------------------------
// The debug log of interposition decisions. Each decision is logged once per (decision, hook)
// at debug, every time at trace: a debug run shows every distinct road and reason after the first
// occurrence and then stays quiet on the hot path. `hook` is the outermost entry point of the call
// (what the program called; Note [count once]) unless the text says otherwise.
//
// X(name, text): the text follows "<hook>: " on the line; a detail may be appended.
#define VT_LOG_DECISIONS(X)                                                                                   \
  /* the roads in */                                                                                          \
  X(first_call, "first call")                                                                                 \
  X(dlsym_substituted, "dlsym answered with our wrapper (road: dlsym substitution)")                          \
  X(dlsym_default, "dlsym(RTLD_DEFAULT) forwarded: it finds our exported symbol by itself")                   \
  X(dlsym_next, "dlsym(RTLD_NEXT) forwarded: it keeps meaning \"after the caller\"")                          \
  X(dlsym_runtime, "dlsym of a runtime function forwarded: the driver hooks its cudart reaches see the call") \
  X(dlsym_not_found, "dlsym forwarded: the caller's handle does not define it (NULL and dlerror)")            \
  X(dlsym_disabled, "dlsym forwarded untouched: VRAMTRACE_CONF was refused")                                  \
  X(resolver_substituted, "our wrapper substituted for the driver's pointer (road: resolver substitution)")   \
  X(resolver_unmapped,                                                                                        \
    "resolved to a pointer vramtrace cannot map to one of its variants: calls through it bypass vramtrace "   \
    "(shim.resolver_unmapped)")                                                                               \
  X(resolver_unhooked, "resolved to a variant vramtrace does not hook: not substituted, not traced")          \
  X(no_real_function, "no real function found: the call fails")                                               \
  /* served */                                                                                                \
  X(served_cache, "served by the caching allocator")                                                          \
  X(served_fast, "served by the caching allocator without entering cudart (runtime fast path)")               \
  /* pass-through reasons: device memory the caching allocator did not serve */                               \
  X(pass_invalid, "NULL pointer or size 0: forwarded for the driver's own answer")                            \
  X(pass_internal, "the shim's own call: forwarded untraced (recursion guard)")                               \
  X(pass_disabled, "not cached: VRAMTRACE_CONF was refused, every call passes through untouched")             \
  X(pass_reuse_none, "not cached (reuse:none): forwarded, traced as pass-through memory")                     \
  X(pass_exit, "not cached: process exit has begun: forwarded, traced as pass-through memory")                \
  X(pass_capture,                                                                                             \
    "not cached: a stream capture is active (Note [capture passes through]): forwarded, traced as "           \
    "pass-through memory")                                                                                    \
  X(pass_no_pool,                                                                                             \
    "not cached: no CUDA context is current on the thread, or no pool could be made for it: forwarded, "      \
    "traced as pass-through memory")                                                                          \
  X(pass_oom_fallback,                                                                                        \
    "the caching allocator ran out of memory; the exact request was forwarded and succeeded (Note [no "       \
    "spurious OOM]): traced as pass-through memory")                                                          \
  X(pass_managed, "managed memory is never cached: forwarded, traced as pass-through memory (kind managed)")  \
  X(pass_pitched, "pitched memory is never cached: forwarded, traced as pass-through memory (kind pitched)")  \
  X(pass_pool,                                                                                                \
    "an explicit memory pool (cuMemAllocFromPoolAsync, or after cuDeviceSetMemPool) keeps the program's "     \
    "attributes: forwarded, traced as pass-through memory (kind pool)")                                       \
  X(pass_host, "pinned host memory is not device memory: forwarded, traced (kind host)")                      \
  X(pass_array, "CUDA arrays are never cached: forwarded, traced (kind array, size 0)")                       \
  X(pass_vmm, "virtual memory the program maps itself: forwarded, traced (kind vmm)")                         \
  /* frees */                                                                                                 \
  X(free_unknown,                                                                                             \
    "a pointer vramtrace never handed out (allocated before it was loaded, or on a road it did not see): "    \
    "forwarded (shim.unknown_frees)")                                                                         \
  X(free_double,                                                                                              \
    "inside vramtrace's cache but not a live block (a double free or an interior pointer): "                  \
    "CUDA_ERROR_INVALID_VALUE (shim.double_frees)")                                                           \
  X(free_exit, "a free after process exit began: forgotten, no driver call (Note [no CUDA call at exit])")    \
  X(free_ipc, "a block exported by IPC: quarantined at its free, never reused")                               \
  X(ipc_exported, "a block of vramtrace's cache exported by IPC: it will never be reused")                    \
  X(ipc_refused,                                                                                              \
    "an IPC export of a block that does not start its cached segment: refused with "                          \
    "CUDA_ERROR_INVALID_VALUE (an importer would map the segment's start)")                                   \
  X(query_block, "a pointer query about a block of vramtrace's cache: answered for the block")

enum class Decision : std::uint8_t {
#define VT_DECISION_ENUM(name, text) name,
  VT_LOG_DECISIONS(VT_DECISION_ENUM)
#undef VT_DECISION_ENUM
      count
};

/// How a pointer to one of our wrappers was handed to the program, for the road of its first call.
enum class Road : std::uint8_t { dlsym = 1, resolver = 2 };

/// A hook id as the decision log takes it: a Hook, or the std::uint16_t of EntryScope::entry().
struct HookId {
  std::uint16_t id;
  HookId(Hook h) noexcept : id(static_cast<std::uint16_t>(h)) {}
  HookId(std::uint16_t h) noexcept : id(h) {}
};

namespace detail {
bool log_first(Decision d, std::uint16_t hook) noexcept;
void vlog_decision(Decision d, std::uint16_t hook, fmt::string_view format, fmt::format_args args) noexcept;
void log_first_call(std::uint16_t hook, std::uint16_t outer) noexcept;
void note_road(std::uint16_t hook, Road road) noexcept;
}  // namespace detail

/// At debug, the first time `d` happens for `hook` (at trace, every time): "<hook>: <text>".
/// Thread-safe; costs one atomic load below debug.
inline void log_decision(Decision d, HookId hook) noexcept {
  if (log_enabled(LogLevel::debug) && detail::log_first(d, hook.id)) detail::vlog_decision(d, hook.id, "", {});
}
/// The same, with `extra` appended to the text (fmt syntax).
template <class... Args>
void log_decision(Decision d, HookId hook, fmt::format_string<Args...> extra, Args&&... args) noexcept {
  if (log_enabled(LogLevel::debug) && detail::log_first(d, hook.id))
    detail::vlog_decision(d, hook.id, extra, fmt::make_format_args(args...));
}

/// A hook was entered (EntryScope); `outer` is the outermost hook of the call (itself when it
/// is the outermost). At debug its first call is logged with the road it came in by: "a pointer
/// from dlsym" or "from a resolver" when we handed one out for it (note_road), else "exported
/// symbol" (the program or a library bound to our export); or "inside <outer>".
inline void log_hook_entered(Hook hook, std::uint16_t outer) noexcept {
  if (log_enabled(LogLevel::debug)) [[unlikely]]
    detail::log_first_call(static_cast<std::uint16_t>(hook), outer);
}

/// Remembers (at debug only) that a pointer to `hook`'s wrapper was handed out by `road`.
inline void log_note_road(Hook hook, Road road) noexcept {
  if (log_enabled(LogLevel::debug)) detail::note_road(static_cast<std::uint16_t>(hook), road);
}

/// Fork child: decisions are logged afresh (the child is another process). Async-signal-safe.
void log_after_fork_child() noexcept;

}  // namespace vramtrace::shim
