// Fault injection through the fake driver (docs/reliability.md): allocation failures at
// every Nth call, synchronisation errors, a slow driver, fork in a multithreaded program, and
// SIGKILL/SIGTERM/SIGINT at random moments, with libvramtrace.so preloaded and tracing.
//
// The promise checked each time: the traced program computes the same results as without the
// shim, given the same injected faults (road_faults prints a hash per round and at the end; a
// run without LD_PRELOAD is the reference), and the trace is valid up to the failure: the
// reporter's own reader (`vramtrace summary`) reads it, and says it is incomplete exactly when
// the program did not reach its end.
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "spawn_util.h"

namespace {

using Env = std::vector<std::string>;

struct Result {
  int exit_code = -1;  // 128 + signal when killed
  std::string out, err;
  std::vector<std::string> results;        // "round R HASH" and "result HASH" lines, in order
  std::map<std::string, long long> tally;  // "program.X N" lines
  std::vector<std::string> children;       // "child R HASH" lines (fork mode)
  std::map<long, std::string> stats;       // the shim's VRAMTRACE_TEST_STATS_FILE, per pid
  std::vector<std::string> traces;         // trace files left in the run's directory
};

namespace test = vramtrace::test;
using test::slurp;

std::string temp_dir() {
  char tmpl[] = "/tmp/vt-shim-faults-XXXXXX";
  const char* d = mkdtemp(tmpl);
  REQUIRE(d != nullptr);
  return d;
}

void remove_dir(const std::string& dir) {
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* ent = readdir(d)) {
      std::string n = ent->d_name;
      if (n != "." && n != "..") std::remove((dir + "/" + n).c_str());
    }
    closedir(d);
  }
  rmdir(dir.c_str());
}

/// Spawns argv with the fake driver on LD_LIBRARY_PATH, the shim preloaded and tracing into
/// `dir` if `preload`, and `extra` in the environment. stdout and stderr go to dir/out and
/// dir/err.
pid_t spawn(const std::vector<std::string>& argv, bool preload, const Env& extra, const std::string& dir) {
  Env env;
  if (preload) {
    env.push_back(std::string("LD_PRELOAD=") + VT_SHIM_PATH);
    env.push_back("VRAMTRACE_OUTPUT=" + dir + "/trace.%p.jsonl");
    env.push_back("VRAMTRACE_TRACE_FLUSH_MS=10");
    env.push_back("VRAMTRACE_TEST_STATS_FILE=" + dir + "/stats.%p");
  }
  env.insert(env.end(), extra.begin(), extra.end());
  // Default signal dispositions: the tests below kill the program with SIGINT too.
  return test::spawn_captured(argv, test::clean_environment(env, VT_FAKELIB_DIR), dir + "/out", dir + "/err",
                              /*default_signals=*/true);
}

Result collect(pid_t pid, const std::string& dir) {
  Result r;
  r.exit_code = test::wait_exit_code(pid);
  r.out = slurp(dir + "/out");
  r.err = slurp(dir + "/err");
  std::istringstream in(r.out);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("round ", 0) == 0 || line.rfind("result ", 0) == 0) {
      r.results.push_back(line);
    } else if (line.rfind("child ", 0) == 0) {
      r.children.push_back(line);
    } else if (line.rfind("program.", 0) == 0) {
      std::istringstream ls(line.substr(8));
      std::string k;
      long long v = 0;
      if (ls >> k >> v) r.tally[k] = v;
    }
  }
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* ent = readdir(d)) {
      std::string n = ent->d_name;
      if (n.rfind("stats.", 0) == 0) r.stats[std::atol(n.c_str() + 6)] = slurp(dir + "/" + n);
      if (n.rfind("trace.", 0) == 0) r.traces.push_back(dir + "/" + n);
    }
    closedir(d);
  }
  return r;
}

std::string road_faults() { return std::string(VT_ROAD_DIR) + "/road_faults"; }

Result run_program(const std::vector<std::string>& args, bool preload, const Env& extra, const std::string& dir) {
  std::vector<std::string> argv = {road_faults()};
  argv.insert(argv.end(), args.begin(), args.end());
  return collect(spawn(argv, preload, extra, dir), dir);
}

struct Summary {
  int exit_code = -1;
  std::string out, err;
  nlohmann::json trace;  // the one element of "traces" when exit_code is 0
  bool incomplete() const { return trace.value("incomplete", false); }
  long long events() const { return trace.value("events", -1LL); }
  /// The reader's notes on the trace and its devices: layout conflicts (a block outside every
  /// segment, a segment released while it holds blocks...) mean the trace and the program's
  /// memory disagree.
  /// Informational notes (how many OOM layouts are kept) are left out.
  std::vector<std::string> notes() const {
    std::vector<std::string> out;
    auto keep = [&](const nlohmann::json& n) {
      const std::string text = n.get<std::string>();
      if (text.find("OOMs; the layout is kept for the first") == std::string::npos) out.push_back(text);
    };
    for (const auto& n : trace.value("notes", nlohmann::json::array())) keep(n);
    for (const auto& d : trace.value("devices", nlohmann::json::array()))
      for (const auto& n : d.value("notes", nlohmann::json::array())) keep(n);
    return out;
  }
};

/// `vramtrace summary --json TRACE`: the reporter's reader, as a user runs it.
Summary summarise(const std::string& trace) {
  test::TempDir dir("vt-shim-faults");
  Summary s;
  s.exit_code =
      test::wait_exit_code(test::spawn_captured({VT_VRAMTRACE_BIN, "summary", "--json", trace},
                                                test::clean_environment({}, ""), dir.file("out"), dir.file("err")));
  s.out = slurp(dir.file("out"));
  s.err = slurp(dir.file("err"));
  if (s.exit_code == 0) {
    const auto j = nlohmann::json::parse(s.out);
    REQUIRE(j.at("traces").size() == 1);
    s.trace = j.at("traces").at(0);
  }
  return s;
}

long long stat_of(const std::string& stats, const std::string& key) {
  std::istringstream in(stats);
  std::string k;
  long long v = 0;
  while (in >> k >> v)
    if (k == key) return v;
  return -1;
}

}  // namespace

TEST_CASE("injected driver faults: same results with and without the shim, complete trace", "[faults]") {
  struct Case {
    const char* name;
    Env faults;
    const char* rounds;
    bool alloc_faults, sync_faults;
  };
  const Case cases[] = {
      {"no fault", {}, "12", false, false},
      {"every 2nd device allocation fails", {"FAKECUDA_FAIL_ALLOC_EVERY=2"}, "12", true, false},
      {"every 7th device allocation fails", {"FAKECUDA_FAIL_ALLOC_EVERY=7"}, "12", true, false},
      {"every 3rd synchronisation fails", {"FAKECUDA_FAIL_SYNC_EVERY=3"}, "12", false, true},
      {"slow driver (300 us a call)", {"FAKECUDA_DELAY_US=300"}, "3", false, false},
      // Note [a free is recorded before it happens] (shim/src/policies/passthrough.h): another
      // thread gets a freed address while its free has not returned yet.
      {"freed addresses handed out again at once, frees slow to return",
       {"FAKECUDA_REUSE_ADDRESSES=1", "FAKECUDA_FREE_RETURN_US=200"},
       "4",
       false,
       false},
      {"all at once",
       {"FAKECUDA_FAIL_ALLOC_EVERY=3", "FAKECUDA_FAIL_SYNC_EVERY=2", "FAKECUDA_DELAY_US=50"},
       "4",
       true,
       true},
  };
  // reuse:none forwards every allocation to the driver: the pass-through path under faults.
  const char* confs[] = {"", "expandable_segments:True", "reuse:stream_ordered", "reuse:none"};
  for (const Case& c : cases) {
    for (const char* conf : confs) {
      INFO(c.name << ", VRAMTRACE_CONF=" << conf);
      Env env = c.faults;
      if (*conf) env.push_back(std::string("VRAMTRACE_CONF=") + conf);
      const std::string dir = temp_dir();
      const Result plain = run_program({"work", c.rounds, "4"}, false, env, dir);
      INFO("without the shim: " << plain.err);
      REQUIRE(plain.exit_code == 0);
      const Result traced = run_program({"work", c.rounds, "4"}, true, env, dir);
      INFO("with the shim: " << traced.err);
      REQUIRE(traced.exit_code == 0);
      REQUIRE(plain.results.size() == static_cast<size_t>(std::atoi(c.rounds)) + 1);
      CHECK(traced.results == plain.results);
      if (c.alloc_faults) {
        // The faults happened in both runs; without the shim the program saw them all.
        CHECK(plain.tally.at("injected_alloc_faults") > 0);
        CHECK(plain.tally.at("alloc_retries") == plain.tally.at("injected_alloc_faults"));
        CHECK(traced.tally.at("injected_alloc_faults") > 0);
        // Under the shim a failed segment allocation first releases the cache and retries: the
        // program sees at most as many failures as were injected.
        CHECK(traced.tally.at("alloc_retries") <= traced.tally.at("injected_alloc_faults"));
      } else {
        CHECK(plain.tally.at("injected_alloc_faults") == 0);
        CHECK(traced.tally.at("alloc_retries") == 0);
      }
      if (c.sync_faults) {
        // The program's own synchronisations fail with the driver's error, shim or not.
        CHECK(plain.tally.at("sync_errors") == plain.tally.at("injected_sync_faults"));
        CHECK(plain.tally.at("sync_errors") > 0);
        CHECK(traced.tally.at("sync_errors") > 0);
        CHECK(traced.tally.at("sync_errors") <= traced.tally.at("injected_sync_faults"));
      } else {
        CHECK(traced.tally.at("sync_errors") == 0);
      }
      REQUIRE(traced.stats.size() == 1);
      const std::string& stats = traced.stats.begin()->second;
      if (std::string(conf) == "reuse:none")
        CHECK(stat_of(stats, "shim.passthrough_allocs") > 0);  // forwarded, and traced
      else
        CHECK(stat_of(stats, "shim.cached_allocs") > 0);  // the shim did route allocations
      REQUIRE(traced.traces.size() == 1);
      const Summary s = summarise(traced.traces[0]);
      INFO(s.err);
      CHECK(s.exit_code == 0);
      CHECK_FALSE(s.incomplete());
      CHECK(s.events() > 0);
      // The trace describes the program's memory without contradiction (with expandable
      // segments, the exact-size allocation the shim forwards after an allocator OOM can sit right
      // below a later segment_map: the trace model must not extend it; trace_model.cpp).
      for (const auto& n : s.notes()) FAIL_CHECK("note on the trace: " << n);
      remove_dir(dir);
    }
  }
}

TEST_CASE("fork in a multithreaded program: children exit cleanly, parent's results unchanged", "[faults]") {
  for (const char* faults : {"FAKECUDA_FAIL_ALLOC_EVERY=1000000", "FAKECUDA_FAIL_ALLOC_EVERY=3"}) {
    INFO(faults);
    const std::string dir = temp_dir();
    const Env env = {faults};
    const Result plain = run_program({"fork", "16", "6"}, false, env, dir);
    INFO("without the shim: " << plain.err);
    REQUIRE(plain.exit_code == 0);
    const Result traced = run_program({"fork", "16", "6"}, true, env, dir);
    INFO("with the shim: " << traced.err);
    REQUIRE(traced.exit_code == 0);  // road_faults fails if a child hangs (10 s) or fails
    CHECK(traced.results == plain.results);
    CHECK(traced.tally.at("forks") == 16);
    CHECK(traced.children == plain.children);  // children's host results
    // Every child ran the shim's exit path and wrote its statistics: no CUDA call, no pool.
    CHECK(traced.stats.size() == 17);
    for (const auto& [pid, stats] : traced.stats) {
      if (stat_of(stats, "shim.cached_allocs") > 0) continue;  // the parent
      INFO("child " << pid);
      CHECK(stat_of(stats, "calls.cudaMalloc") == 0);
      CHECK(stat_of(stats, "pools.live") == 0);
    }
    // Every trace file left (the parent's; a child that never allocates leaves none) reads
    // cleanly and is complete.
    REQUIRE(!traced.traces.empty());
    for (const auto& t : traced.traces) {
      INFO(t);
      const Summary s = summarise(t);
      INFO(s.err);
      CHECK(s.exit_code == 0);
      CHECK_FALSE(s.incomplete());
      for (const auto& n : s.notes()) FAIL_CHECK("note on the trace: " << n);
    }
    remove_dir(dir);
  }
}

TEST_CASE("a traced program killed at random moments: same results up to the kill, trace readable", "[faults]") {
  const Env env = {"FAKECUDA_FAIL_ALLOC_EVERY=5", "FAKECUDA_FAIL_SYNC_EVERY=4"};
  std::mt19937_64 rng(20261130);
  const int signals[] = {SIGKILL, SIGTERM, SIGINT};
  struct Killed {
    std::vector<std::string> results;
  };
  std::vector<Killed> killed;
  size_t most_rounds = 0;
  int readable = 0, no_header = 0;
  for (int run = 0; run < 15; ++run) {
    const int sig = signals[run % 3];
    // Log-uniform from 2 ms (start-up, before the first event) to 400 ms (well into the run).
    const auto delay_us = static_cast<long>(std::exp(std::log(2000.0) + (rng() % 1000) / 1000.0 * std::log(200.0)));
    INFO("run " << run << ": signal " << sig << " after " << delay_us << " us");
    const std::string dir = temp_dir();
    const pid_t pid = spawn({road_faults(), "work", "0", "4"}, true, env, dir);
    std::this_thread::sleep_for(std::chrono::microseconds(delay_us));
    REQUIRE(kill(pid, sig) == 0);
    const Result r = collect(pid, dir);
    INFO(r.err);
    CHECK(r.exit_code == 128 + sig);  // the shim does not swallow the signal
    for (const auto& line : r.results) CHECK(line.rfind("round ", 0) == 0);
    most_rounds = std::max(most_rounds, r.results.size());
    killed.push_back({r.results});
    REQUIRE(r.traces.size() <= 1);
    if (!r.traces.empty()) {
      const Summary s = summarise(r.traces[0]);
      if (s.exit_code == 0) {
        CHECK(s.incomplete());  // no trailer: the program never reached its end
        ++readable;
      } else {
        // Only when not even the header line reached the disk; a clear message, exit 2.
        INFO(s.err);
        CHECK(s.exit_code == 2);
        CHECK(slurp(r.traces[0]).find('\n') == std::string::npos);
        CHECK(s.err.rfind("vramtrace summary: ", 0) == 0);
        ++no_header;
      }
    }
    remove_dir(dir);
  }
  INFO(readable << " traces read as incomplete, " << no_header << " cut before the header");
  CHECK(readable >= 5);
  // The reference: the same program and faults without the shim, as many rounds as the longest
  // killed run printed. Every killed run printed a prefix of its lines.
  REQUIRE(most_rounds >= 1);
  const std::string dir = temp_dir();
  const Result plain = run_program({"work", std::to_string(most_rounds), "4"}, false, env, dir);
  REQUIRE(plain.exit_code == 0);
  REQUIRE(plain.results.size() == most_rounds + 1);
  for (const auto& k : killed) {
    for (size_t i = 0; i < k.results.size(); ++i) CHECK(k.results[i] == plain.results[i]);
  }
  remove_dir(dir);
}
