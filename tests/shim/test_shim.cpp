// Runs the road programs with and without libvramtrace.so preloaded (fake libcuda/libcudart on
// LD_LIBRARY_PATH) and checks what each program saw (it exits non-zero on a wrong result) and
// what the shim recorded (its VRAMTRACE_TEST_STATS_FILE), plus the library's exports and NEEDED.
#include <dirent.h>
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "base/cuda_api.h"
#include "spawn_util.h"

extern char** environ;

namespace {

namespace test = vramtrace::test;
using Stats = std::map<std::string, long long>;

struct Run {
  int exit_code = -1;
  std::string out, err;
  std::map<long, Stats> stats_by_pid;  // one stats file per process
  Stats program;                       // "program.X N" lines of stdout
  const Stats& stats() const {
    static const Stats empty;
    return stats_by_pid.size() == 1 ? stats_by_pid.begin()->second : empty;
  }
};

using test::slurp;

Stats parse_kv(const std::string& text, const std::string& prefix = "") {
  Stats s;
  std::istringstream in(text);
  std::string k;
  long long v;
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream ls(line);
    if (ls >> k >> v && k.rfind(prefix, 0) == 0) s[k.substr(prefix.size())] = v;
  }
  return s;
}

long long get(const Stats& s, const std::string& k) {
  auto it = s.find(k);
  return it == s.end() ? -1 : it->second;
}

/// Runs argv with the fake driver on LD_LIBRARY_PATH (or `libpath`), the shim preloaded if
/// `preload`.
Run run(std::vector<std::string> argv, bool preload, std::vector<std::string> extra_env = {},
        std::string libpath = VT_FAKELIB_DIR) {
  test::TempDir dir;
  std::vector<std::string> env = {"VRAMTRACE_TEST_STATS_FILE=" + dir.file("stats.%p")};
  if (preload) env.push_back(std::string("LD_PRELOAD=") + VT_SHIM_PATH);
  env.insert(env.end(), extra_env.begin(), extra_env.end());
  Run r;
  r.exit_code = test::wait_exit_code(
      test::spawn_captured(argv, test::clean_environment(env, libpath), dir.file("out"), dir.file("err")));
  r.out = slurp(dir.file("out"));
  r.err = slurp(dir.file("err"));
  r.program = parse_kv(r.out, "program.");
  for (const auto& e : std::filesystem::directory_iterator(dir.path)) {
    const std::string n = e.path().filename().string();
    if (n.rfind("stats.", 0) == 0) r.stats_by_pid[std::atol(n.c_str() + 6)] = parse_kv(slurp(e.path().string()));
  }
  if (r.exit_code != 0) UNSCOPED_INFO("stdout:\n" << r.out << "\nstderr:\n" << r.err);
  return r;
}

std::string road(const char* name) { return std::string(VT_ROAD_DIR) + "/" + name; }

std::string capture_cmd(const std::string& cmd) {
  std::string out;
  FILE* p = popen(cmd.c_str(), "r");
  REQUIRE(p != nullptr);
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  pclose(p);
  return out;
}

void no_call_after_exit(const Run& r) { CHECK(r.err.find("FAKECUDA: call after exit began") == std::string::npos); }

}  // namespace

TEST_CASE("exports are exactly the hooks of hooks.def, dlsym and the C API, all unversioned") {
  std::set<std::string> expected = {"dlsym", "vramtrace_mark", "vramtrace_flush", "vramtrace_forward_allocations",
                                    "vramtrace_version"};
#define VT_HOOK(level, policy, name, ret, params, args) expected.insert(#name);
#include "base/hooks.def"
#undef VT_HOOK
  std::string nm = capture_cmd(std::string("nm -D --defined-only ") + VT_SHIM_PATH);
  std::set<std::string> got;
  std::istringstream in(nm);
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream ls(line);
    std::string addr, type, name;
    if (!(ls >> addr >> type >> name)) continue;
    CHECK(name.find('@') == std::string::npos);  // a version node would stop interposition
    got.insert(name);
  }
  CHECK(got == expected);
}

TEST_CASE("NEEDED entries are glibc only") {
  std::string d = capture_cmd(std::string("readelf -d ") + VT_SHIM_PATH);
  const std::set<std::string> allowed = {"libc.so.6", "libdl.so.2",           "libpthread.so.0",
                                         "libm.so.6", "ld-linux-x86-64.so.2", "ld-linux-aarch64.so.1"};
  std::istringstream in(d);
  std::string line;
  int needed = 0;
  while (std::getline(in, line)) {
    auto p = line.find("(NEEDED)");
    if (p == std::string::npos) continue;
    auto a = line.find('['), b = line.find(']');
    REQUIRE(a != std::string::npos);
    std::string lib = line.substr(a + 1, b - a - 1);
    INFO(lib);
    CHECK(allowed.count(lib) == 1);
    ++needed;
  }
  CHECK(needed >= 1);
}

TEST_CASE("preloading into a process without CUDA changes nothing") {
  Run r = run({"/bin/sh", "-c", "echo hi"}, true);
  CHECK(r.exit_code == 0);
  CHECK(r.out == "hi\n");
  CHECK(r.err.empty());
}

static void check_runtime_road(const char* program, bool shared_cudart) {
  // With a stream created first, so that the default policy's lazy synchronisation is exercised
  // (Note [single stream needs no sync]; the single-stream case has its own test).
  Run plain = run({road(program)}, false, {"ROAD_EARLY_STREAM=1"});
  REQUIRE(plain.exit_code == 0);  // the fake is faithful: the program passes without the shim
  Run r = run({road(program)}, true, {"ROAD_EARLY_STREAM=1"});
  REQUIRE(r.exit_code == 0);
  CHECK(r.program == plain.program);
  const Stats& s = r.stats();
  REQUIRE(!s.empty());
  const long long mallocs = get(r.program, "cudaMalloc");
  if (shared_cudart) {
    // Counted once, at the runtime level where the calls entered (Note [count once]).
    CHECK(get(s, "calls.cudaMalloc") == mallocs);
    CHECK(get(s, "calls.cudaFree") == get(r.program, "cudaFree"));
    CHECK(get(s, "calls.cudaMallocAsync") == get(r.program, "cudaMallocAsync"));
    CHECK(get(s, "calls.cudaMallocAsync_ptsz") == get(r.program, "cudaMallocAsync_ptsz"));
    CHECK(get(s, "calls.cudaFreeAsync_ptsz") == get(r.program, "cudaFreeAsync_ptsz"));
    CHECK(get(s, "calls.cudaMallocManaged") == 1);
    CHECK(get(s, "calls.cudaDeviceReset") == 1);
    CHECK(get(s, "calls.cuMemAlloc_v2") == get(r.program, "driver.cuMemAlloc_v2"));  // only the direct one
    CHECK(get(s, "calls.cudaGetDriverEntryPointByVersion") == 1);
    CHECK(get(s, "entry.cudaMalloc") > 0);  // allocator events carry the runtime entry point
    CHECK(get(s, "entry.cuMemAlloc_v2") == get(r.program, "driver.cuMemAlloc_v2"));
    // Note [runtime fast path]: cache hits and misses alike skip cudart when a context is current.
    CHECK(get(s, "shim.runtime_fast_allocs") > 0);
    CHECK(get(s, "shim.runtime_fast_frees") > 0);
  } else {
    // Static cudart: invisible at runtime level, caught at the driver level through the
    // resolver it got from our dlsym and the self-lookup (the H200 finding).
    CHECK(get(s, "calls.cudaMalloc") == 0);
    // cudaMalloc(0) never reaches the driver; one cuMemAlloc_v2 is the program's own
    CHECK(get(s, "calls.cuMemAlloc_v2") == mallocs - 1 + get(r.program, "driver.cuMemAlloc_v2"));
    CHECK(get(s, "calls.cuMemFree_v2") == get(r.program, "cudaFree"));
    CHECK(get(s, "calls.cuMemAllocAsync_ptsz") == get(r.program, "cudaMallocAsync_ptsz"));
    CHECK(get(s, "entry.cuMemAlloc_v2") > 0);
    CHECK(get(s, "shim.runtime_fast_allocs") == 0);
  }
  // Work on the early stream switched to the multi-stream rule; the lazy synchronisation of the
  // first reuse found no more work there and returned to the single-stream rule (Note [return to
  // one stream]); the per-thread streams later switched again. Stream-ordered allocations after
  // the switch do not synchronise (which would return to one stream and switch again).
  CHECK(get(s, "shim.other_streams_seen") == 2);
  CHECK(get(s, "shim.returns_to_one_stream") >= 1);
  // the work on the legacy stream (by the runtime's own handle) and on the early stream, seen at the driver level
  CHECK(get(s, "calls.cuMemsetD8Async") == get(r.program, "cudaMemsetAsync"));
  CHECK(get(s, "calls.cuGetProcAddress_v2") > 0);
  CHECK(get(s, "shim.resolver_substitutions") > 0);
  CHECK(get(s, "shim.resolver_unmapped") == 0);
  CHECK(get(s, "shim.cached_allocs") > 0);
  CHECK(get(s, "shim.double_frees") == 1);
  CHECK(get(s, "shim.unknown_frees") == 1);
  CHECK(get(s, "shim.passthrough_allocs") == 3);  // managed, pitched, pinned host
  CHECK(get(s, "shim.passthrough_frees") == 3);
  CHECK(get(s, "shim.cross_stream_frees") == 1);
  CHECK(get(s, "shim.lazy_syncs") >= 1);
  CHECK(get(s, "shim.pools_dropped") == 1);  // cudaDeviceReset
  CHECK(get(s, "pools.live") == 1);
  CHECK(get(s, "allocator.allocated_bytes.all.current") == 2 << 20);  // the quarantined IPC block
  CHECK(get(s, "allocator.segment.all.current") >= 1);                // the cache is kept, not freed at exit
  CHECK(get(s, "events.segment_alloc") >= 1);
  no_call_after_exit(r);
}

TEST_CASE("shared cudart: runtime-level hooks, caching, semantics") { check_runtime_road("road_runtime_shared", true); }
TEST_CASE("static cudart: caught at the driver level only") { check_runtime_road("road_runtime_static", false); }

TEST_CASE("expandable segments through the CUDA driver backend (virtual memory calls)") {
  Run r = run({road("road_runtime_shared")}, true, {"VRAMTRACE_CONF=expandable_segments:True"});
  REQUIRE(r.exit_code == 0);
  const Stats& s = r.stats();
  CHECK(get(s, "events.segment_map") > 0);
  CHECK(get(s, "events.segment_alloc") == 3);  // only the forwarded managed, pitched, host memory
  CHECK(get(s, "shim.cached_allocs") > 0);
  no_call_after_exit(r);
}

TEST_CASE("lazy_sync: no synchronisation while the program has used only the legacy stream") {
  // The program checks that its first reuse did not synchronise (ROAD_EXPECT=lazy, no early
  // stream); it creates streams later, after which the policy remembers frees again.
  for (const char* program : {"road_runtime_shared", "road_runtime_static"}) {
    INFO(program);
    Run r = run({road(program)}, true, {"ROAD_EXPECT=lazy"});
    REQUIRE(r.exit_code == 0);
    CHECK(get(r.stats(), "shim.other_streams_seen") == 1);
    CHECK(get(r.stats(), "shim.cached_allocs") > 0);
  }
  // A stream that is created but given no work changes nothing (PyTorch creates its pool streams
  // at start-up): the first reuse still needs no synchronisation (Note [work on another stream]).
  for (const char* program : {"road_runtime_shared", "road_runtime_static"}) {
    INFO(program);
    Run r = run({road(program)}, true, {"ROAD_EXPECT=lazy", "ROAD_EARLY_STREAM=idle"});
    REQUIRE(r.exit_code == 0);
    CHECK(get(r.stats(), "shim.other_streams_seen") == 1);  // the per-thread streams later on
    CHECK(get(r.stats(), "calls.cuMemsetD8Async") == 1);    // on the legacy stream, by the runtime's handle
  }
  // reuse:device_sync keeps the synchronisation from the start.
  Run d = run({road("road_runtime_shared")}, true, {"VRAMTRACE_CONF=reuse:device_sync", "ROAD_EXPECT=device"});
  REQUIRE(d.exit_code == 0);
  CHECK(get(d.stats(), "shim.lazy_syncs") >= 1);
}

TEST_CASE("lazy_sync: at the switch to another stream, its work waits on the GPU for the legacy stream") {
  // Blocks reused before the switch were safe only in the legacy stream's order; while the
  // event recorded there at the switch is pending, work on any other stream waits for it on the
  // GPU (cuStreamWaitEvent), never on the host (Note [work on another stream]).
  Run pending = run({road("road_runtime_shared")}, true, {"ROAD_EXPECT=lazy", "FAKECUDA_EVENTS_PENDING=100000"});
  REQUIRE(pending.exit_code == 0);
  const Stats& s = pending.stats();
  CHECK(get(s, "shim.other_streams_seen") == 1);
  CHECK(get(s, "shim.other_stream_waits") >= 1);
  CHECK(get(s, "shim.other_stream_waits") == get(pending.program, "fake.cuStreamWaitEvent"));
  CHECK(get(s, "shim.unguarded_switches") == 0);
  // Once the event has completed, nothing more is waited for.
  Run done = run({road("road_runtime_shared")}, true, {"ROAD_EXPECT=lazy"});
  REQUIRE(done.exit_code == 0);
  CHECK(get(done.stats(), "shim.other_streams_seen") == 1);
  CHECK(get(done.stats(), "shim.other_stream_waits") == 0);
  // Other policies never reused without a synchronisation or make no promise: no events.
  Run device = run({road("road_runtime_shared")}, true,
                   {"VRAMTRACE_CONF=reuse:device_sync", "ROAD_EXPECT=device", "FAKECUDA_EVENTS_PENDING=100000"});
  REQUIRE(device.exit_code == 0);
  CHECK(get(device.stats(), "shim.other_stream_waits") == 0);
}

TEST_CASE("lazy_sync: copies between devices and overlapping launches switch; older capture begins are seen") {
  struct Case {
    const char* name;
    long switches, syncs_at_reuse, captured;
  };
  // A launch on the legacy stream keeps the single-stream rule; a copy between devices (its work
  // runs on the other device's stream as well) and a launch allowed to overlap its predecessor
  // (programmatic dependent launch) switch, so the reuse after them synchronises; an allocation
  // inside a global capture begun by the v1 or ToGraph entry point goes to the driver, which
  // refuses it (road_submit checks the error), and is counted (Note [work on another stream]).
  for (const Case& c : {Case{"plain", 0, 0, 0}, Case{"peer", 1, 1, 0}, Case{"pdl", 1, 1, 0}, Case{"v1", 0, 0, 1},
                        Case{"graph", 0, 0, 1}}) {
    INFO(c.name);
    Run plain = run({road("road_submit")}, false, {std::string("ROAD_CASE=") + c.name});
    REQUIRE(plain.exit_code == 0);
    Run r = run({road("road_submit")}, true, {std::string("ROAD_CASE=") + c.name});
    REQUIRE(r.exit_code == 0);
    CHECK(get(r.stats(), "shim.other_streams_seen") == c.switches);
    CHECK(get(r.program, "syncs_at_reuse") == c.syncs_at_reuse);
    CHECK(get(r.stats(), "calls.cuMemAlloc_v2") == 3 + c.captured);
  }
}

TEST_CASE("reuse policies against the GPU's order: a reused block's next users run after its last reader") {
  // road_barrier frees a buffer that a kernel on a non-blocking stream still reads, allocates the
  // same size at once (the same block) and launches its next user on each kind of stream; the
  // fake driver's order model says whether that launch runs after the reader. No event ever
  // completes (FAKECUDA_EVENTS_PENDING), so every order comes from a wait or a synchronisation.
  const char* orders[] = {"ordered_other_stream", "ordered_legacy",    "ordered_blocking", "ordered_per_thread",
                          "ordered_new_stream",   "ordered_destroyed", "ordered_again"};
  const std::string pending = "FAKECUDA_EVENTS_PENDING=1000000";
  // lazy_sync synchronises the context at each reuse; lazy_barrier orders the users on the GPU
  // instead (Note [GPU-side barrier]): no synchronisation, every order holds.
  for (const char* policy : {"lazy_sync", "lazy_barrier", "device_sync"}) {
    INFO(policy);
    Run r = run({road("road_barrier")}, true, {std::string("VRAMTRACE_CONF=reuse:") + policy, pending});
    REQUIRE(r.exit_code == 0);
    for (const char* o : orders) {
      INFO(o);
      CHECK(get(r.program, o) == 1);
    }
    const bool barrier = std::string(policy) == "lazy_barrier";
    if (barrier)
      CHECK(get(r.program, "syncs_at_reuse") == 0);
    else
      CHECK(get(r.program, "syncs_at_reuse") >= 1);
    CHECK(get(r.stats(), "shim.gpu_barriers") == (barrier ? 7 : 0));  // one per reuse
    CHECK(get(r.stats(), "shim.barrier_fallbacks") == 0);
  }
  // The model catches a policy that reuses without either: stream_ordered hands the block out at
  // once, and its next user on another non-blocking stream is not ordered after the reader.
  Run o = run({road("road_barrier")}, true, {"VRAMTRACE_CONF=reuse:stream_ordered", pending});
  REQUIRE(o.exit_code == 0);
  CHECK(get(o.program, "ordered_other_stream") == 0);
  CHECK(get(o.program, "ordered_new_stream") == 0);
  CHECK(get(o.program, "syncs_at_reuse") == 0);
}

TEST_CASE("reuse policies: stream_ordered never synchronises, none forwards everything") {
  Run o = run({road("road_runtime_shared")}, true, {"VRAMTRACE_CONF=reuse:stream_ordered", "ROAD_EXPECT=ordered"});
  REQUIRE(o.exit_code == 0);
  CHECK(get(o.stats(), "shim.lazy_syncs") == 0);
  CHECK(get(o.stats(), "shim.cached_allocs") > 0);
  Run n = run({road("road_runtime_shared")}, true, {"VRAMTRACE_CONF=reuse:none", "ROAD_EXPECT=none"});
  REQUIRE(n.exit_code == 0);
  CHECK(get(n.stats(), "shim.cached_allocs") == 0);
  CHECK(get(n.stats(), "shim.lazy_syncs") == 0);
  // every successful cudaMalloc was forwarded and traced: all but cudaMalloc(0) and the captured one
  CHECK(get(n.stats(), "shim.passthrough_allocs") ==
        get(n.program, "cudaMalloc") - 2 + get(n.program, "driver.cuMemAlloc_v2") + 3 + 4);
  CHECK(get(n.stats(), "calls.cudaMalloc") == get(n.program, "cudaMalloc"));
}

TEST_CASE("out of memory: the cache is released before the program sees an OOM") {
  Run plain = run({road("road_oom")}, false, {"FAKECUDA_TOTAL_MB=48"});
  REQUIRE(plain.exit_code == 0);
  Run r = run({road("road_oom")}, true, {"FAKECUDA_TOTAL_MB=48"});
  REQUIRE(r.exit_code == 0);
  const Stats& s = r.stats();
  CHECK(get(s, "calls.cudaMalloc") == get(r.program, "cudaMalloc"));
  CHECK(get(s, "allocator.num_alloc_retries") >= 1);  // the cached 30 MiB released for 40 MiB
  CHECK(get(s, "allocator.num_ooms") == 3);           // 10 MiB, 64 MiB, and the 20 MiB segment
  CHECK(get(s, "events.oom") == 3);
  CHECK(get(s, "shim.oom_fallbacks") == 1);  // 6 MiB forwarded exactly
  CHECK(get(s, "shim.passthrough_allocs") == 1);
}

TEST_CASE("a bad VRAMTRACE_CONF prints one line and passes everything through") {
  Run r = run({road("road_runtime_shared")}, true, {"VRAMTRACE_CONF=no_such_key:1", "ROAD_EXPECT=off"});
  REQUIRE(r.exit_code == 0);
  CHECK(r.err.find("vramtrace: VRAMTRACE_CONF:") == 0);
  CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
  CHECK(get(r.stats(), "shim.cached_allocs") == 0);
  CHECK(get(r.stats(), "shim.resolver_substitutions") == 0);
  CHECK(get(r.stats(), "calls.cudaMalloc") == get(r.program, "cudaMalloc"));
}

TEST_CASE("driver API linked directly: per-context pools, context destruction, NULL meminfo pointers") {
  Run plain = run({road("road_driver")}, false);
  REQUIRE(plain.exit_code == 0);
  Run r = run({road("road_driver")}, true);
  REQUIRE(r.exit_code == 0);
  const Stats& s = r.stats();
  CHECK(get(s, "calls.cuMemAlloc_v2") == get(r.program, "cuMemAlloc_v2"));
  CHECK(get(s, "calls.cuMemFree_v2") == get(r.program, "cuMemFree_v2"));
  CHECK(get(s, "calls.cuCtxSynchronize") == get(r.program, "cuCtxSynchronize"));
  CHECK(get(s, "shim.program_syncs") == 1);
  // The program's own sync ended the first context's epoch (no lazy sync there); the second
  // context switched the process to the multi-stream rule (two legacy streams are not one:
  // Note [work on another stream]); its own new pool held nothing to reuse, so its first
  // allocation did not synchronise. The reuse of a stream-ordered block given back with a plain
  // free (road_driver checks it at the call) is the one lazy synchronisation.
  CHECK(get(s, "shim.lazy_syncs") == 1);
  CHECK(get(s, "shim.other_streams_seen") == 1);
  CHECK(get(s, "shim.pools_created") == 2);
  CHECK(get(s, "shim.pools_dropped") == 2);
  CHECK(get(s, "pools.live") == 0);
  CHECK(get(s, "shim.unknown_frees") == 1);  // b after its context died
  CHECK(get(s, "events.mark") == get(r.program, "vramtrace_mark"));
  // the fake driver's cuInit looks up cuMemGetInfo_v2 through its own handle: our wrapper, once,
  // without recursion (HAMi-core PR #326)
  CHECK(get(s, "calls.cuMemGetInfo_v2") == get(r.program, "cuMemGetInfo_v2") + 1);
  no_call_after_exit(r);
}

TEST_CASE("dlopen + dlsym and cuGetProcAddress: exact ABI variants, self-lookup, probes") {
  Run plain = run({road("road_dlsym")}, false);
  REQUIRE(plain.exit_code == 0);
  Run r = run({road("road_dlsym")}, true);
  REQUIRE(r.exit_code == 0);
  const Stats& s = r.stats();
  CHECK(get(s, "calls.cuMemAlloc_v2") == get(r.program, "dlsym.cuMemAlloc_v2"));
  CHECK(get(s, "calls.cuMemFree_v2") == get(r.program, "dlsym.cuMemFree_v2"));
  CHECK(get(s, "calls.cuGetProcAddress_v2") == get(r.program, "gpa.cuGetProcAddress_v2"));
  CHECK(get(s, "calls.cuGetProcAddress") == get(r.program, "gpa.cuGetProcAddress"));
  CHECK(get(s, "shim.cached_allocs") == 4);
  CHECK(get(s, "shim.resolver_unmapped") == 0);  // the 32-bit cuMemAlloc is exported, just not hooked
}

TEST_CASE("dlsym forwarding keeps the caller (RTLD_NEXT chain, RTLD_DEFAULT from a local scope)") {
  Run plain = run({road("road_chain"), VT_CHAIN_C_PATH}, false);
  REQUIRE(plain.exit_code == 0);
  Run r = run({road("road_chain"), VT_CHAIN_C_PATH}, true);
  CHECK(r.exit_code == 0);
  CHECK(r.out == "chain ok\n");
}

TEST_CASE("many threads: per-thread default streams, counts, data intact") {
  Run r = run({road("road_threads")}, true);
  REQUIRE(r.exit_code == 0);
  const Stats& s = r.stats();
  CHECK(get(s, "calls.cudaMalloc") == get(r.program, "cudaMalloc"));
  CHECK(get(s, "calls.cudaFree") == get(r.program, "cudaFree"));
  CHECK(get(s, "calls.cudaMallocAsync_ptsz") == get(r.program, "cudaMallocAsync_ptsz"));
  CHECK(get(s, "shim.cached_allocs") == get(r.program, "cudaMalloc") + get(r.program, "cudaMallocAsync_ptsz"));
  CHECK(get(s, "shim.cross_stream_frees") == 0);  // each thread frees on its own per-thread stream
  CHECK(get(s, "allocator.allocation.all.current") == 0);
  no_call_after_exit(r);
}

TEST_CASE("fork: the child starts clean and makes no CUDA call") {
  Run r = run({road("road_fork_exec"), "fork"}, true);
  REQUIRE(r.exit_code == 0);
  REQUIRE(r.stats_by_pid.size() == 2);
  long child = 0, parent = 0;
  std::sscanf(r.out.substr(r.out.find("child ")).c_str(), "child %ld", &child);
  std::sscanf(r.out.substr(r.out.find("parent ")).c_str(), "parent %ld", &parent);
  REQUIRE(r.stats_by_pid.count(child) == 1);
  REQUIRE(r.stats_by_pid.count(parent) == 1);
  const Stats& c = r.stats_by_pid[child];
  CHECK(get(c, "calls.cudaMalloc") == 0);
  CHECK(get(c, "pools.live") == 0);
  CHECK(get(c, "shim.cached_allocs") == 0);
  const Stats& p = r.stats_by_pid[parent];
  CHECK(get(p, "calls.cudaMalloc") == 2);
  CHECK(get(p, "pools.live") == 1);
  CHECK(get(p, "shim.cached_allocs") == 2);
  no_call_after_exit(r);
}

TEST_CASE("exec: the new program is intercepted too") {
  Run r = run({road("road_fork_exec"), "exec", road("road_runtime_shared")}, true);
  REQUIRE(r.exit_code == 0);
  const Stats& s = r.stats();
  REQUIRE(!s.empty());
  CHECK(get(s, "calls.cudaMalloc") == get(r.program, "cudaMalloc"));  // the exec'd program's tally
  CHECK(get(s, "shim.cached_allocs") > 0);
}

TEST_CASE("NVIDIA's real cudart 13 resolves the driver only through our wrappers") {
  if (std::string(VT_REAL_CUDART_DIR).empty()) {
    WARN("no cudart in the CUDA toolkit: skipped");
    return;
  }
  // Only the fake libcuda.so.1 on the path (not the fake cudart), then the toolkit's cudart.
  char tmpl[] = "/tmp/vt-realcudart-XXXXXX";
  std::string dir = mkdtemp(tmpl);
  std::string link = dir + "/libcuda.so.1";
  REQUIRE(symlink((std::string(VT_FAKELIB_DIR) + "/libcuda.so.1").c_str(), link.c_str()) == 0);
  for (const char* kind : {"road_real_cudart_static", "road_real_cudart_shared"}) {
    INFO(kind);
    Run r = run({road(kind)}, true, {}, dir + ":" + VT_REAL_CUDART_DIR);
    REQUIRE(r.exit_code == 0);
    const Stats& s = r.stats();
    CHECK(get(s, "calls.cuGetProcAddress_v2") >= 300);   // 440 with cudart 13.0
    CHECK(get(s, "shim.resolver_substitutions") >= 20);  // every memory entry point is ours
    CHECK(get(s, "shim.resolver_unmapped") == 0);
    CHECK(get(r.program, "error") != 0);  // the fake has no export tables
    if (std::string(kind).find("shared") != std::string::npos) CHECK(get(s, "calls.cudaMalloc") == 1);
  }
  unlink(link.c_str());
  rmdir(dir.c_str());
}

// ------------------------------------------------- memory cap (docs/configuration.md, "Memory cap")

namespace {
constexpr long long kMiB = 1 << 20;

/// road_caps under the shim with `conf` (empty: no VRAMTRACE_CONF), fake devices of `total_mb`.
Run caps_run(const std::string& conf, long long total_mb = 1024) {
  std::vector<std::string> env = {"FAKECUDA_TOTAL_MB=" + std::to_string(total_mb), "FAKECUDA_DEVICES=2"};
  if (!conf.empty()) env.push_back("VRAMTRACE_CONF=" + conf);
  Run r = run({road("road_caps")}, true, env);
  REQUIRE(r.exit_code == 0);
  return r;
}

/// Every figure of CUDA device `d` (runtime, both driver ABIs, total, both property calls, and
/// NVML through the reversed index of the fake) against the expected (free, total). `nvml_total`
/// and `nvml_free` are checked on the NVML device of ordinal d.
void check_device(const Run& r, int d, long long total, long long free_b, long long nvml_total, long long nvml_free) {
  INFO("device " << d);
  const auto& p = r.program;
  auto g = [&](const std::string& k) { return get(p, std::to_string(d) + "." + k); };
  CHECK(g("rt.total") == total);
  CHECK(g("rt.free") == free_b);
  CHECK(g("cu.total") == total);
  CHECK(g("cu.free") == free_b);
  CHECK(g("cu32.total") == total);
  CHECK(g("cu32.free") == free_b);
  CHECK(g("totalmem") == total);
  CHECK(g("props") == total);
  CHECK(g("props_v2") == total);
  CHECK(g("rt.free") <= g("rt.total"));
  // NULL output pointers: the shim answers (the fake driver alone refuses them).
  CHECK(g("null.rt.rc") == 0);
  CHECK(g("null.rt.total") == total);
  CHECK(g("null.cu.rc") == 0);
  CHECK(g("null.cu.free") == free_b);
  CHECK(g("null.totalmem.rc") == CUDA_ERROR_INVALID_VALUE);  // the real answer is kept
  CHECK(g("null.props.rc") == cudaErrorInvalidValue);
  const std::string n = "nvml" + std::to_string(1 - d);  // the fake NVML numbers devices in reverse
  CHECK(get(p, n + ".total") == nvml_total);
  CHECK(get(p, n + ".free") == nvml_free);
  CHECK(get(p, n + ".used") == nvml_total - nvml_free);
  CHECK(get(p, n + ".v2.total") == nvml_total);
  CHECK(get(p, n + ".v2.free") == nvml_free);
  CHECK(get(p, n + ".v2.reserved") + get(p, n + ".v2.used") == nvml_total - nvml_free);
  CHECK(get(p, n + ".v2.reserved") == std::min<long long>(8 * kMiB, nvml_total - nvml_free));
  CHECK(get(p, n + ".null.rc") == 2);  // NVML_ERROR_INVALID_ARGUMENT, passed through
}

std::string vramtrace_cmd() {
  std::string v = VT_VRAMTRACE_PATH;
  if (v.empty()) WARN("vramtrace (the reporter) is not built: skipped");
  return v;
}
}  // namespace

// Each device holds a live 30 MiB block and a freed 6 MiB block cached in a 20 MiB segment: the
// fake driver has 50 MiB used on it, the program uses 30 MiB. The fake NVML adds 8 MiB reserved.
TEST_CASE("memory cap: without a cap every figure is the device's (idle cache counted as free)") {
  Run plain = run({road("road_caps")}, false, {"FAKECUDA_TOTAL_MB=1024", "FAKECUDA_DEVICES=2"});
  REQUIRE(plain.exit_code == 0);
  CHECK(get(plain.program, "0.rt.total") == 1024 * kMiB);
  CHECK(get(plain.program, "0.null.rt.rc") == CUDA_ERROR_INVALID_VALUE);  // the fake alone refuses NULL
  Run r = caps_run("");
  CHECK(get(r.program, "nvml.hooked") == 1);
  for (int d = 0; d < 2; ++d)  // free = 1024 - 50 + 20 idle; NVML untouched: 1024 - 8 - 50
    check_device(r, d, 1024 * kMiB, (1024 - 30) * kMiB, 1024 * kMiB, (1024 - 8 - 50) * kMiB);
  CHECK(get(r.stats(), "calls.nvmlDeviceGetMemoryInfo") == 4);  // two devices, plus the NULL calls
  CHECK(get(r.stats(), "calls.cudaGetDeviceProperties") == 4);
  CHECK(get(r.stats(), "calls.cuDeviceTotalMem_v2") >= 2);
}

TEST_CASE("memory cap: limit:SIZE caps every query of every device, free <= total <= physical") {
  Run r = caps_run("limit:256MiB");
  for (int d = 0; d < 2; ++d)  // free = 256 - 30 in use; NVML the same (its 8 MiB reserved inside the 30)
    check_device(r, d, 256 * kMiB, (256 - 30) * kMiB, 256 * kMiB, (256 - 30) * kMiB);
}

TEST_CASE("memory cap: a cap above the physical memory reports the physical total") {
  Run r = caps_run("limit:4GiB");
  // NVML's free leaves out its 8 MiB reserved: 1024 - 8 - 50 + 20 idle
  for (int d = 0; d < 2; ++d) check_device(r, d, 1024 * kMiB, (1024 - 30) * kMiB, 1024 * kMiB, (1024 - 8 - 30) * kMiB);
}

TEST_CASE("memory cap: per-device caps, unlisted devices uncapped or capped by *") {
  Run both = caps_run("limit:[0:256MiB,1:512MiB]");
  check_device(both, 0, 256 * kMiB, (256 - 30) * kMiB, 256 * kMiB, (256 - 30) * kMiB);
  check_device(both, 1, 512 * kMiB, (512 - 30) * kMiB, 512 * kMiB, (512 - 30) * kMiB);
  Run one = caps_run("limit:[1:512MiB]");
  check_device(one, 0, 1024 * kMiB, (1024 - 30) * kMiB, 1024 * kMiB, (1024 - 8 - 50) * kMiB);  // untouched
  check_device(one, 1, 512 * kMiB, (512 - 30) * kMiB, 512 * kMiB, (512 - 30) * kMiB);
  Run star = caps_run("max_split_size_mb:64, limit:[1:512MiB,*:128MiB]");
  check_device(star, 0, 128 * kMiB, (128 - 30) * kMiB, 128 * kMiB, (128 - 30) * kMiB);
  check_device(star, 1, 512 * kMiB, (512 - 30) * kMiB, 512 * kMiB, (512 - 30) * kMiB);
}

TEST_CASE(
    "memory cap: contexts of one device share its cap, a destroyed context gives its memory back, threads never pass "
    "it") {
  Run plain = run({road("road_cap_contexts")}, false, {"FAKECUDA_TOTAL_MB=1024"});
  REQUIRE(plain.exit_code == 0);
  CHECK(get(plain.program, "a") == 51);  // 1024 / 20 without a cap
  Run r = run({road("road_cap_contexts")}, true, {"FAKECUDA_TOTAL_MB=1024", "VRAMTRACE_CONF=limit:100MiB"});
  REQUIRE(r.exit_code == 0);
  CHECK(get(r.program, "a") == 5);  // 5 x 20 MiB = the cap
  CHECK(get(r.program, "b") == 0);  // the other context of the same device gets nothing
  CHECK(get(r.program, "b.total") == 100 * kMiB);
  CHECK(get(r.program, "b.free") == 0);
  CHECK(get(r.program, "b.after_destroy") == 5);
  // 100 MiB in b's cache as five idle 20 MiB segments: 12 MiB requests take one each (a 12 MiB
  // block does not split off a 20 MiB segment's rest for another 12 MiB), then nothing fits.
  CHECK(get(r.program, "threads") == 5);
  CHECK(get(r.stats(), "allocator.reserved_bytes.all.peak") <= 100 * kMiB);
}

// Note [the cap counts the driver's share]: the fake driver's contexts take 40 MiB each.
TEST_CASE("memory cap: the CUDA context's memory comes out of the cap, as on a card of that size") {
  Run plain = run({road("road_cap_contexts")}, false, {"FAKECUDA_TOTAL_MB=1024", "FAKECUDA_CONTEXT_MB=40"});
  REQUIRE(plain.exit_code == 0);
  CHECK(get(plain.program, "a") == 49);  // (1024 - 40) / 20 without a cap
  Run r = run({road("road_cap_contexts")}, true,
              {"FAKECUDA_TOTAL_MB=1024", "FAKECUDA_CONTEXT_MB=40", "VRAMTRACE_CONF=limit:100MiB"});
  REQUIRE(r.exit_code == 0);
  CHECK(get(r.program, "a") == 3);  // 100 - 40 of the context = three 20 MiB segments
  CHECK(get(r.program, "b") == 0);  // a second context takes 40 MiB more: 140 > 100
  CHECK(get(r.program, "b.total") == 100 * kMiB);
  CHECK(get(r.program, "b.free") == 0);
  // The first context destroyed gives back its segments and its own 40 MiB: b's 40 remain.
  CHECK(get(r.program, "b.after_destroy") == 3);
  CHECK(get(r.stats(), "allocator.reserved_bytes.all.peak") <= 60 * kMiB);
}

TEST_CASE("memory cap: a bad limit is refused like any bad setting") {
  // conf, and what the message must say
  const std::pair<const char*, const char*> cases[] = {
      {"limit:[0:1GiB", "missing ']'"},
      {"limit:[x:1GiB]", "not a CUDA ordinal"},
      {"limit:[0:1GiB,0:2GiB]", "device 0 is listed twice"},
      {"limit:[0:64MiB,*:1GiB,*:2GiB]", "* is listed twice"},
      {"limit:[0:1GiB,]", "a stray ','"},
      {"limit:[,0:1GiB]", "a stray ','"},
      {"limit:1GiB]", "unbalanced"},
      {"limit:[0:1GiB]]", "unbalanced"},
      {"limit:[0:1GiB *:2GiB]", "a ',' missing between list items?"},
      {"limit:[]", "empty list"},
      {"limit:0", "greater than 0"},
      {"limit:12XB", "limit"},
  };
  for (const auto& [conf, says] : cases) {
    INFO(conf);
    Run r = run({road("road_runtime_shared")}, true, {std::string("VRAMTRACE_CONF=") + conf, "ROAD_EXPECT=off"});
    REQUIRE(r.exit_code == 0);
    INFO(r.err);
    CHECK(r.err.find("vramtrace: VRAMTRACE_CONF: setting 'limit'") == 0);
    CHECK(r.err.find(says) != std::string::npos);
    CHECK(get(r.stats(), "shim.cached_allocs") == 0);
  }
}

namespace {
std::string temp_dir() {
  char tmpl[] = "/tmp/vt-cap-XXXXXX";
  return mkdtemp(tmpl);
}
std::string fmt_retries(long long n) {
  char line[128];
  std::snprintf(line, sizeof line, "  %-38s %12lld", "cudaMalloc retries so far", n);
  return line;
}
std::vector<std::string> lines_of(const std::string& path) {
  std::vector<std::string> out;
  std::istringstream in(slurp(path));
  std::string l;
  while (std::getline(in, l)) out.push_back(l);
  return out;
}
}  // namespace

TEST_CASE("memory cap: OOM under the cap -- retry counted, the real error codes, oom event with snapshot, flushed") {
  std::string dir = temp_dir();
  const std::string trace = dir + "/capped.jsonl";
  Run r = run({road("road_cap_oom")}, true,
              {"VRAMTRACE_CONF=limit:64MiB", "ROAD_CAP=1", "FAKECUDA_TOTAL_MB=1024", "VRAMTRACE_OUTPUT=" + trace});
  REQUIRE(r.exit_code == 0);  // the program checked cudaErrorMemoryAllocation / CUDA_ERROR_OUT_OF_MEMORY
  CHECK(get(r.program, "failed_at") == 3);
  CHECK(get(r.program, "trace_has_oom") == 1);  // written before cudaMalloc returned
  const Stats& s = r.stats();
  // 40 MiB (the cached 30 MiB released), 10 MiB, 100 MiB driver, 100 MiB async: one retry each
  CHECK(get(s, "allocator.num_alloc_retries") == 4);
  CHECK(get(s, "allocator.num_ooms") == 3);
  CHECK(get(s, "events.oom") == 4);          // and the 20 MiB cuMemCreate, refused before the driver
  CHECK(get(s, "shim.oom_fallbacks") == 0);  // no fallback past the cap
  CHECK(get(s, "allocator.reserved_bytes.all.peak") <= 64 * kMiB);
  CHECK(get(s, "allocator.reserved_bytes.all.peak") == 62 * kMiB);
  // The trace: header device total = the cap; each oom line has the full snapshot.
  auto lines = lines_of(trace);
  REQUIRE(lines.size() > 2);
  auto header = nlohmann::json::parse(lines.front());
  CHECK(header["devices"][0]["total_bytes"].get<long long>() == 64 * kMiB);
  CHECK(header["settings"]["limit"] == "[*:67108864]");
  int ooms = 0;
  for (const auto& l : lines) {
    auto j = nlohmann::json::parse(l);
    if (j.value("a", "") != "oom") continue;
    ++ooms;
    if (ooms == 4) {  // the forwarded cuMemCreate: no allocator was asked, so no snapshot
      CHECK(j["r"].get<long long>() == 20 * kMiB);
      CHECK_FALSE(j.contains("snapshot"));
      continue;
    }
    REQUIRE(j.contains("snapshot"));
    long long reserved = 0;
    for (const auto& seg : j["snapshot"]["segments"]) {
      reserved += seg["total_size"].get<long long>();
      long long tiled = 0;
      for (const auto& b : seg["blocks"]) tiled += b["size"].get<long long>();
      CHECK(tiled == seg["total_size"].get<long long>());
    }
    if (ooms == 1) {
      CHECK(j["r"].get<long long>() == 10 * kMiB);
      CHECK(reserved == 60 * kMiB);                   // segments of 20 and 40 MiB
      CHECK(j["free"].get<long long>() == 4 * kMiB);  // capped free: 64 - 60
    }
  }
  CHECK(ooms == 4);
  std::remove(trace.c_str());
  rmdir(dir.c_str());
}

TEST_CASE("memory cap: a forwarded allocation the cap refuses (reuse:none) is an oom event, one OOM each") {
  std::string dir = temp_dir();
  const std::string trace = dir + "/none.jsonl";
  Run r = run(
      {road("road_cap_oom")}, true,
      {"VRAMTRACE_CONF=limit:64MiB,reuse:none", "ROAD_CAP=1", "FAKECUDA_TOTAL_MB=1024", "VRAMTRACE_OUTPUT=" + trace});
  REQUIRE(r.exit_code == 0);  // the same error codes as through the cache
  CHECK(get(r.program, "failed_at") == 3);
  CHECK(get(r.stats(), "shim.cached_allocs") == 0);
  // 10 MiB (cudaMalloc), then 100 MiB through the driver and through cudaMallocAsync: no allocator
  // was asked, and each is in the trace all the same.
  CHECK(get(r.stats(), "events.oom") == 4);
  std::vector<long long> sizes;
  for (const auto& l : lines_of(trace)) {
    auto j = nlohmann::json::parse(l);
    if (j.value("a", "") != "oom") continue;
    sizes.push_back(j["r"].get<long long>());
    CHECK(j["retries"] == 0);
    CHECK_FALSE(j.contains("snapshot"));
    if (sizes.size() == 1) CHECK(j["free"].get<long long>() == 4 * kMiB);  // capped free: 64 - 60
  }
  CHECK(sizes == std::vector<long long>{10 * static_cast<long long>(kMiB), 100 * static_cast<long long>(kMiB),
                                        100 * static_cast<long long>(kMiB), 20 * static_cast<long long>(kMiB)});
  const std::string vt = vramtrace_cmd();
  if (!vt.empty()) {
    const std::string summary = capture_cmd(vt + " summary " + trace + " 2>/dev/null");
    CHECK(summary.find("OOMs 4, cudaMalloc retries 0\n") != std::string::npos);
  }
  std::remove(trace.c_str());
  rmdir(dir.c_str());
}

TEST_CASE("memory cap: forwarded allocations (vramtrace_forward_allocations) are capped and traced, none cached") {
  std::string dir = temp_dir();
  const std::string trace = dir + "/forward.jsonl";
  Run r = run({road("road_cap_oom")}, true,
              {"VRAMTRACE_CONF=limit:64MiB", "ROAD_CAP=1", "ROAD_FORWARD=1", "FAKECUDA_TOTAL_MB=1024",
               "VRAMTRACE_OUTPUT=" + trace});
  REQUIRE(r.exit_code == 0);  // the same error codes as through the cache
  // 30 + 20 MiB, the 30 freed to the driver, 40 MiB fits beside the 20 without any retry, and the
  // 10 MiB request is over the cap (60 + 10 > 64): the same failure as with the shim's cache.
  CHECK(get(r.program, "failed_at") == 3);
  CHECK(get(r.program, "trace_has_oom") == 0);  // no allocator was asked: no snapshot
  const Stats& s = r.stats();
  CHECK(get(s, "shim.cached_allocs") == 0);
  CHECK(get(s, "shim.runtime_fast_allocs") == 0);
  CHECK(get(s, "allocator.num_alloc_retries") <= 0);  // -1: no allocator was ever made
  CHECK(get(s, "events.oom") == 4);                   // 10 MiB, 100 MiB driver, 100 MiB async, 20 MiB cuMemCreate
  // Every forwarded allocation is traced as the program's own segment: 30, 20, 40 MiB, the 2 MiB
  // handle and the 1000 B at the end.
  CHECK(get(s, "events.segment_alloc") == 5);
  // The device is in the header although no allocation went through a pool.
  auto header = nlohmann::json::parse(lines_of(trace).front());
  REQUIRE(header["devices"].size() == 1);
  CHECK(header["devices"][0]["total_bytes"].get<long long>() == 64 * kMiB);
  // At the device level the forwarded memory is the program's own (allocated), not free cache:
  // at the OOM, 60 MiB allocated of 60 MiB reserved.
  const std::string vt = vramtrace_cmd();
  if (!vt.empty()) {
    auto oom = nlohmann::json::parse(capture_cmd(vt + " oom --json --no-replay " + trace + " 2>/dev/null"));
    REQUIRE(oom["ooms"].size() == 4);
    const auto& f = oom["ooms"][0]["figures"];
    CHECK(f["allocated_bytes"].get<long long>() == 60 * kMiB);
    CHECK(f["reserved_bytes"].get<long long>() == 60 * kMiB);
    CHECK(oom["ooms"][0]["diagnosis"] == "capacity");
  }
  std::remove(trace.c_str());
  rmdir(dir.c_str());
}

TEST_CASE(
    "memory cap: `vramtrace oom` calls it capacity, and `replay --capacity` of the same sequence fails at the same "
    "allocation") {
  const std::string vt = vramtrace_cmd();
  if (vt.empty()) return;
  std::string dir = temp_dir();
  const std::string capped = dir + "/capped.jsonl", free_run = dir + "/free.jsonl";
  Run a = run({road("road_cap_oom")}, true,
              {"VRAMTRACE_CONF=limit:64MiB", "ROAD_CAP=1", "FAKECUDA_TOTAL_MB=1024", "VRAMTRACE_OUTPUT=" + capped});
  REQUIRE(a.exit_code == 0);
  Run b = run({road("road_cap_oom")}, true, {"FAKECUDA_TOTAL_MB=1024", "VRAMTRACE_OUTPUT=" + free_run});
  REQUIRE(b.exit_code == 0);
  CHECK(get(b.program, "failed_at") == -1);  // the same sequence, no cap: nothing fails

  // The live OOM: the first oom line, and how many allocations succeeded before it.
  long long live_index = 0;
  for (const auto& l : lines_of(capped)) {
    auto j = nlohmann::json::parse(l);
    if (j.value("a", "") == "oom") break;
    if (j.value("a", "") == "alloc") ++live_index;
  }
  CHECK(live_index == get(a.program, "failed_at"));
  auto oom = nlohmann::json::parse(capture_cmd(vt + " oom --json --no-replay " + capped + " 2>/dev/null"));
  REQUIRE(oom["ooms"].size() >= 1);
  const auto& first = oom["ooms"][0];
  CHECK(first["diagnosis"] == "capacity");
  const auto& f = first["figures"];
  CHECK(f["request_bytes"].get<long long>() == 10 * kMiB);
  CHECK(f["device_total_bytes"].get<long long>() == 64 * kMiB);
  CHECK(f["device_free_bytes"].get<long long>() == 4 * kMiB);
  CHECK(f["reserved_bytes"].get<long long>() == 60 * kMiB);
  CHECK(f["allocated_bytes"].get<long long>() == 60 * kMiB);
  // The shim's allocator released its cache and retried before this first OOM (format 1.1): its
  // count is at least this OOM's own retry and at most the run's final count.
  const long long retries_at_oom = f["allocator_num_alloc_retries"].get<long long>();
  CHECK(retries_at_oom >= 1);
  CHECK(retries_at_oom <= get(a.stats(), "allocator.num_alloc_retries"));
  // The program tried none of its failed allocations again: each of its four failures (10 MiB,
  // then 100 MiB through the driver and through cudaMallocAsync, 20 MiB through cuMemCreate) is
  // one OOM, none a retry (Note [one OOM per failed request]).
  CHECK(f["num_alloc_retries"] == 0);
  CHECK(oom["ooms"].size() == 4);
  CHECK(oom["oom_counts"][0]["ooms"] == 4);
  CHECK(oom["oom_counts"][0]["num_alloc_retries"] == 0);
  std::string text = capture_cmd(vt + " oom --no-replay " + capped + " 2>&1");
  CHECK(text.find("Diagnosis: capacity") != std::string::npos);
  CHECK(text.find(fmt_retries(0)) != std::string::npos);

  // Replay of the uncapped recording on a 64 MiB device: same allocation, same figures.
  auto rep = nlohmann::json::parse(capture_cmd(vt + " replay --json --capacity 64MiB " + free_run + " 2>/dev/null"));
  REQUIRE(rep["results"].size() == 1);
  const auto& fo = rep["results"][0]["first_oom"];
  REQUIRE(!fo.is_null());
  CHECK(fo["alloc_index"].get<long long>() == live_index);
  CHECK(fo["requested_bytes"].get<long long>() == f["request_bytes"].get<long long>());
  CHECK(fo["allocated_bytes"].get<long long>() == f["allocated_bytes"].get<long long>());
  CHECK(fo["reserved_bytes"].get<long long>() == f["reserved_bytes"].get<long long>());
  std::remove(capped.c_str());
  std::remove(free_run.c_str());
  rmdir(dir.c_str());
}

// `vramtrace tune` on a program whose need depends on PYTORCH_CUDA_ALLOC_CONF (road_tune.cpp):
// under a 64 MiB cap its defaults run out of memory, max_split_size_mb:20 fits.
TEST_CASE("tune: each setting runs under the cap, and the table says which really fit") {
  const std::string vt = vramtrace_cmd();
  if (vt.empty()) return;
  const std::string dir = temp_dir();
  const std::vector<std::string> env = {"FAKECUDA_TOTAL_MB=1024", std::string("VRAMTRACE_LIB=") + VT_SHIM_PATH};
  Run r = run({vt, "tune", "--limit", "64MiB", "--candidates", "expandable_segments:True; max_split_size_mb:20", "-o",
               dir + "/t", "--", road("road_tune")},
              false, env);
  CHECK(r.exit_code == 0);  // a setting fits
  CHECK(r.out.find("The program under --limit 64MiB, once per setting") != std::string::npos);
  CHECK(r.out.find("Fits on the real program: max_split_size_mb:20.") != std::string::npos);
  Run j = run({vt, "tune", "--json", "--limit", "64MiB", "--candidates",
               "expandable_segments:True;max_split_size_mb:20", "-o", dir + "/j", "--", road("road_tune")},
              false, env);
  REQUIRE(j.exit_code == 0);
  const auto doc = nlohmann::json::parse(j.out);
  REQUIRE(doc["runs"].size() == 3);
  CHECK(doc["runs"][0]["settings"] == "");  // the program's own first
  CHECK(doc["runs"][0]["result"] == "OOM");
  CHECK(doc["runs"][0]["exit_code"] == 1);
  CHECK(doc["runs"][0]["ooms"] == 1);  // one failed request, however many attempts
  CHECK(doc["runs"][1]["settings"] == "expandable_segments:True");
  CHECK(doc["runs"][1]["result"] == "OOM");
  CHECK(doc["runs"][2]["result"] == "fits");
  CHECK(doc["runs"][2]["conf"] == "max_split_size_mb:20");
  CHECK(doc["runs"][2]["peak_reserved_bytes"] == 30 * kMiB);
  // Nothing fits: exit 1. A setting the allocator refuses: a usage error before any run.
  Run none = run({vt, "tune", "--limit", "64MiB", "--candidates", "expandable_segments:True", "-o", dir + "/n", "--",
                  road("road_tune")},
                 false, env);
  CHECK(none.exit_code == 1);
  CHECK(none.out.find("No setting tried fits") != std::string::npos);
  Run bad =
      run({vt, "tune", "--candidates", "max_split_size_mb:x", "-o", dir + "/b", "--", road("road_tune")}, false, env);
  CHECK(bad.exit_code == 2);
  CHECK(bad.err.find("candidate 'max_split_size_mb:x'") != std::string::npos);
  std::filesystem::remove_all(dir);
}

TEST_CASE("memory cap: `vramtrace run --limit` takes a size or a card name, and refuses an unknown name") {
  const std::string vt = vramtrace_cmd();
  if (vt.empty()) return;
  std::string dir = temp_dir();
  // T4: 14.58 GiB as CUDA reports it, on fake devices of 20000 MiB.
  Run r = run({vt, "run", "--limit", "T4", "-o", dir + "/t4.jsonl", "--", road("road_caps")}, false,
              {"FAKECUDA_TOTAL_MB=20000", "FAKECUDA_DEVICES=2", std::string("VRAMTRACE_LIB=") + VT_SHIM_PATH});
  REQUIRE(r.exit_code == 0);
  const long long t4 = 14930LL * kMiB;  // T4 in allocator/include/vramtrace/gpu_cards.h (total_memory)
  CHECK(get(r.program, "0.rt.total") == t4);
  CHECK(get(r.program, "1.props") == t4);
  CHECK(get(r.program, "nvml0.total") == t4);
  CHECK(r.err.find("--limit T4 = 14.58 GiB") != std::string::npos);
  Run bad = run({vt, "run", "--limit", "T5", "--", "/bin/true"}, false, {std::string("VRAMTRACE_LIB=") + VT_SHIM_PATH});
  CHECK(bad.exit_code == 2);
  CHECK(bad.err.find("known cards: T4, V100-16GB") != std::string::npos);
  Run per = run({vt, "run", "--conf", "limit:[0:1GiB,1:2GiB]", "-o", dir + "/p.jsonl", "--", road("road_caps")}, false,
                {"FAKECUDA_TOTAL_MB=20000", "FAKECUDA_DEVICES=2", std::string("VRAMTRACE_LIB=") + VT_SHIM_PATH});
  REQUIRE(per.exit_code == 0);
  CHECK(get(per.program, "0.rt.total") == 1024 * kMiB);
  CHECK(get(per.program, "1.rt.total") == 2048 * kMiB);
  // Device 1 is reached after the header was written: a device record names it with its cap.
  const std::string per_trace = slurp(dir + "/p.jsonl");
  CHECK(per_trace.find(R"("devices":[{"id":0,)") != std::string::npos);
  CHECK(per_trace.find(R"({"a":"device","id":1,)") != std::string::npos);
  CHECK(per_trace.find(R"("total_bytes":2147483648)") != std::string::npos);
  // The end screen names it too, although the trailer spares it reading the events.
  CHECK(per.err.find("cuda:1 Fake CUDA device 1") != std::string::npos);
  Run badconf = run({vt, "run", "--conf", "limit:[0:1GiB", "--", "/bin/true"}, false,
                    {std::string("VRAMTRACE_LIB=") + VT_SHIM_PATH});
  CHECK(badconf.exit_code == 2);
  CHECK(badconf.err.find("missing ']'") != std::string::npos);
  capture_cmd("rm -rf " + dir);
}

// ----------------------------------------------------------------------- VRAMTRACE_LOG_LEVEL

namespace {
/// How many lines of `text` contain `what`.
long lines_with(const std::string& text, const std::string& what) {
  std::istringstream in(text);
  long n = 0;
  for (std::string line; std::getline(in, line);) n += line.find(what) != std::string::npos;
  return n;
}
}  // namespace

TEST_CASE("log level debug: the road of each first call and every pass-through reason, once each") {
  Run plain = run({road("road_runtime_shared")}, true, {"ROAD_EARLY_STREAM=1"});
  REQUIRE(plain.exit_code == 0);
  Run r = run({road("road_runtime_shared")}, true, {"ROAD_EARLY_STREAM=1", "VRAMTRACE_LOG_LEVEL=debug"});
  REQUIRE(r.exit_code == 0);
  INFO(r.err);
  CHECK(r.program == plain.program);  // logging changes nothing the program sees
  CHECK(get(r.stats(), "shim.cached_allocs") == get(plain.stats(), "shim.cached_allocs"));
  const std::string debug = "] debug: ";
  // The roads in: our export, a dlsym substitution, a resolver substitution.
  CHECK(lines_with(r.err, debug + "cudaMalloc: first call (road: exported symbol") == 1);
  CHECK(lines_with(r.err, debug + "cuGetProcAddress_v2: dlsym answered with our wrapper (road: dlsym substitution)") ==
        1);
  CHECK(lines_with(r.err, debug + "cuMemAlloc_v2: our wrapper substituted for the driver's pointer (road: resolver "
                                  "substitution) (asked cuGetProcAddress_v2(\"cuMemAlloc\"))") == 1);
  CHECK(lines_with(r.err, debug + "cuStreamCreate: first call (road: a pointer a resolver handed out") == 1);
  CHECK(lines_with(r.err, debug + "cuMemAlloc_v2: first call, inside cudaMalloc") == 1);
  // Served, once although the program allocates many times.
  CHECK(lines_with(r.err, debug + "cudaMalloc: served by the caching allocator without entering cudart") == 1);
  // Why memory was not served by the caching allocator.
  CHECK(lines_with(r.err, debug + "cudaMallocManaged: managed memory is never cached") == 1);
  CHECK(lines_with(r.err, debug + "cudaMallocPitch: pitched memory is never cached") == 1);
  CHECK(lines_with(r.err, debug + "cudaHostAlloc: pinned host memory is not device memory") == 1);
  CHECK(lines_with(r.err, debug + "cudaMalloc: not cached: a stream capture is active") == 1);
  CHECK(lines_with(r.err, debug + "cuIpcGetMemHandle: a block of vramtrace's cache exported by IPC") == 1);
  CHECK(lines_with(r.err, debug + "cudaFree: a block exported by IPC: quarantined at its free") == 1);
  CHECK(lines_with(r.err, debug + "cudaFree: a pointer vramtrace never handed out") == 1);
  CHECK(lines_with(r.err, debug + "cudaFree: inside vramtrace's cache but not a live block") == 1);
  // Each (decision, entry point) once: no debug line repeats.
  std::istringstream in(r.err);
  std::map<std::string, int> seen;
  for (std::string line; std::getline(in, line);)
    if (line.find(debug) != std::string::npos) ++seen[line];
  for (const auto& [line, n] : seen) {
    INFO(line);
    CHECK(n == 1);
  }
  // No warning: only tagged lines.
  CHECK(lines_with(r.err, "vramtrace: ") == 0);
  no_call_after_exit(r);
}

TEST_CASE("log level debug: a static cudart's driver calls came by the resolver, dlsym users by dlsym") {
  Run s = run({road("road_runtime_static")}, true, {"VRAMTRACE_LOG_LEVEL=debug"});
  REQUIRE(s.exit_code == 0);
  INFO(s.err);
  CHECK(lines_with(s.err, "] debug: cuMemAlloc_v2: first call (road: a pointer a resolver handed out") == 1);
  CHECK(lines_with(s.err, "] debug: cuMemAllocManaged: managed memory is never cached") == 1);
  Run d = run({road("road_dlsym")}, true, {"VRAMTRACE_LOG_LEVEL=debug"});
  REQUIRE(d.exit_code == 0);
  INFO(d.err);
  CHECK(lines_with(d.err, "] debug: cuMemAlloc_v2: dlsym answered with our wrapper (road: dlsym substitution)") == 1);
  CHECK(lines_with(d.err, "] debug: cuMemAlloc_v2: first call (road: a pointer our dlsym handed out)") == 1);
  CHECK(lines_with(d.err, "] debug: cuMemAlloc_v2: resolved to a variant vramtrace does not hook") == 1);
  Run n = run({road("road_runtime_shared")}, true,
              {"VRAMTRACE_CONF=reuse:none", "ROAD_EXPECT=none", "VRAMTRACE_LOG_LEVEL=debug"});
  REQUIRE(n.exit_code == 0);
  CHECK(lines_with(n.err, "] debug: cudaMalloc: not cached (reuse:none)") == 1);
}

TEST_CASE("log level info: the fork child and exit lines come from the raw path, one per process") {
  Run r = run({road("road_fork_exec"), "fork"}, true, {"VRAMTRACE_LOG_LEVEL=info"});
  REQUIRE(r.exit_code == 0);
  INFO(r.err);
  CHECK(lines_with(r.err, "] info: libvramtrace ") == 1);  // loaded once, before the fork
  CHECK(lines_with(r.err, "] info: fork child: pools, pass-through records and counters dropped") == 1);
  CHECK(lines_with(r.err, "] info: exit began") == 2);
  CHECK(lines_with(r.err, "] debug: ") == 0);
}

TEST_CASE("log level: the default prints nothing new, off silences even warnings, a bad value warns once") {
  Run plain = run({road("road_runtime_shared")}, false);
  Run dflt = run({road("road_runtime_shared")}, true);
  REQUIRE(dflt.exit_code == 0);
  CHECK(dflt.err == plain.err);
  Run warn = run({road("road_runtime_shared")}, true, {"VRAMTRACE_LOG_LEVEL=WARN"});
  CHECK(warn.err == plain.err);
  Run off = run({road("road_runtime_shared")}, true,
                {"VRAMTRACE_CONF=no_such_key:1", "ROAD_EXPECT=off", "VRAMTRACE_LOG_LEVEL=off"});
  REQUIRE(off.exit_code == 0);
  CHECK(off.err.empty());
  Run bad = run({"/bin/sh", "-c", "echo hi"}, true, {"VRAMTRACE_LOG_LEVEL=verbose"});
  CHECK(bad.exit_code == 0);
  CHECK(bad.out == "hi\n");
  CHECK(bad.err ==
        "vramtrace: VRAMTRACE_LOG_LEVEL: 'verbose' is not a level (trace, debug, info, warn, error, off); "
        "using warn\n");
  // The program runs as with the default level: the one warning and nothing else.
  Run bad_road = run({road("road_runtime_shared")}, true, {"VRAMTRACE_LOG_LEVEL=2"});
  REQUIRE(bad_road.exit_code == 0);
  CHECK(lines_with(bad_road.err, "vramtrace") == 1);
  CHECK(get(bad_road.stats(), "shim.cached_allocs") > 0);
}

TEST_CASE("the trace records the device's free memory when the shim first met its context") {
  // Note [the context's share] (policies/context_pool.cpp): the fake driver's contexts take
  // 300 MiB that no allocation call returns, as real ones do.
  test::TempDir dir;
  const std::string trace = dir.file("ctx.jsonl");
  Run r = run({road("road_runtime_shared")}, true,
              {"VRAMTRACE_OUTPUT=" + trace, "FAKECUDA_CONTEXT_MB=300", "FAKECUDA_TOTAL_MB=1024"});
  REQUIRE(r.exit_code == 0);
  std::istringstream in(slurp(trace));
  std::string first;
  REQUIRE(std::getline(in, first));
  const auto header = nlohmann::json::parse(first);
  CHECK(header["version"] == "1.2");
  REQUIRE(header["devices"].size() >= 1);
  const auto& d0 = header["devices"][0];
  CHECK(d0["id"] == 0);
  CHECK(d0["context_total_bytes"].get<long long>() == 1024 * kMiB);
  // Before the context's first allocation: the context's own 300 MiB only, and the shim held nothing.
  CHECK(d0["context_free_bytes"].get<long long>() == (1024 - 300) * kMiB);
  CHECK_FALSE(d0.contains("context_held_bytes"));
}

TEST_CASE("the trace writer's failure goes through the shim's logger in the same words") {
  test::TempDir dir;
  const std::string target = dir.file("missing/t.jsonl");
  Run r = run({road("road_runtime_shared")}, true, {"VRAMTRACE_OUTPUT=" + target});
  REQUIRE(r.exit_code == 0);
  CHECK(r.err == "vramtrace: cannot create the trace file '" + target +
                     "': No such file or directory; tracing is off, the program continues\n");
  Run off = run({road("road_runtime_shared")}, true, {"VRAMTRACE_OUTPUT=" + target, "VRAMTRACE_LOG_LEVEL=off"});
  REQUIRE(off.exit_code == 0);
  CHECK(off.err.empty());
}

TEST_CASE("pointer queries describe the block and not its cached segment and IPC inside a segment is refused") {
  Run plain = run({road("road_pointers")}, false);
  REQUIRE(plain.exit_code == 0);
  Run r = run({road("road_pointers")}, true, {"VRAMTRACE_LOG_LEVEL=debug"});
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  CHECK(r.program == plain.program);
  const Stats& s = r.stats();
  for (const char* f : {"cuMemGetAddressRange_v2", "cuPointerGetAttribute", "cuPointerGetAttributes",
                        "cuIpcGetMemHandle", "cuMemAlloc_v2", "cuMemFree_v2"}) {
    INFO(f);
    CHECK(get(s, std::string("calls.") + f) == get(r.program, f));
  }
  CHECK(get(s, "shim.cached_allocs") == 5);
  CHECK(lines_with(r.err, "vramtrace: cuIpcGetMemHandle: the block at ") == 1);
  CHECK(lines_with(r.err, "] debug: cuIpcGetMemHandle: an IPC export of a block that does not start") == 1);
  CHECK(lines_with(r.err, "] debug: cuPointerGetAttribute: a pointer query about a block") == 1);
}
