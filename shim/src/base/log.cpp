#include "base/log.h"

#include <sys/uio.h>
#include <unistd.h>

#include <spdlog/logger.h>
#include <spdlog/sinks/sink.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <memory>

#include "base/process.h"
#include "vramtrace.h"

namespace vramtrace::shim {

namespace detail {
constinit std::atomic<int> g_log_threshold{0};
}  // namespace detail

namespace {

using detail::g_log_threshold;

constexpr std::size_t kMaxRawParts = 16;
constexpr std::size_t kRawLineBytes = 1024;  // a message formatted during exit is cut here

const char* level_name(LogLevel level) noexcept {
  switch (level) {
    case LogLevel::trace:
      return "trace";
    case LogLevel::debug:
      return "debug";
    case LogLevel::info:
      return "info";
    case LogLevel::warn:
      return "warn";
    case LogLevel::error:
      return "error";
    case LogLevel::off:
      return "off";
  }
  return "?";
}

spdlog::level::level_enum to_spdlog(LogLevel level) noexcept {
  switch (level) {
    case LogLevel::trace:
      return spdlog::level::trace;
    case LogLevel::debug:
      return spdlog::level::debug;
    case LogLevel::info:
      return spdlog::level::info;
    case LogLevel::warn:
      return spdlog::level::warn;
    case LogLevel::error:
      return spdlog::level::err;
    case LogLevel::off:
      return spdlog::level::off;
  }
  return spdlog::level::warn;
}

LogLevel from_spdlog(spdlog::level::level_enum level) noexcept {
  switch (level) {
    case spdlog::level::trace:
      return LogLevel::trace;
    case spdlog::level::debug:
      return LogLevel::debug;
    case spdlog::level::info:
      return LogLevel::info;
    case spdlog::level::warn:
      return LogLevel::warn;
    default:
      return LogLevel::error;
  }
}

// The threshold in force, the default before VRAMTRACE_LOG_LEVEL was read (no getenv here).
LogLevel threshold_now() noexcept {
  const int t = g_log_threshold.load(std::memory_order_relaxed);
  return t == 0 ? kDefaultLogLevel : static_cast<LogLevel>(t);
}

// Note [log without locks]: the logger's only sink. spdlog has already checked the level; the
// payload is the formatted message.
class StderrLineSink final : public spdlog::sinks::sink {
 public:
  void log(const spdlog::details::log_msg& msg) override {
    write_log_line(from_spdlog(msg.level), {std::string_view(msg.payload.data(), msg.payload.size())});
  }
  void flush() override {}
  void set_pattern(const std::string&) override {}
  void set_formatter(std::unique_ptr<spdlog::formatter>) override {}
};

std::atomic<spdlog::logger*> g_logger{nullptr};

// The process's logger, created on first use and never destroyed; null when out of host memory.
// Lock-free like the driver table (Note [no lock across dlopen] in real.cpp): the first one
// published wins.
spdlog::logger* logger() noexcept {
  spdlog::logger* l = g_logger.load(std::memory_order_acquire);
  if (l) return l;
  spdlog::logger* mine = nullptr;
  try {
    mine = new spdlog::logger("vramtrace", std::make_shared<StderrLineSink>());
    mine->set_level(to_spdlog(threshold_now()));
    mine->flush_on(spdlog::level::off);
  } catch (...) {
    delete mine;
    return nullptr;
  }
  spdlog::logger* expected = nullptr;
  if (g_logger.compare_exchange_strong(expected, mine, std::memory_order_acq_rel)) return mine;
  delete mine;
  return expected;
}

// Decisions already logged: one bit per (decision, hook). Roads handed out: two bits per hook.
constexpr std::size_t kDecisionBits = static_cast<std::size_t>(Decision::count) * kHookCount;
std::atomic<std::uint64_t> g_seen[(kDecisionBits + 63) / 64];
std::atomic<std::uint8_t> g_roads[kHookCount];

const char* const kDecisionText[] = {
#define VT_DECISION_TEXT(name, text) text,
    VT_LOG_DECISIONS(VT_DECISION_TEXT)
#undef VT_DECISION_TEXT
};

}  // namespace

bool parse_log_level(std::string_view text, LogLevel& out) noexcept {
  static constexpr LogLevel kAll[] = {LogLevel::trace, LogLevel::debug, LogLevel::info,
                                      LogLevel::warn,  LogLevel::error, LogLevel::off};
  for (LogLevel l : kAll) {
    const std::string_view name = level_name(l);
    if (name.size() == text.size() &&
        std::equal(name.begin(), name.end(), text.begin(), [](char a, char b) { return a == (b | 0x20); })) {
      out = l;
      return true;
    }
  }
  return false;
}

void log_init() noexcept {
  if (g_log_threshold.load(std::memory_order_acquire) != 0) return;
  const char* value = std::getenv("VRAMTRACE_LOG_LEVEL");
  LogLevel level = kDefaultLogLevel;
  const bool bad = value && *value && !parse_log_level(value, level);
  int expected = 0;
  // Two threads may read the variable at once; the first to publish prints the one warning.
  if (!g_log_threshold.compare_exchange_strong(expected, static_cast<int>(level), std::memory_order_acq_rel)) return;
  if (bad)
    log_line(LogLevel::warn,
             "VRAMTRACE_LOG_LEVEL: '{}' is not a level (trace, debug, info, warn, error, off); using {}", value,
             level_name(kDefaultLogLevel));
  log_line(LogLevel::info, "libvramtrace {} loaded (log level {})", vramtrace_version(), level_name(level));
}

bool detail::log_enabled_slow(LogLevel level) noexcept {
  log_init();
  return static_cast<int>(level) >= g_log_threshold.load(std::memory_order_relaxed);
}

void detail::vlog(LogLevel level, fmt::string_view format, fmt::format_args args) noexcept {
  const int saved_errno = errno;  // a hook's caller may read errno after the call
  struct Restore {
    int value;
    ~Restore() { errno = value; }
  } restore{saved_errno};
  try {
    if (exiting()) {
      // Note [async-signal-safe log]: formatted on the stack, written without the logger.
      char text[kRawLineBytes];
      const auto r = fmt::vformat_to_n(text, sizeof text, format, args);
      write_log_line(level, {std::string_view(text, std::min(r.size, sizeof text))});
      return;
    }
    fmt::memory_buffer text;
    fmt::vformat_to(fmt::appender(text), format, args);
    if (spdlog::logger* l = logger())
      l->log(spdlog::source_loc{}, to_spdlog(level), spdlog::string_view_t(text.data(), text.size()));
    else
      write_log_line(level, {std::string_view(text.data(), text.size())});
  } catch (...) {
    // Out of host memory or a bad argument: the line is dropped, the program goes on.
  }
}

void RawPart::set_number(bool negative, std::uint64_t magnitude) noexcept {
  number_ = true;
  start_ = sizeof digits_;
  do {
    digits_[--start_] = static_cast<char>('0' + magnitude % 10);
    magnitude /= 10;
  } while (magnitude != 0);
  if (negative) digits_[--start_] = '-';
}

void write_log_line(LogLevel level, std::initializer_list<RawPart> parts) noexcept {
  const int saved_errno = errno;
  // "vramtrace: " for warnings and errors (the text of every message the shim printed before
  // levels existed); "vramtrace[<pid>] <level>: " for the others.
  const bool plain = level >= LogLevel::warn;
  const RawPart pid(plain ? 0L : static_cast<long>(getpid()));
  iovec iov[kMaxRawParts + 6];
  int n = 0;
  auto add = [&](std::string_view s) {
    if (!s.empty()) iov[n++] = {const_cast<char*>(s.data()), s.size()};
  };
  if (plain) {
    add("vramtrace: ");
  } else {
    add("vramtrace[");
    add(pid.view());
    add("] ");
    add(level_name(level));
    add(": ");
  }
  std::size_t taken = 0;
  for (const RawPart& p : parts) {
    if (taken++ == kMaxRawParts) break;
    add(p.view());
  }
  add("\n");
  iovec* v = iov;
  while (n > 0) {
    const ssize_t w = ::writev(2, v, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) break;
    // A short write: skip what was written and go on from there.
    auto left = static_cast<std::size_t>(w);
    while (n > 0 && left >= v->iov_len) {
      left -= v->iov_len;
      ++v;
      --n;
    }
    if (n > 0) {
      v->iov_base = static_cast<char*>(v->iov_base) + left;
      v->iov_len -= left;
    }
  }
  errno = saved_errno;
}

void log_raw(LogLevel level, std::initializer_list<RawPart> parts) noexcept {
  if (level == LogLevel::off || level < threshold_now()) return;
  write_log_line(level, parts);
}

bool detail::log_first(Decision d, std::uint16_t hook) noexcept {
  if (threshold_now() <= LogLevel::trace) return true;  // trace: every occurrence
  if (hook >= kHookCount) hook = 0;
  const std::size_t bit = static_cast<std::size_t>(d) * kHookCount + hook;
  std::atomic<std::uint64_t>& word = g_seen[bit / 64];
  const std::uint64_t mask = std::uint64_t{1} << (bit % 64);
  if (word.load(std::memory_order_relaxed) & mask) return false;
  return (word.fetch_or(mask, std::memory_order_relaxed) & mask) == 0;
}

void detail::vlog_decision(Decision d, std::uint16_t hook, fmt::string_view format, fmt::format_args args) noexcept {
  try {
    fmt::memory_buffer extra;
    fmt::vformat_to(fmt::appender(extra), format, args);
    log_line(LogLevel::debug, "{}: {}{}", hook_name(hook), kDecisionText[static_cast<std::size_t>(d)],
             std::string_view(extra.data(), extra.size()));
  } catch (...) {
  }
}

void detail::note_road(std::uint16_t hook, Road road) noexcept {
  if (hook < kHookCount) g_roads[hook].fetch_or(static_cast<std::uint8_t>(road), std::memory_order_relaxed);
}

void detail::log_first_call(std::uint16_t hook, std::uint16_t outer) noexcept {
  if (!log_first(Decision::first_call, hook)) return;
  const char* what = threshold_now() <= LogLevel::trace ? "call" : "first call";  // trace: every call
  if (outer != hook) {
    log_line(LogLevel::debug, "{}: {}, inside {} (cudart or the driver calling on)", hook_name(hook), what,
             hook_name(outer));
    return;
  }
  const unsigned roads = hook < kHookCount ? g_roads[hook].load(std::memory_order_relaxed) : 0;
  const char* road = "exported symbol (the program or a library bound to our export)";
  if (roads == static_cast<unsigned>(Road::dlsym)) road = "a pointer our dlsym handed out";
  if (roads == static_cast<unsigned>(Road::resolver)) road = "a pointer a resolver handed out (cuGetProcAddress)";
  if (roads == (static_cast<unsigned>(Road::dlsym) | static_cast<unsigned>(Road::resolver)))
    road = "a pointer our dlsym or a resolver handed out";
  log_line(LogLevel::debug, "{}: {} (road: {})", hook_name(hook), what, road);
}

void log_after_fork_child() noexcept {
  for (auto& w : g_seen) w.store(0, std::memory_order_relaxed);
}

}  // namespace vramtrace::shim
