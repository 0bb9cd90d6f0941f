// A traced program killed at random points (fault injection, docs/reliability.md): SIGKILL, SIGTERM
// and SIGINT at random moments from the first microseconds (before or while the header is written)
// to well into the run, with 1 to 8 threads recording. Whatever the moment, the trace on disk must
// be valid up to the failure: open_trace reads it without error (only a cut last line or a missing
// trailer, reported as incomplete), each thread's events appear in order with none duplicated or
// skipped, and no event appears that was never recorded. A file holding no complete line (killed
// before the header reached the disk) is the one exception: the reader refuses it with a clear
// TraceError. The writer's own durability test (tests/trace) checks the 100 ms flush promise.
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <thread>
#include <vector>

#include "readers/open_trace.h"
#include "vramtrace/trace/writer.h"

using namespace vramtrace;
using namespace vramtrace::trace;
namespace fs = std::filesystem;

namespace {

[[noreturn]] void traced_child(const std::string& path, int threads, pid_t parent) {
  // A forked copy of the test process carries Catch2's fatal-signal handlers: give the child the
  // default dispositions a plain program has.
  signal(SIGTERM, SIG_DFL);
  signal(SIGINT, SIG_DFL);
  // The child writes as fast as it can until it is killed: if the test process dies first (killed
  // itself, or stuck), the child must not outlive it and fill the disk. It dies with its parent,
  // and it ends itself (not by a signal, so the test fails) after a minute in any case.
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != parent) _exit(5);
  std::thread([] {
    std::this_thread::sleep_for(std::chrono::seconds(60));
    _exit(4);
  }).detach();
  TraceWriterOptions o;
  o.output_pattern = path;
  o.flush_interval_ms = 20;
  o.buffer_events = 1024;
  auto* w = new TraceWriter(o);  // never destroyed: killed
  if (!w->start()) _exit(3);
  std::vector<std::thread> ts;
  for (int t = 0; t < threads; ++t) {
    ts.emplace_back([w, t] {
      for (std::uint64_t id = 1;; ++id) {
        Event e{};
        e.action = Action::alloc;
        e.time_ns = TraceWriter::now_ns();
        e.addr = (static_cast<std::uint64_t>(t + 1) << 40) | id;  // thread in the high bits, sequence below
        e.size_bytes = id;
        e.block_bytes = (e.size_bytes + 511) / 512 * 512;  // rounded up, as an allocator does
        e.thread_id = static_cast<std::uint32_t>(t + 1);
        w->record(e);
        if (id % 64 == 0) std::this_thread::yield();
      }
    });
  }
  for (auto& t : ts) t.join();
  _exit(0);
}

struct Verdict {
  bool refused = false;  // TraceError (allowed only when no complete line is on disk)
  std::string error;
  std::uint64_t events = 0;
  bool incomplete = false;
};

Verdict check_trace(const std::string& path, int threads) {
  Verdict v;
  register_trace_format("vramtrace", open_vramtrace_trace);
  std::map<std::uint64_t, std::uint64_t> last;  // thread -> last sequence seen
  try {
    auto r = open_trace(path);
    TraceRecord rec;
    while (r->next(rec)) {
      ++v.events;
      REQUIRE(rec.action == Action::alloc);
      const std::uint64_t thread = rec.addr >> 40, seq = rec.addr & ((std::uint64_t{1} << 40) - 1);
      REQUIRE(thread >= 1);
      REQUIRE(thread <= static_cast<std::uint64_t>(threads));
      REQUIRE(rec.size == seq);
      // Per thread in order, nothing skipped or duplicated (the writer keeps each thread's order).
      REQUIRE(seq == last[thread] + 1);
      last[thread] = seq;
    }
    v.incomplete = r->incomplete();
  } catch (const TraceError& e) {
    v.refused = true;
    v.error = e.what();
  }
  return v;
}

}  // namespace

TEST_CASE("a traced program killed at a random moment leaves a trace valid up to the kill", "[signals]") {
  std::string dir_template = (fs::temp_directory_path() / "vramtrace-signals-XXXXXX").string();
  REQUIRE(mkdtemp(dir_template.data()) != nullptr);
  const fs::path dir = dir_template;
  std::mt19937_64 rng(20261130);
  const int signals[] = {SIGKILL, SIGTERM, SIGINT};
  int refused = 0, with_events = 0;
  for (int run = 0; run < 24; ++run) {
    const int sig = signals[run % 3];
    const int threads = 1 + static_cast<int>(rng() % 8);
    // Log-uniform delay from 10 us to 300 ms: many kills land during start-up and the header.
    const auto delay_us = static_cast<long>(std::exp(std::log(10.0) + (rng() % 1000) / 1000.0 * std::log(30000.0)));
    const std::string path = (dir / ("run" + std::to_string(run) + ".jsonl")).string();
    const pid_t parent = getpid();
    const pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) traced_child(path, threads, parent);
    std::this_thread::sleep_for(std::chrono::microseconds(delay_us));
    kill(pid, sig);
    int status = 0;
    REQUIRE(waitpid(pid, &status, 0) == pid);
    INFO("run " << run << ": signal " << sig << " after " << delay_us << " us, " << threads << " threads");
    REQUIRE(WIFSIGNALED(status));  // the writer must not swallow the signal: the program dies as it would
    CHECK(WTERMSIG(status) == sig);
    if (!fs::exists(path)) {
      ++refused;  // killed before the file was created
      continue;
    }
    const Verdict v = check_trace(path, threads);
    if (v.refused) {
      // Only acceptable when not even the header line reached the disk.
      std::ifstream f(path, std::ios::binary);
      const std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
      INFO(v.error);
      CHECK(bytes.find('\n') == std::string::npos);
      CHECK(!v.error.empty());
      ++refused;
    } else {
      CHECK(v.incomplete);  // no trailer: the program never reached its end
      if (v.events > 0) ++with_events;
    }
  }
  INFO(refused << " runs killed before the header was on disk, " << with_events << " with events");
  CHECK(with_events >= 4);  // about half the delays are under 2 ms, before the first flush
  std::error_code ec;
  fs::remove_all(dir, ec);
}
