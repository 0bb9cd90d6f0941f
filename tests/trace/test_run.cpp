// `vramtrace run` end to end, with a stand-in preload library (test_preload.cpp) in place of the
// CUDA shim: environment, exit codes, signals, the end screen, and the Python mark helper.
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "trace_test_util.h"

using namespace vramtrace;
using vramtrace::test::ScratchDir;

namespace {

struct RunResult {
  int exit_code = -1;
  std::string err;
  std::string out;  // stdout (run_vramtrace only)
};

pid_t spawn_vramtrace(const std::vector<std::string>& args, const std::vector<std::pair<std::string, std::string>>& env,
                      const std::string& err_path, const std::string& out_path = "/dev/null") {
  pid_t pid = fork();
  if (pid == 0) {
    int e = ::open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    dup2(e, 2);
    int o = ::open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    dup2(o, 1);
    setenv("VRAMTRACE_LIB", TEST_PRELOAD_LIB, 1);
    for (const auto& [k, v] : env) setenv(k.c_str(), v.c_str(), 1);
    std::vector<std::string> copy = args;
    std::vector<char*> argv{const_cast<char*>(VRAMTRACE_EXE)};
    for (auto& a : copy) argv.push_back(a.data());
    argv.push_back(nullptr);
    execv(VRAMTRACE_EXE, argv.data());
    _exit(126);
  }
  return pid;
}

RunResult run_vramtrace(const std::vector<std::string>& args, const ScratchDir& dir,
                        const std::vector<std::pair<std::string, std::string>>& env = {}) {
  pid_t pid = spawn_vramtrace(args, env, dir.file("run.err"), dir.file("run.out"));
  int status = 0;
  waitpid(pid, &status, 0);
  RunResult r;
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.err = test::read_file(dir.file("run.err"));
  r.out = test::read_file(dir.file("run.out"));
  return r;
}

std::string only_trace(const ScratchDir& dir, const std::string& prefix) {
  std::string found;
  for (const auto& f : test::files_in(dir.path())) {
    if (std::filesystem::path(f).filename().string().rfind(prefix, 0) == 0) {
      REQUIRE(found.empty());
      found = f;
    }
  }
  REQUIRE(!found.empty());
  return found;
}

// The real interpreter: launcher scripts (pyenv shims) would spawn shells that load the
// preload library too.
std::string python3_executable() {
  std::FILE* p = popen("python3 -c 'import ctypes, sys; print(sys.executable)' 2>/dev/null", "r");
  if (p == nullptr) return {};
  char buf[4096] = {};
  std::string out = std::fgets(buf, sizeof(buf), p) ? buf : "";
  pclose(p);
  while (!out.empty() && (out.back() == '\n' || out.back() == '\r')) out.pop_back();
  return out;
}

}  // namespace

TEST_CASE("run returns the command's exit code and prints the end screen", "[run]") {
  ScratchDir dir;
  RunResult r = run_vramtrace({"run", "-o", dir.file("t.%p.jsonl"), "--", TRACE_CHILD_PATH, "exit", "3"}, dir);
  INFO(r.err);
  CHECK(r.exit_code == 3);
  std::string trace = only_trace(dir, "t.");
  CHECK(r.err.find("exited with code 3") != std::string::npos);
  CHECK(r.err.find(trace) != std::string::npos);
  CHECK(r.err.find("peak allocated 3.00 MiB") != std::string::npos);
  CHECK(r.err.find("peak reserved 20.00 MiB") != std::string::npos);
  CHECK(r.err.find("OOMs: none") != std::string::npos);
  CHECK(r.err.find("vramtrace summary " + trace) != std::string::npos);
  CHECK(r.err.find("vramtrace report " + trace + " -o report.html") != std::string::npos);
  CHECK(r.err.find("vramtrace oom " + trace) != std::string::npos);
  test::ReadBack rb = test::read_all(trace);
  CHECK(rb.records.size() == 4);
  CHECK_FALSE(rb.incomplete);
}

TEST_CASE("run's end screen counts OOMs and retries as the reports do", "[run]") {
  // Note [one OOM per failed request]: 3 failed allocations, one the program survived, one request
  // that failed twice.
  const std::string expected =
      "OOMs 1, cudaMalloc retries 2 (3 failed allocations of the traced allocator: 1 the program survived (the "
      "request then succeeded) and 1 it tried again before the error)";
  ScratchDir dir;
  RunResult r = run_vramtrace({"run", "-o", dir.file("t.%p.jsonl"), "--", TRACE_CHILD_PATH, "exit", "0"}, dir,
                              {{"TEST_PRELOAD_OOMS", "retries"}});
  INFO(r.err);
  CHECK(r.exit_code == 0);
  CHECK(r.err.find(expected) != std::string::npos);
  CHECK(r.err.find("(vramtrace oom " + only_trace(dir, "t.") + ")") != std::string::npos);
  // Killed before its trailer: the end screen reads the events and says the same.
  ScratchDir killed;
  RunResult k = run_vramtrace({"run", "-o", killed.file("t.%p.jsonl"), "--", TRACE_CHILD_PATH, "die-after", "400"},
                              killed, {{"TEST_PRELOAD_OOMS", "retries"}});
  INFO(k.err);
  CHECK(k.err.find("incomplete") != std::string::npos);
  CHECK(k.err.find(expected) != std::string::npos);
}

TEST_CASE("run names only the traces this run wrote, never an earlier run's file", "[run]") {
  ScratchDir dir;
  // A fixed name: the second run's shim refuses to overwrite the first run's file.
  RunResult first = run_vramtrace({"run", "-o", dir.file("same.jsonl"), "--", TRACE_CHILD_PATH, "exit", "0"}, dir);
  INFO(first.err);
  REQUIRE(first.exit_code == 0);
  const std::string old = only_trace(dir, "same.");
  CHECK(first.err.find("trace  " + old) != std::string::npos);
  RunResult second = run_vramtrace({"run", "-o", dir.file("same.jsonl"), "--", TRACE_CHILD_PATH, "exit", "0"}, dir);
  INFO(second.err);
  CHECK(second.exit_code == 0);
  CHECK(second.err.find("trace  " + old) == std::string::npos);
  CHECK(second.err.find("no trace was written") != std::string::npos);
  CHECK(second.err.find("1 file(s) of that name were there before the run") != std::string::npos);
  // With %p, within the same second: each run lists its own file only.
  RunResult a = run_vramtrace({"run", "-o", dir.file("p.%p.jsonl"), "--", TRACE_CHILD_PATH, "exit", "0"}, dir);
  RunResult b = run_vramtrace({"run", "-o", dir.file("p.%p.jsonl"), "--", TRACE_CHILD_PATH, "exit", "0"}, dir);
  INFO(b.err);
  auto count = [](const std::string& s, const std::string& what) {
    std::size_t n = 0;
    for (std::size_t at = s.find(what); at != std::string::npos; at = s.find(what, at + 1)) ++n;
    return n;
  };
  CHECK(count(a.err, "  trace  ") == 1);
  CHECK(count(b.err, "  trace  ") == 1);
  // %t alone: two runs in one second collide; the advice is to add %p.
  RunResult t1 = run_vramtrace({"run", "-o", dir.file("t.%t.jsonl"), "--", TRACE_CHILD_PATH, "exit", "0"}, dir);
  RunResult t2 = run_vramtrace({"run", "-o", dir.file("t.%t.jsonl"), "--", TRACE_CHILD_PATH, "exit", "0"}, dir);
  if (t2.err.find("no trace was written") != std::string::npos) {  // the same second
    CHECK(t2.err.find("%t has one-second resolution, add %p to -o") != std::string::npos);
  }
  // A file the program itself wrote under a matching name: shown as unreadable, left out of the
  // suggested commands.
  const std::string junk_writer = "echo hello > " + dir.file("j.123.jsonl") + "; exec " + TRACE_CHILD_PATH + " exit 0";
  RunResult j = run_vramtrace({"run", "-o", dir.file("j.%p.jsonl"), "--", "/bin/sh", "-c", junk_writer}, dir);
  INFO(j.err);
  CHECK(j.exit_code == 0);
  CHECK(j.err.find("j.123.jsonl: unreadable") != std::string::npos);
  const std::string next = j.err.substr(j.err.find("Next:"));
  CHECK(next.find("j.123.jsonl") == std::string::npos);
}

TEST_CASE("run without a trace names the files it looked for with their placeholders in words", "[run]") {
  ScratchDir dir;
  // The second run's shim refuses to overwrite the first run's file: no trace of its own.
  const std::vector<std::string> args = {"run",  "-o", dir.file("x.%h.%Rrun.jsonl"), "--", TRACE_CHILD_PATH,
                                         "exit", "0"};
  REQUIRE(run_vramtrace(args, dir).exit_code == 0);
  RunResult r = run_vramtrace(args, dir);
  INFO(r.err);
  CHECK(r.exit_code == 0);
  CHECK(r.err.find("no trace was written") != std::string::npos);
  CHECK(r.err.find("x.<host>.[rank<N>.]run.jsonl") != std::string::npos);
  CHECK(r.err.find("%h") == std::string::npos);  // the shim's own line above may suggest %p
  CHECK(r.err.find("%R") == std::string::npos);
  CHECK(r.err.find("line above") == std::string::npos);
}

TEST_CASE("a compressed trace reads like the plain one: the trailer's recorded figures too", "[run]") {
  ScratchDir dir;
  std::vector<std::string> summaries;
  for (const char* name : {"plain.%p.jsonl", "zst.%p.jsonl.zst"}) {
    RunResult r = run_vramtrace({"run", "-o", dir.file(name), "--", TRACE_CHILD_PATH, "exit", "0"}, dir);
    INFO(r.err);
    REQUIRE(r.exit_code == 0);
    const std::string trace = only_trace(dir, std::string(name).substr(0, std::string(name).find('.') + 1));
    RunResult s = run_vramtrace({"summary", trace}, dir);
    INFO(s.err);
    REQUIRE(s.exit_code == 0);
    // The stand-in preload records 3 MiB allocated at its peak: three 1 MiB blocks for requests
    // of 1,000,000 bytes.
    CHECK(s.out.find("Recorded by the traced allocator vs computed from the events") != std::string::npos);
    // The trace's block sizes ("b") are used: computed equals recorded.
    CHECK(s.out.find("allocated_bytes.all.peak                3145728          3145728  same") != std::string::npos);
    summaries.push_back(s.out.substr(s.out.find('\n')));  // the first line names the file
  }
  CHECK(summaries[0] == summaries[1]);
}

TEST_CASE("damaged traces: each kind of damage is named, nothing readable is lost", "[run][damaged]") {
  ScratchDir dir;
  for (const char* name : {"d.%p.jsonl", "d.%p.jsonl.zst"}) {
    RunResult r = run_vramtrace({"run", "-o", dir.file(name), "--", TRACE_CHILD_PATH, "exit", "0"}, dir);
    REQUIRE(r.exit_code == 0);
  }
  std::string plain_path, zst_path;
  for (const auto& f : test::files_in(dir.path())) {
    const std::string base = std::filesystem::path(f).filename().string();
    if (base.rfind("d.", 0) != 0) continue;
    (base.size() > 4 && base.substr(base.size() - 4) == ".zst" ? zst_path : plain_path) = f;
  }
  REQUIRE(!plain_path.empty());
  REQUIRE(!zst_path.empty());
  const std::string plain = test::read_file(plain_path);
  const std::string zst = test::read_file(zst_path);
  const std::size_t trailer_at = plain.rfind("{\"a\":\"trailer\"");
  REQUIRE(trailer_at != std::string::npos);
  auto write = [&](const std::string& file, const std::string& text) {
    std::ofstream(dir.file(file), std::ios::binary) << text;
    return dir.file(file);
  };
  struct Case {
    std::string file, text, summary_says, oom_says;
    int exit_code;
  };
  const std::string nuls(4096, '\0');
  const std::vector<Case> cases = {
      {"cut.jsonl.zst", zst.substr(0, 20), "cut before its first complete block", "cut before its first complete block",
       2},
      {"notrailer.jsonl", plain.substr(0, trailer_at), "ends abruptly (no trailer: the process did not finish tracing",
       "the trace ends abruptly", 0},
      {"cutline.jsonl", plain.substr(0, trailer_at - 10), "ends abruptly (its last line is cut)",
       "the trace ends abruptly", 0},
      {"junk.jsonl", plain + "garbage here\n", "junk after the trailer: 'garbage here'", "junk after the trailer", 2},
      {"junkmid.jsonl", plain.substr(0, trailer_at) + "garbage here\n" + plain.substr(trailer_at),
       "not a JSON object: 'garbage here'", "not a JSON object", 2},
      {"nul.jsonl", plain + nuls, "4097 NUL bytes where lines should be were skipped",
       "No OOM in this trace, and it ends normally", 0},
      {"headeronly.jsonl", plain.substr(0, plain.find('\n') + 1), "no events; the trace ends abruptly (no trailer",
       "ends abruptly before its first event (no trailer", 0},
      {"cuthdr.jsonl", plain.substr(0, 30), "header line is cut", "header line is cut", 2},
  };
  // Values no writer produces: refused with the file, the line and the field, never printed as memory.
  auto with_event = [&](const std::string& event) {
    return plain.substr(0, trailer_at) + event + "\n" + plain.substr(trailer_at);
  };
  const std::vector<std::pair<std::string, std::string>> impossible = {
      {R"({"a":"alloc","t":1000,"p":4096,"r":18446744073709551615})", "field \"r\": impossible size"},
      {R"({"a":"alloc","t":1000,"d":-1,"p":4096,"r":512})", "field \"d\": device -1 outside 0..1023"},
      {R"({"a":"alloc","t":1000,"d":99999,"p":4096,"r":512})", "field \"d\": device 99999 outside"},
      {R"({"a":"alloc","t":1000,"p":4096,"r":1000000,"b":1024})",
       "field \"b\": a block of 1024 bytes below its request \"r\" of 1000000 bytes"},
      {R"({"a":"alloc","t":9223372036854775807,"p":4096,"r":512})", "field \"t\": impossible time 9223372036854775807"},
      {R"({"a":"alloc","t":-99999999999,"p":4096,"r":512})", "field \"t\": impossible time -99999999999"},
  };
  std::vector<Case> all = cases;
  for (std::size_t i = 0; i < impossible.size(); ++i)
    all.push_back({"impossible" + std::to_string(i) + ".jsonl", with_event(impossible[i].first), impossible[i].second,
                   impossible[i].second, 2});
  for (const Case& c : all) {
    INFO(c.file);
    const std::string path = write(c.file, c.text);
    RunResult s = run_vramtrace({"summary", path}, dir);
    INFO("summary: " << s.out << s.err);
    CHECK(s.exit_code == c.exit_code);
    CHECK((s.out + s.err).find(c.summary_says) != std::string::npos);
    RunResult o = run_vramtrace({"oom", path}, dir);
    INFO("oom: " << o.out << o.err);
    CHECK(o.exit_code == c.exit_code);
    CHECK((o.out + o.err).find(c.oom_says) != std::string::npos);
  }
  // check fails an incomplete trace whatever its budgets say, in every format (Note [a run that
  // did not finish]); --allow-incomplete judges its budgets and says its figures stop early.
  RunResult chk = run_vramtrace({"check", dir.file("notrailer.jsonl"), "--max-peak-reserved", "1GiB"}, dir);
  INFO(chk.out << chk.err);
  CHECK(chk.exit_code == 1);
  CHECK(chk.out.find("error: " + dir.file("notrailer.jsonl") + " did not finish (no trailer") != std::string::npos);
  RunResult chk_allowed =
      run_vramtrace({"check", dir.file("notrailer.jsonl"), "--max-peak-reserved", "1GiB", "--allow-incomplete"}, dir);
  CHECK(chk_allowed.exit_code == 0);
  CHECK(chk_allowed.out.find("warning: " + dir.file("notrailer.jsonl") + " did not finish (no trailer") !=
        std::string::npos);
  RunResult chk_json =
      run_vramtrace({"check", dir.file("notrailer.jsonl"), "--max-peak-reserved", "1GiB", "--format", "json"}, dir);
  CHECK(chk_json.exit_code == 1);
  const auto cj = nlohmann::json::parse(chk_json.out);
  CHECK(cj["verdict"] == "fail");
  REQUIRE(cj["incomplete_traces"].size() == 1);
  CHECK(cj["incomplete_traces"][0]["reason"].get<std::string>().find("no trailer") == 0);
  RunResult chk_intact = run_vramtrace({"check", plain_path, "--max-peak-reserved", "1GiB"}, dir);
  CHECK(chk_intact.out.find("warning:") == std::string::npos);
  // The NUL padding hides nothing: the same figures as the intact file, which stays complete.
  RunResult intact = run_vramtrace({"summary", plain_path}, dir);
  RunResult padded = run_vramtrace({"summary", dir.file("nul.jsonl")}, dir);
  CHECK(padded.out.find("ends abruptly") == std::string::npos);
  CHECK(padded.out.find("Recorded by the traced allocator") != std::string::npos);
  auto figures = [](const std::string& out) {  // from after the file name to the notes
    const std::size_t from = out.find('\n');
    return out.substr(from, out.find("\nNotes:") - from);
  };
  CHECK(figures(intact.out) == figures(padded.out));
}

TEST_CASE("run reports a command killed by a signal as 128 + signal", "[run]") {
  ScratchDir dir;
  RunResult r = run_vramtrace({"run", "-o", dir.file("k.%p.jsonl"), "--", TRACE_CHILD_PATH, "die-after", "300"}, dir);
  INFO(r.err);
  CHECK(r.exit_code == 128 + SIGKILL);
  CHECK(r.err.find("killed by signal 9") != std::string::npos);
  // The trace has no trailer: peaks come from replaying its events.
  CHECK(r.err.find("incomplete") != std::string::npos);
  CHECK(r.err.find("peak allocated 3.00 MiB") != std::string::npos);
}

TEST_CASE("run forwards SIGTERM to the command", "[run]") {
  ScratchDir dir;
  auto t0 = std::chrono::steady_clock::now();
  pid_t pid = spawn_vramtrace({"run", "-o", dir.file("s.%p.jsonl"), "--", "/bin/sh", "-c", "sleep 30"}, {},
                              dir.file("run.err"));
  // Sent once the command runs (its trace file exists: vramtrace installed its forwarding before
  // the fork), since a start under a sanitizer on a loaded machine can take seconds.
  const std::filesystem::path root = std::filesystem::path(dir.file("s.jsonl")).parent_path();
  auto started = [&root] {
    for (const auto& e : std::filesystem::directory_iterator(root))
      if (e.path().filename().string().rfind("s.", 0) == 0) return true;
    return false;
  };
  for (int i = 0; i < 200 && !started(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  kill(pid, SIGTERM);
  int status = 0;
  waitpid(pid, &status, 0);
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  INFO(test::read_file(dir.file("run.err")));
  REQUIRE(WIFEXITED(status));  // vramtrace itself survives and reports
  CHECK(WEXITSTATUS(status) == 128 + SIGTERM);
  CHECK(seconds < 20);
}

TEST_CASE("run sets the preload and settings variables", "[run]") {
  ScratchDir dir;
  const std::string check =
      "test \"$PYTORCH_NO_CUDA_MEMORY_CACHING\" = 1 || exit 11; "
      "test \"$VRAMTRACE_CONF\" = 'max_split_size_mb:128,limit:1.5GiB' || exit 12; "
      "case \"$VRAMTRACE_OUTPUT\" in */e.%p.jsonl) ;; *) exit 13;; esac; "
      "case \"$LD_PRELOAD\" in *vramtrace_test_preload*:/keep/me.so) exit 0;; esac; exit 14";
  RunResult r = run_vramtrace({"run", "--tensors", "--conf", "max_split_size_mb:128", "--limit", "1.5GiB", "-o",
                               dir.file("e.%p.jsonl"), "--", "/bin/sh", "-c", check},
                              dir, {{"LD_PRELOAD", "/keep/me.so"}});
  INFO(r.err);
  CHECK(r.exit_code == 0);
  CHECK(r.err.find("PYTORCH_NO_CUDA_MEMORY_CACHING=1") != std::string::npos);
}

TEST_CASE("run gives the program an absolute trace name, whatever directory it moves to", "[run]") {
  ScratchDir dir;
  RunResult r = run_vramtrace({"run", "-o", "relative.%p.jsonl", "--", "/bin/sh", "-c",
                               "case \"$VRAMTRACE_OUTPUT\" in /*/relative.%p.jsonl) exit 0;; esac; exit 15"},
                              dir);
  INFO(r.err);
  CHECK(r.exit_code == 0);
}

TEST_CASE("run refuses what it cannot do with exit code 2 or 127", "[run]") {
  ScratchDir dir;
  RunResult no_lib = run_vramtrace({"run", "--", "/bin/true"}, dir, {{"VRAMTRACE_LIB", dir.file("missing.so")}});
  CHECK(no_lib.exit_code == 2);
  CHECK(no_lib.err.find("cannot find libvramtrace.so") != std::string::npos);
  // What the dynamic loader would only warn about, the program then running untraced: a file that
  // is no shared library, and a path LD_PRELOAD cannot carry (it splits at spaces and colons).
  for (const std::string& bad : {std::string("/etc/passwd"), dir.path()}) {
    RunResult not_elf = run_vramtrace({"run", "--", "/bin/true"}, dir, {{"VRAMTRACE_LIB", bad}});
    INFO(bad << ": " << not_elf.err);
    CHECK(not_elf.exit_code == 2);
    CHECK(not_elf.err.find("is not a shared library") != std::string::npos);
  }
  const std::string spaced = dir.file("with space");
  REQUIRE(::mkdir(spaced.c_str(), 0700) == 0);
  REQUIRE(::symlink(TEST_PRELOAD_LIB, (spaced + "/lib.so").c_str()) == 0);
  RunResult space = run_vramtrace({"run", "--", "/bin/true"}, dir, {{"VRAMTRACE_LIB", spaced + "/lib.so"}});
  CHECK(space.exit_code == 2);
  CHECK(space.err.find("holds a space or ':'") != std::string::npos);
  RunResult bad_limit = run_vramtrace({"run", "--limit", "lots", "--", "/bin/true"}, dir);
  CHECK(bad_limit.exit_code == 2);
  CHECK(bad_limit.err.find("vramtrace run: --limit: 'lots' is neither a size") != std::string::npos);
  RunResult bad_conf = run_vramtrace({"run", "--conf", "max_split_size_mb:1", "--", "/bin/true"}, dir);
  CHECK(bad_conf.exit_code == 2);
  CHECK(bad_conf.err.find("max_split_size_mb") != std::string::npos);
  RunResult no_cmd = run_vramtrace({"run", "-o", dir.file("n.%p.jsonl"), "--", dir.file("no-such-program")}, dir);
  CHECK(no_cmd.exit_code == 127);
  CHECK(no_cmd.err.find("cannot run") != std::string::npos);
  // An empty value (an unset shell variable) is refused, never taken as "no cap".
  RunResult empty_limit = run_vramtrace({"run", "--limit", "", "--", "/bin/true"}, dir);
  CHECK(empty_limit.exit_code == 2);
  CHECK(empty_limit.err.find("--limit: an empty value") != std::string::npos);
  // One cap, not two that silently replace each other.
  RunResult both = run_vramtrace({"run", "--limit", "1GiB", "--conf", "limit:[0:2GiB]", "--", "/bin/true"}, dir);
  CHECK(both.exit_code == 2);
  CHECK(both.err.find("give the cap once") != std::string::npos);
  RunResult empty_conf = run_vramtrace({"run", "--conf", "", "--", "/bin/true"}, dir);
  CHECK(empty_conf.exit_code == 2);
  CHECK(empty_conf.err.find("--conf: an empty value") != std::string::npos);
  RunResult to_dir = run_vramtrace({"run", "-o", dir.path(), "--", "/bin/true"}, dir);
  CHECK(to_dir.exit_code == 2);
  CHECK(to_dir.err.find("is a directory; give a file name in it") != std::string::npos);
  RunResult gz = run_vramtrace({"run", "-o", dir.file("t.%p.jsonl.gz"), "--", "/bin/true"}, dir);
  CHECK(gz.exit_code == 2);
  CHECK(gz.err.find("plain or zstd-compressed") != std::string::npos);
  for (const char* conf : {"limit:[0:64MiB,*:1GiB,*:2GiB]", "limit:[0:1GiB,]", "limit:1GiB]"}) {
    RunResult bad = run_vramtrace({"run", "--conf", conf, "--", "/bin/true"}, dir);
    INFO(conf << ": " << bad.err);
    CHECK(bad.exit_code == 2);
    CHECK(bad.err.find("setting 'limit'") != std::string::npos);
  }
}

TEST_CASE("reports refuse an empty or zero size option with exit code 2", "[run][options]") {
  ScratchDir dir;
  RunResult r = run_vramtrace({"run", "-o", dir.file("t.%p.jsonl"), "--", TRACE_CHILD_PATH, "exit", "0"}, dir);
  REQUIRE(r.exit_code == 0);
  const std::string trace = only_trace(dir, "t.");
  const std::vector<std::vector<std::string>> bad = {
      {"oom", trace, "--capacity", ""},
      {"oom", trace, "--capacity", "0"},
      {"oom", trace, "--capacity", "junk"},
      {"replay", trace, "--capacity", ""},
      {"check", trace, "--max-peak-reserved", ""},
      {"check", trace, "--max-ooms", ""},
      {"check", trace, "--max-ooms", "-1"},
  };
  for (const auto& args : bad) {
    RunResult b = run_vramtrace(args, dir);
    INFO(args[0] << " " << args[2] << " '" << args[3] << "': " << b.err);
    CHECK(b.exit_code == 2);
    CHECK_FALSE(b.err.empty());
  }
  RunResult ok = run_vramtrace({"oom", trace, "--capacity", "80GiB"}, dir);
  INFO(ok.err);
  CHECK(ok.exit_code == 0);
}

TEST_CASE("the Python helper's marks reach the trace", "[run][python]") {
  const std::string python = python3_executable();
  if (python.empty()) {
    WARN("python3 not found: the mark helper is not tested");
    return;
  }
  ScratchDir dir;
  const std::string code = std::string("import sys; sys.path.insert(0, '") + VRAMTRACE_SCRIPTS_DIR +
                           "'); import vramtrace_mark as vt; assert vt.enabled(); vt.mark('hello'); "
                           "exec('with vt.step(7):\\n    vt.mark(b\\'inside\\')')";
  RunResult r = run_vramtrace({"run", "-o", dir.file("py.%p.jsonl"), "--", python, "-c", code}, dir);
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  test::ReadBack rb = test::read_all(only_trace(dir, "py."));
  std::vector<std::string> marks;
  for (std::size_t i = 0; i < rb.records.size(); ++i)
    if (rb.records[i].action == Action::mark) marks.push_back(rb.mark_names[i]);
  CHECK(marks == std::vector<std::string>{"hello", "step 7", "inside", "step 7 end"});

  // Without the library the helper does nothing and says so.
  std::string off = python + " -c \"import sys; sys.path.insert(0, '" + VRAMTRACE_SCRIPTS_DIR +
                    "'); import vramtrace_mark as vt; vt.mark('x'); sys.exit(0 if not vt.enabled() else 1)\"";
  CHECK(std::system(off.c_str()) == 0);
}

TEST_CASE("run records PyTorch's tensor level beside the trace and leaves its allocator in charge", "[run][python]") {
  const std::string python = python3_executable();
  if (python.empty()) {
    WARN("python3 not found: the tensor level is not tested");
    return;
  }
  const std::string fake_torch = std::string(VRAMTRACE_TEST_DATA_DIR) + "/../python/fake_torch";
  // The program checks what it was started with: the hook first on PYTHONPATH, the user's
  // entries kept after it, and its own allocator left on; then it allocates through the fake.
  const std::string code =
      "import os, sys; p = os.environ['PYTHONPATH'].split(':'); "
      "assert p[0].endswith('/share/vramtrace/python/vramtrace/_boot'), p; assert p[1] == '" +
      fake_torch +
      "', p; "
      "assert 'PYTORCH_NO_CUDA_MEMORY_CACHING' not in os.environ; "
      "import torch; x = torch.empty(1 << 20, device='cuda'); print(os.getpid())";
  ScratchDir dir;
  RunResult r =
      run_vramtrace({"run", "-o", dir.file("tl.jsonl"), "--", python, "-c", code}, dir, {{"PYTHONPATH", fake_torch}});
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  const std::string pid = r.out.substr(0, r.out.find('\n'));
  // The trace's name has no %p: the snapshot's gets the pid, so that processes never share one.
  const std::string pickle = dir.file("tl." + pid + ".torch.pickle");
  CHECK(std::filesystem::exists(pickle));
  std::ifstream sidecar(pickle + ".json");
  REQUIRE(sidecar.good());
  nlohmann::json j = nlohmann::json::parse(sidecar);
  CHECK(j["format"] == "vramtrace-torch-sidecar");
  CHECK(std::to_string(j["pid"].get<long long>()) == pid);
  CHECK(r.err.find("PyTorch's tensor level") != std::string::npos);
  CHECK(r.err.find("vramtrace summary " + pickle) != std::string::npos);

  // A name with %p already has the pid: the snapshot's name gets no second one ("%%p" is no %p).
  for (const auto& [pattern, expect] : {std::pair<std::string, std::string>{"p.%p.jsonl", "p.PID.torch.pickle"},
                                        {"q%%p.jsonl.zst", "q%p.PID.torch.pickle"}}) {
    ScratchDir pd;
    RunResult q =
        run_vramtrace({"run", "-o", pd.file(pattern), "--", python, "-c", code}, pd, {{"PYTHONPATH", fake_torch}});
    INFO(pattern << ": " << q.err);
    REQUIRE(q.exit_code == 0);
    std::string want = expect;
    want.replace(want.find("PID"), 3, q.out.substr(0, q.out.find('\n')));
    CHECK(std::filesystem::exists(pd.file(want)));
  }

  // --no-torch and --tensors (PyTorch's allocator off: the shim sees each tensor) record none.
  for (const char* flag : {"--no-torch", "--tensors"}) {
    ScratchDir off;
    RunResult q = run_vramtrace({"run", flag, "-o", off.file("n.%p.jsonl"), "--", python, "-c",
                                 "import os; assert 'VRAMTRACE_TORCH_OUT' not in os.environ; import torch; "
                                 "torch.empty(8, device='cuda')"},
                                off, {{"PYTHONPATH", fake_torch}});
    INFO(flag << ": " << q.err);
    CHECK(q.exit_code == 0);
    for (const auto& f : test::files_in(off.path())) CHECK(f.find(".torch.pickle") == std::string::npos);
  }
}
