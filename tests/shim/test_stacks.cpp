// Call stacks recorded by the shim (shim/src/base/stacks.h), against the fake CUDA of tests/shim:
// a C++ program whose allocations go through a known chain of functions (resolved here with nm),
// a Python program through ctypes (Python frames with and without the GIL), the settings, and
// the order of records in the file (each stack, module and string before its first use, also
// compressed and with many threads at once). The traces are read back with the vramtrace reader.
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "spawn_util.h"
#include "vramtrace/trace/reader.h"

namespace {

namespace test = vramtrace::test;
using vramtrace::Action;
using vramtrace::Frame;
using vramtrace::TraceRecord;

struct Run {
  int exit_code = -1;
  std::string out, err;
  std::map<std::string, long long> program;  // "program.X N" lines of stdout
};

Run run(std::vector<std::string> argv, std::vector<std::string> env) {
  test::TempDir dir("vt-stacks-run");
  env.push_back(std::string("LD_PRELOAD=") + VT_SHIM_PATH);
  Run r;
  r.exit_code = test::wait_exit_code(
      test::spawn_captured(argv, test::clean_environment(env, VT_FAKELIB_DIR), dir.file("out"), dir.file("err")));
  r.out = test::slurp(dir.file("out"));
  r.err = test::slurp(dir.file("err"));
  std::istringstream in(r.out);
  std::string key;
  long long v;
  for (std::string line; std::getline(in, line);) {
    std::istringstream ls(line);
    if (ls >> key >> v && key.rfind("program.", 0) == 0) r.program[key.substr(8)] = v;
  }
  if (r.exit_code != 0) UNSCOPED_INFO("stdout:\n" << r.out << "\nstderr:\n" << r.err);
  return r;
}

std::string command_output(const std::string& cmd) {
  std::string out;
  FILE* p = popen(cmd.c_str(), "r");
  REQUIRE(p != nullptr);
  char buf[4096];
  for (std::size_t n; (n = fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
  pclose(p);
  return out;
}

/// A function of a binary, from `nm -S`: its link-time address range.
struct Symbol {
  std::uint64_t start = 0, end = 0;
};
std::map<std::string, Symbol> symbols_of(const std::string& binary) {
  std::map<std::string, Symbol> out;
  std::istringstream in(command_output("nm -S --defined-only " + binary));
  for (std::string line; std::getline(in, line);) {
    std::istringstream ls(line);
    std::string addr, size, type, name;
    if (!(ls >> addr >> size >> type >> name)) continue;  // symbols without a size
    const std::uint64_t a = std::stoull(addr, nullptr, 16);
    out[name] = {a, a + std::stoull(size, nullptr, 16)};
  }
  return out;
}

std::string build_id_of(const std::string& binary) {
  const std::string notes = command_output("readelf -n " + binary);
  const auto at = notes.find("Build ID: ");
  if (at == std::string::npos) return "";
  std::string id = notes.substr(at + 10);
  return id.substr(0, id.find_first_of(" \n"));
}

/// The records of a trace and the reader's frames of each one's stack.
struct Trace {
  std::vector<TraceRecord> records;
  std::shared_ptr<const vramtrace::StackTable> stacks;
  std::vector<std::string> notes;
  std::vector<Frame> frames(const TraceRecord& r) const {
    const auto* f = stacks ? stacks->get(r.stack_id) : nullptr;
    return f ? *f : std::vector<Frame>{};
  }
};
Trace read_trace(const std::string& path) {
  Trace t;
  auto reader = vramtrace::open_vramtrace_trace(path);
  for (TraceRecord r; reader->next(r);) t.records.push_back(r);
  t.stacks = reader->stacks();
  t.notes = reader->notes();
  return t;
}

/// The name of the function of `syms` that holds the return address of native frame `f` in
/// `module` ("" when the frame is in another module or in no function of it).
std::string function_at(const Frame& f, const std::string& module, const std::map<std::string, Symbol>& syms) {
  if (f.module != module || f.address == 0) return "";
  const std::uint64_t call = f.address - 1;  // the return address follows the call
  for (const auto& [name, s] : syms)
    if (call >= s.start && call < s.end) return name;
  return "";
}

/// The functions of `chain` (module, name), innermost first, each found in `frames` after the one
/// before it. Returns the first one missing ("" when all are there in order).
std::string missing_in_order(const std::vector<Frame>& frames,
                             const std::vector<std::pair<std::string, std::string>>& chain,
                             const std::map<std::string, std::map<std::string, Symbol>>& syms) {
  std::size_t at = 0;
  for (const auto& [module, name] : chain) {
    while (at < frames.size() && function_at(frames[at], module, syms.at(module)) != name) ++at;
    if (at == frames.size()) return name;
    ++at;
  }
  return "";
}

std::vector<nlohmann::json> json_lines(const std::string& path) {
  std::vector<nlohmann::json> out;
  std::istringstream in(test::slurp(path));
  for (std::string line; std::getline(in, line);) out.push_back(nlohmann::json::parse(line));
  return out;
}

/// Note [records before use]: every "st", module id and string id a line uses was defined by an
/// earlier line, each record kind's ids once. Returns the number of stack records.
std::size_t check_records_before_use(const std::vector<nlohmann::json>& lines) {
  std::set<std::uint64_t> stacks, modules, strings;
  for (const auto& j : lines) {
    const std::string a = j.value("a", "");
    if (a == "module") {
      CHECK(modules.insert(j["id"].get<std::uint64_t>()).second);
    } else if (a == "string") {
      CHECK(strings.insert(j["id"].get<std::uint64_t>()).second);
    } else if (a == "stack") {
      CHECK(stacks.insert(j["id"].get<std::uint64_t>()).second);
      for (const auto& f : j["frames"]) {
        if (f.contains("m")) CHECK(modules.count(f["m"].get<std::uint64_t>()) == 1);
        if (f.contains("f")) {
          CHECK(strings.count(f["f"].get<std::uint64_t>()) == 1);
          CHECK(strings.count(f["n"].get<std::uint64_t>()) == 1);
        }
      }
    } else if (j.contains("st")) {
      CHECK(stacks.count(j["st"].get<std::uint64_t>()) == 1);
    }
  }
  return stacks.size();
}

const std::string kRoad = std::string(VT_ROAD_DIR) + "/road_stacks";

std::vector<std::string> pythons();

/// The "key value" lines of a stats file (VRAMTRACE_TEST_STATS_FILE).
std::map<std::string, long long> read_stats(const std::string& path) {
  std::map<std::string, long long> out;
  std::istringstream in(test::slurp(path));
  std::string k;
  long long v;
  while (in >> k >> v) out[k] = v;
  return out;
}

std::string canonical(const std::string& p) { return std::filesystem::canonical(p).string(); }

}  // namespace

TEST_CASE("call stacks: a known chain of functions, innermost first, in the program and its library") {
  test::TempDir dir("vt-stacks");
  const std::string trace = dir.file("t.jsonl");
  Run r = run({kRoad}, {"VRAMTRACE_OUTPUT=" + trace});
  REQUIRE(r.exit_code == 0);
  const std::string prog = canonical(kRoad), lib = canonical(VT_STACK_LIB_PATH);
  const std::map<std::string, std::map<std::string, Symbol>> syms = {{prog, symbols_of(prog)}, {lib, symbols_of(lib)}};
  Trace t = read_trace(trace);
  CHECK(t.notes.empty());
  REQUIRE(t.stacks);

  int chain = 0, driver = 0, managed = 0, threads = 0, qsorted = 0, signalled = 0;
  std::set<std::uint32_t> chain_stacks;
  for (const TraceRecord& rec : t.records) {
    if (!vramtrace::carries_stack(rec.action)) {
      CHECK(rec.stack_id == 0);  // frees carry none
      continue;
    }
    if (rec.action != Action::alloc && !(rec.action == Action::segment_alloc && rec.memory_kind != 0)) continue;
    REQUIRE(rec.stack_id != 0);  // every allocation has its stack
    const std::vector<Frame> frames = t.frames(rec);
    REQUIRE(!frames.empty());
    for (const Frame& f : frames) CHECK(f.module.find("libvramtrace") == std::string_view::npos);  // ours left out
    INFO("size " << rec.size << ", frame 0 " << frames[0].name);
    if (rec.action == Action::alloc && rec.size == (1u << 20)) {
      ++chain;
      chain_stacks.insert(rec.stack_id);
      CHECK(missing_in_order(
                frames, {{lib, "stack_lib_alloc"}, {prog, "stack_level_2"}, {prog, "stack_level_1"}, {prog, "main"}},
                syms) == "");
    } else if (rec.action == Action::alloc && rec.size == (3u << 20)) {
      ++driver;
      // cuMemAlloc_v2 called directly: the first frame is the program's own caller.
      CHECK(function_at(frames[0], prog, syms.at(prog)) == "stack_driver_alloc");
      CHECK(missing_in_order(frames, {{prog, "stack_driver_alloc"}, {prog, "main"}}, syms) == "");
    } else if (rec.action == Action::alloc && rec.size == (5u << 20)) {
      ++qsorted;  // through libc's qsort: its frames between the comparator and main
      CHECK(function_at(frames[0], prog, syms.at(prog)) == "stack_compare");
      CHECK(missing_in_order(frames, {{prog, "stack_compare"}, {prog, "main"}}, syms) == "");
      CHECK(std::any_of(frames.begin(), frames.end(),
                        [](const Frame& f) { return f.module.find("libc.so") != std::string_view::npos; }));
    } else if (rec.action == Action::alloc && rec.size == (6u << 20)) {
      ++signalled;  // through the signal frame: the handler, then main where raise() was called
      CHECK(missing_in_order(frames, {{prog, "stack_on_signal"}, {prog, "main"}}, syms) == "");
    } else if (rec.action == Action::segment_alloc) {
      ++managed;  // pass-through memory (kind managed) has its stack too
      CHECK(missing_in_order(frames, {{prog, "main"}}, syms) == "");
    } else if (rec.action == Action::alloc) {
      ++threads;
      // stack_recurse once per level of the thread's depth, above the chain
      const auto levels = std::count_if(frames.begin(), frames.end(), [&](const Frame& f) {
        return function_at(f, prog, syms.at(prog)) == "stack_recurse";
      });
      CHECK(levels >= 1);
      CHECK(missing_in_order(frames, {{lib, "stack_lib_alloc"}, {prog, "stack_level_1"}, {prog, "stack_recurse"}},
                             syms) == "");
    }
  }
  CHECK(chain == r.program["chain_allocs"]);
  CHECK(qsorted == 1);
  CHECK(signalled == 1);
  CHECK(driver == r.program["driver_allocs"]);
  CHECK(managed == 1);
  CHECK(threads == r.program["thread_allocs"]);
  // The 50 allocations of one chain share their stacks: the first went through cudart (no context
  // yet), the others through the runtime fast path.
  CHECK(chain_stacks.size() <= 2);

  // The file: each record once, before its first use; modules named with their build-id.
  const auto lines = json_lines(trace);
  CHECK(lines.front()["settings"]["stacks"] == "native,python");
  CHECK(lines.front()["settings"]["stack_depth"] == "64");
  CHECK(lines.front()["version"] == "1.2");
  const std::size_t stack_records = check_records_before_use(lines);
  CHECK(stack_records == t.stacks->size());
  std::map<std::string, std::string> build_ids;
  for (const auto& j : lines)
    if (j.value("a", "") == "module") build_ids[j["path"].get<std::string>()] = j.value("build_id", "");
  REQUIRE(build_ids.count(prog) == 1);
  REQUIRE(build_ids.count(lib) == 1);
  CHECK(build_ids[prog] == build_id_of(prog));
  CHECK(build_ids[lib] == build_id_of(lib));
  CHECK(!build_ids[lib].empty());
}

TEST_CASE("call stacks: the cached unwinder gives libgcc's frames, and leaves signal frames to it") {
  // VRAMTRACE_TEST_UNWIND_CHECK=1: every stack is walked both ways and compared (Note [cached
  // unwinding]); the program's and Python's stacks, through libc, libstdc++'s threads and the
  // interpreter.
  test::TempDir dir("vt-stacks");
  std::vector<std::vector<std::string>> programs = {{kRoad}};
  for (const std::string& python : pythons())
    programs.push_back({python, "-B", canonical(VT_STACKS_PY_PATH), VT_STACK_LIB_PATH});
  for (const auto& argv : programs) {
    INFO(argv[0]);
    std::filesystem::remove(dir.file("t.jsonl"));
    Run r = run(argv, {"VRAMTRACE_OUTPUT=" + dir.file("t.jsonl"), "VRAMTRACE_TEST_UNWIND_CHECK=1",
                       "VRAMTRACE_TEST_STATS_FILE=" + dir.file("stats")});
    REQUIRE(r.exit_code == 0);
    const auto stats = read_stats(dir.file("stats"));
    CHECK(stats.at("shim.unwind_mismatches") == 0);
    CHECK(stats.at("shim.unwind_cached") > 0);
    CHECK(stats.at("shim.unwind_cached") + stats.at("shim.unwind_full") == stats.at("shim.stacks_captured"));
    if (argv[0] == kRoad) CHECK(stats.at("shim.unwind_full") >= 1);  // the signal handler's stack
  }
}

TEST_CASE(
    "call stacks: VRAMTRACE_STACKS none, native and python; VRAMTRACE_STACK_DEPTH; bad values keep the defaults") {
  test::TempDir dir("vt-stacks");
  auto stacks_in = [&](const std::vector<std::string>& env, std::string* err = nullptr) {
    const std::string trace = dir.file("s.jsonl");
    std::filesystem::remove(trace);
    std::vector<std::string> e = env;
    e.push_back("VRAMTRACE_OUTPUT=" + trace);
    Run r = run({kRoad}, e);
    REQUIRE(r.exit_code == 0);
    if (err) *err = r.err;
    Trace t = read_trace(trace);
    CHECK(t.notes.empty());
    std::size_t with = 0, most = 0;
    for (const TraceRecord& rec : t.records) {
      if (rec.stack_id == 0) continue;
      ++with;
      most = std::max(most, t.frames(rec).size());
    }
    return std::make_pair(with, most);
  };
  SECTION("none: no stack at all") {
    auto [with, most] = stacks_in({"VRAMTRACE_STACKS=none"});
    CHECK(with == 0);
    CHECK(json_lines(dir.file("s.jsonl")).front()["settings"]["stacks"] == "none");
  }
  SECTION("native (any case): native frames") {
    auto [with, most] = stacks_in({"VRAMTRACE_STACKS=Native"});
    CHECK(with > 100);
    CHECK(most >= 4);
  }
  SECTION("python: a program without Python gets none") {
    auto [with, most] = stacks_in({"VRAMTRACE_STACKS=python"});
    CHECK(with == 0);
  }
  SECTION("depth: at most that many native frames") {
    auto [with, most] = stacks_in({"VRAMTRACE_STACK_DEPTH=3"});
    CHECK(with > 100);
    CHECK(most == 3);
  }
  SECTION("bad values: one warning each, and the defaults") {
    std::string err;
    auto [with, most] = stacks_in({"VRAMTRACE_STACKS=natve", "VRAMTRACE_STACK_DEPTH=0"}, &err);
    CHECK(err.find("vramtrace: VRAMTRACE_STACKS: 'natve' is not a stack setting (native,python, native, python, "
                   "none); using native,python\n") != std::string::npos);
    CHECK(err.find("vramtrace: VRAMTRACE_STACK_DEPTH: '0' is not a number of frames from 1 to 256; using 64\n") !=
          std::string::npos);
    CHECK(with > 100);
    CHECK(most > 3);
  }
}

TEST_CASE("call stacks: each record before its first use, with many threads at once and compressed") {
  test::TempDir dir("vt-stacks");
  for (const char* name : {"t.jsonl", "t.jsonl.zst"}) {
    INFO(name);
    const std::string trace = dir.file(name);
    // A small ring, so that the threads' events and the writer interleave as much as they can.
    Run r = run({kRoad}, {"VRAMTRACE_OUTPUT=" + trace, "VRAMTRACE_TRACE_BUFFER=64"});
    REQUIRE(r.exit_code == 0);
    Trace t = read_trace(trace);
    CHECK(t.notes.empty());  // the reader met no stack, module or string before its record
    std::set<std::uint32_t> ids;
    for (const TraceRecord& rec : t.records) {
      if (rec.action == Action::alloc) {
        CHECK(rec.stack_id != 0);
        ids.insert(rec.stack_id);
      }
    }
    CHECK(ids.size() >= 9);  // the chain and eight depths of recursion at least
    if (std::string(name).find(".zst") == std::string::npos) check_records_before_use(json_lines(trace));
  }
}

namespace {
// The Python interpreters here to run the Python test under: the one on PATH (pyenv's links a
// shared libpython) and the distribution's (libpython linked into the executable), each once.
std::vector<std::string> pythons() {
  std::vector<std::string> out;
  for (const char* cmd : {"python3", "/usr/bin/python3"}) {
    std::string exe = command_output(std::string(cmd) + " -c 'import sys; print(sys.executable)' 2>/dev/null");
    while (!exe.empty() && (exe.back() == '\n' || exe.back() == ' ')) exe.pop_back();
    if (exe.empty() || access(exe.c_str(), X_OK) != 0) continue;
    exe = canonical(exe);
    if (std::find(out.begin(), out.end(), exe) == out.end()) out.push_back(exe);
  }
  return out;
}
}  // namespace

TEST_CASE("call stacks: Python frames with file, line and function when the GIL is held, none without it") {
  const auto interpreters = pythons();
  if (interpreters.empty()) {
    WARN("no python3 here: the Python call stacks are not tested");
    return;
  }
  const std::string script = canonical(VT_STACKS_PY_PATH);
  for (const std::string& python : interpreters) {
    INFO(python);
    test::TempDir dir("vt-stacks-py");
    const std::string trace = dir.file("py.jsonl");
    Run r = run({python, "-B", script, VT_STACK_LIB_PATH}, {"VRAMTRACE_OUTPUT=" + trace});
    REQUIRE(r.exit_code == 0);
    CHECK(r.program["script"] == 1);
    CHECK(r.program["pending_kept"] == 1);  // the walk saved and restored the pending exception
    Trace t = read_trace(trace);
    CHECK(t.notes.empty());
    std::map<long long, std::vector<Frame>> by_mib;
    for (const TraceRecord& rec : t.records)
      if (rec.action == Action::alloc && rec.size % (1 << 20) == 0) by_mib[rec.size >> 20] = t.frames(rec);
    auto python_frames = [](const std::vector<Frame>& frames) {
      std::vector<Frame> out;
      for (const Frame& f : frames)
        if (f.module.empty() && !f.filename.empty()) out.push_back(f);
      return out;
    };
    for (long long mib : {1, 3}) {  // the GIL held: Python frames, the allocating line first
      INFO(mib << " MiB");
      REQUIRE(by_mib.count(mib) == 1);
      const std::vector<Frame> frames = by_mib[mib];
      const std::vector<Frame> py = python_frames(frames);
      REQUIRE(py.size() >= 2);
      CHECK(py[0].filename == script);
      CHECK(py[0].line == r.program["line_" + std::to_string(mib)]);
      CHECK(py[0].name == "alloc");
      CHECK(py[1].filename == script);
      CHECK(py[1].name == "outer");
      // outermost after the native frames: every native frame comes first
      const auto first_python = std::find_if(frames.begin(), frames.end(),
                                             [](const Frame& f) { return f.module.empty() && !f.filename.empty(); });
      CHECK(std::all_of(first_python, frames.end(), [](const Frame& f) { return f.module.empty(); }));
      CHECK(!frames.front().module.empty());  // native frames too (stack_lib_alloc, ctypes, the interpreter)
    }
    CHECK(python_frames(by_mib[1]).back().name == "<module>");
    for (long long mib : {2, 4}) {  // the GIL released (ctypes.CDLL): native frames only
      INFO(mib << " MiB");
      REQUIRE(by_mib.count(mib) == 1);
      CHECK(!by_mib[mib].empty());
      CHECK(python_frames(by_mib[mib]).empty());
    }
    REQUIRE(by_mib.count(5) == 1);
    const auto pending = python_frames(by_mib[5]);
    REQUIRE(!pending.empty());
    CHECK(pending[0].filename == "??");  // co_filename that is not UTF-8
    CHECK(pending[0].name == "pending");
    check_records_before_use(json_lines(trace));
  }
}

TEST_CASE("call stacks: `vramtrace summary` names the native sites of a shim trace, `--json` their frames") {
  const std::string vramtrace = VT_VRAMTRACE_PATH;
  test::TempDir dir("vt-stacks");
  const std::string trace = dir.file("t.jsonl");
  REQUIRE(run({kRoad}, {"VRAMTRACE_OUTPUT=" + trace}).exit_code == 0);
  const std::string text = command_output(vramtrace + " summary " + trace + " 2>&1");
  INFO(text);
  // The chain's allocations: the first frame of the program's own code is libstack_lib.so's,
  // named by the reporter's symbolizer from the library's symbols and DWARF lines.
  CHECK(text.find("Top allocation sites") != std::string::npos);
  CHECK(text.find("stack_lib.cpp:") != std::string::npos);
  CHECK(text.find("in stack_lib_alloc") != std::string::npos);
  const auto j = nlohmann::json::parse(command_output(vramtrace + " summary --json " + trace));
  const auto& sites = j["traces"][0]["sites"];
  REQUIRE(sites["devices"].size() == 1);
  const auto& end = sites["devices"][0]["at_end"];
  CHECK(end["no_stack_bytes"] == 0);
  bool named = false;
  for (const auto& s : sites["devices"][0]["at_peak"]["sites"])
    for (const auto& f : s["frames"]) {
      REQUIRE(f.contains("module"));  // native frames only: a C++ program
      CHECK(f["address"].get<std::uint64_t>() > 0);
      if (f["name"] == "stack_lib_alloc") {
        named = true;
        CHECK(f["kind"] == "user");
        CHECK(f["line"].get<int>() > 0);
        CHECK(f["filename"].get<std::string>().find("stack_lib.cpp") != std::string::npos);
      }
    }
  CHECK(named);

  // The same trace read where the library is gone: its frames fall back to module+offset, and a
  // note says why.
  std::string moved = test::slurp(trace);
  const std::string lib = canonical(VT_STACK_LIB_PATH);
  for (std::size_t at; (at = moved.find(lib)) != std::string::npos;)
    moved.replace(at, lib.size(), dir.path + "/gone/libstack_lib.so");
  std::ofstream(dir.file("moved.jsonl")) << moved;
  const std::string fallback = command_output(vramtrace + " summary " + dir.file("moved.jsonl") + " 2>&1");
  INFO(fallback);
  CHECK(fallback.find("libstack_lib.so+0x") != std::string::npos);
  CHECK(fallback.find("native frames: " + dir.path + "/gone/libstack_lib.so: not symbolised") != std::string::npos);
}
