#include "base/process.h"

#include <fcntl.h>
#include <pthread.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string>

#include "base/counters.h"
#include "base/entry.h"
#include "base/log.h"
#include "base/real.h"
#include "base/sink.h"
#include "policies/capture.h"
#include "policies/context_pool.h"
#include "policies/passthrough.h"
#include "policies/stream_work.h"

namespace vramtrace::shim {

std::atomic<std::uint64_t> g_calls[kHookCount];
constinit thread_local ThreadEntry t_entry;
Counters g_counters;

namespace {

std::atomic<bool> g_exiting{false};
std::once_flag g_atfork_once;

void begin_exit() noexcept {
  if (g_exiting.exchange(true)) return;
  pools().abandon_all(false);
  // Note [async-signal-safe log]: from here on every line takes the raw path.
  log_raw(LogLevel::info, {"exit began: no CUDA call of ours from here on (Note [no CUDA call at exit])"});
}

void on_exit_handler() { begin_exit(); }

void fork_child() {
  log_after_fork_child();
  // Note [async-signal-safe log]: in the child of a multithreaded process only async-signal-safe
  // calls are allowed until the handlers are done.
  log_raw(LogLevel::info, {"fork child: pools, pass-through records and counters dropped"});
  pools().abandon_all(true);
  passthrough_after_fork_child();
  memory_cap_after_fork_child();
  capture_after_fork_child();
  stream_work_after_fork_child();
  real_after_fork_child();
  g_counters.reset();
  for (auto& c : g_calls) c.store(0, std::memory_order_relaxed);
  sink_after_fork_child();
}

void install_fork_handlers() noexcept {
  std::call_once(g_atfork_once, [] { pthread_atfork(sink_before_fork, sink_after_fork_parent, fork_child); });
}

// The fork handlers are installed when the library is loaded (a plain libc call: no setting is
// read, no driver call). Installing them with the first pool left a window: a thread forking while
// others were inside their first CUDA call, before any pool existed, gave a child the parent's
// call counters (seen in CI: a child reporting calls.cudaMalloc 5).
// The registries the child handler touches are created here too, so that a fork never finds their
// lazy initialisation half done by another thread.
__attribute__((constructor)) void shim_init() {
  log_init();  // VRAMTRACE_LOG_LEVEL: a bad value is reported at load, in every process
  (void)pools();
  passthrough_init();
  install_fork_handlers();
}

// Last: after every atexit handler, so the trace and the stats see the whole run.
__attribute__((destructor)) void shim_fini() {
  begin_exit();
  try {
    std::vector<std::pair<int, std::vector<std::pair<std::string, std::int64_t>>>> stats;
    for (ContextPool* p : pools().all()) stats.emplace_back(p->device, flatten_stats(p->allocator.stats()));
    sink_close(stats);
  } catch (...) {
  }
  write_stats_file();
}

}  // namespace

bool exiting() noexcept { return g_exiting.load(std::memory_order_acquire); }

void lifecycle_pool_created() noexcept {
  std::atexit(on_exit_handler);
  install_fork_handlers();
}

void write_stats_file() noexcept {
  const char* pattern = std::getenv("VRAMTRACE_TEST_STATS_FILE");
  if (!pattern || !*pattern) return;
  try {
    std::string path;
    for (const char* p = pattern; *p; ++p) {
      if (p[0] == '%' && p[1] == 'p') {
        path += std::to_string(getpid());
        ++p;
      } else {
        path += *p;
      }
    }
    std::string out;
    auto line = [&](const std::string& k, std::uint64_t v) { out += k + " " + std::to_string(v) + "\n"; };
    line("pid", static_cast<std::uint64_t>(getpid()));
    for (std::size_t i = 1; i < kHookCount; ++i) line(std::string("calls.") + hook_name(i), g_calls[i].load());
#define VT_WRITE_COUNTER(name) line("shim." #name, g_counters.name.load());
    VT_SHIM_COUNTERS(VT_WRITE_COUNTER)
#undef VT_WRITE_COUNTER
    for (unsigned a = 0; a <= static_cast<unsigned>(Action::mark); ++a)
      line(std::string("events.") + action_name(static_cast<Action>(a)), g_event_counts.by_action[a].load());
    for (std::size_t i = 0; i < kHookCount && i < 256; ++i)
      line(std::string("entry.") + hook_name(i), g_event_counts.by_entry[i].load());
    std::map<std::string, std::int64_t> sums;
    auto live = pools().all();
    line("pools.live", live.size());
    for (auto& p : live)
      for (auto& [k, v] : flatten_stats(p->allocator.stats())) sums[k] += v;
    for (auto& [k, v] : sums) out += "allocator." + k + " " + std::to_string(v) + "\n";
    int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return;
    ssize_t n = write(fd, out.data(), out.size());
    (void)n;
    close(fd);
  } catch (...) {
  }
}

}  // namespace vramtrace::shim
