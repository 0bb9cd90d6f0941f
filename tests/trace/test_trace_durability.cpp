// The writer under stress and failure: SIGKILL, fork and exec, 64 threads, unwritable or full
// disks, existing files and links.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <fstream>
#include <map>
#include <set>
#include <thread>

#include "trace_test_util.h"

using namespace vramtrace;
using namespace vramtrace::trace;
using vramtrace::test::ReadBack;
using vramtrace::test::ScratchDir;

namespace {

struct ChildResult {
  int exit_code = -1;
  std::string out;
  std::string err;
};

// Runs trace_child with `args`, capturing stdout and stderr.
ChildResult run_child(const std::vector<std::string>& args, const ScratchDir& io) {
  std::string out_path = io.file("child.out"), err_path = io.file("child.err");
  pid_t pid = fork();
  if (pid == 0) {
    int o = ::open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    int e = ::open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    dup2(o, 1);
    dup2(e, 2);
    std::vector<char*> argv;
    std::string exe = TRACE_CHILD_PATH;
    argv.push_back(exe.data());
    std::vector<std::string> copy = args;
    for (auto& a : copy) argv.push_back(a.data());
    argv.push_back(nullptr);
    execv(exe.c_str(), argv.data());
    _exit(127);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  ChildResult r;
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.out = test::read_file(out_path);
  r.err = test::read_file(err_path);
  return r;
}

std::string expected_work(long n) {
  std::uint64_t checksum = 0;
  for (long i = 0; i < n; ++i) checksum = checksum * 31 + static_cast<std::uint64_t>(i);
  return "work=" + std::to_string(checksum) + "\n";
}

// One stderr line, starting "vramtrace: ", mentioning `what`, ending with the promise to go on.
void check_one_message(const std::string& err, const std::string& what) {
  INFO("stderr: " << err);
  CHECK(std::count(err.begin(), err.end(), '\n') == 1);
  CHECK(err.rfind("vramtrace: ", 0) == 0);
  CHECK(err.find(what) != std::string::npos);
  CHECK(err.find("tracing is off, the program continues") != std::string::npos);
}

bool mount_tmpfs(const std::string& dir, const char* options, unsigned long flags = 0) {
  return ::mount("tmpfs", dir.c_str(), "tmpfs", flags, options) == 0;
}

}  // namespace

TEST_CASE("SIGKILL leaves every event older than the flush interval on disk", "[trace][durability]") {
  ScratchDir dir;
  constexpr std::size_t kBuckets = 10000;  // 1 ms each
  // Per millisecond since `start`, the last event id whose record() had returned by then.
  auto* done_by_ms = static_cast<std::atomic<std::uint64_t>*>(
      mmap(nullptr, kBuckets * sizeof(std::uint64_t), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0));
  REQUIRE(done_by_ms != MAP_FAILED);
  const std::uint64_t start = TraceWriter::now_ns();
  const std::string path = dir.file("killed.jsonl");
  pid_t pid = fork();
  if (pid == 0) {
    TraceWriterOptions o;
    o.output_pattern = path;
    o.flush_interval_ms = 100;
    TraceWriter w(o);
    if (!w.start()) _exit(3);
    for (std::uint64_t id = 1;; ++id) {
      Event e{};
      e.action = id % 2 ? Action::alloc : Action::free_completed;
      e.time_ns = TraceWriter::now_ns();
      e.addr = id;
      e.size_bytes = id % 5000;
      e.block_bytes = (e.size_bytes + 511) / 512 * 512;  // rounded up, as an allocator does
      e.thread_id = 1;
      w.record(e);
      std::uint64_t ms = (TraceWriter::now_ns() - start) / 1'000'000;
      if (ms < kBuckets) done_by_ms[ms].store(id, std::memory_order_relaxed);
    }
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(700));
  const std::uint64_t kill_time = TraceWriter::now_ns();
  kill(pid, SIGKILL);
  int status = 0;
  waitpid(pid, &status, 0);
  REQUIRE(WIFSIGNALED(status));

  // Every event whose record() returned before kill_time - 100 ms must be in the file.
  std::uint64_t required = 0;
  for (std::size_t b = 0; b < kBuckets; ++b) {
    if (start + (b + 1) * 1'000'000 > kill_time - 100'000'000) break;
    required = std::max<std::uint64_t>(required, done_by_ms[b].load());
  }
  munmap(done_by_ms, kBuckets * sizeof(std::uint64_t));
  REQUIRE(required > 1000);

  ReadBack rb = test::read_all(path);  // must not throw: only the last line may be cut
  CHECK(rb.incomplete);
  CHECK_FALSE(rb.trailer.present);
  REQUIRE(!rb.records.empty());
  bool contiguous = true;
  for (std::size_t i = 0; i < rb.records.size(); ++i) contiguous = contiguous && rb.records[i].addr == i + 1;
  CHECK(contiguous);
  INFO("events on disk " << rb.records.size() << ", needed at least " << required);
  CHECK(rb.records.size() >= required);
}

TEST_CASE("64 threads recording at once lose and duplicate nothing", "[trace][threads]") {
  ScratchDir dir;
  TraceWriterOptions o;
  o.output_pattern = dir.file("threads.jsonl");
  o.buffer_events = 1024;  // small: threads wait for the writer often
  TraceWriter w(o);
  REQUIRE(w.start());
  constexpr int kThreads = 64, kPerThread = 2000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&w, t] {
      for (int i = 0; i < kPerThread; ++i) {
        Event e{};
        e.action = i % 2 ? Action::free_requested : Action::alloc;
        e.time_ns = TraceWriter::now_ns();
        e.addr = (static_cast<std::uint64_t>(t) << 32) | static_cast<std::uint64_t>(i);
        e.size_bytes = 4096;
        e.block_bytes = 4096;
        e.thread_id = static_cast<std::uint32_t>(t + 1);
        w.record(e);
      }
    });
  }
  for (auto& th : threads) th.join();
  w.close();
  ReadBack rb = test::read_all(w.path());
  CHECK_FALSE(rb.incomplete);
  REQUIRE(rb.records.size() == kThreads * kPerThread);
  CHECK(rb.trailer.events == kThreads * kPerThread);
  std::vector<int> next(kThreads, 0);
  bool in_order = true;
  for (std::size_t k = 0; k < rb.records.size(); ++k) {
    int t = static_cast<int>(rb.records[k].addr >> 32);
    int i = static_cast<int>(rb.records[k].addr & 0xffffffff);
    REQUIRE(t < kThreads);
    REQUIRE(rb.threads[k] == static_cast<std::uint32_t>(t + 1));
    in_order = in_order && i == next[t];  // each thread's events once, in its order
    next[t] = i + 1;
  }
  CHECK(in_order);
  for (int t = 0; t < kThreads; ++t) CHECK(next[t] == kPerThread);
}

TEST_CASE("drop mode counts what a full buffer loses", "[trace][threads]") {
  ScratchDir dir;
  TraceWriterOptions o;
  o.output_pattern = dir.file("drop.jsonl");
  o.buffer_events = 64;
  o.drop_when_full = true;
  TraceWriter w(o);
  REQUIRE(w.start());
  constexpr int kEvents = 200000;
  for (int i = 0; i < kEvents; ++i) {
    Event e{};
    e.time_ns = TraceWriter::now_ns();
    e.addr = static_cast<std::uint64_t>(i) + 1;
    w.record(e);
  }
  w.close();
  ReadBack rb = test::read_all(w.path());
  CHECK(rb.records.size() + rb.trailer.dropped == kEvents);
  CHECK(rb.trailer.dropped == w.dropped());
  // What was kept is in order.
  bool increasing = true;
  for (std::size_t i = 1; i < rb.records.size(); ++i)
    increasing = increasing && rb.records[i].addr > rb.records[i - 1].addr;
  CHECK(increasing);
}

TEST_CASE("fork and exec give one complete file per process", "[trace][fork]") {
  ScratchDir dir;
  ChildResult r = run_child({"family", dir.file("fam.%p.jsonl")}, dir);
  INFO("stdout: " << r.out << " stderr: " << r.err);
  REQUIRE(r.exit_code == 0);
  int parent = 0, fork_child = 0, exec_child = 0;
  REQUIRE(std::sscanf(r.out.c_str(), "parent=%d fork_child=%d exec_child=%d", &parent, &fork_child, &exec_child) == 3);
  CHECK(r.err.empty());

  struct Expect {
    int pid;
    std::uint64_t tag;
    std::size_t events;
  };
  for (Expect x : {Expect{parent, 1, 1300}, Expect{fork_child, 2, 500}, Expect{exec_child, 3, 200}}) {
    std::string path = dir.file("fam." + std::to_string(x.pid) + ".jsonl");
    INFO(path);
    ReadBack rb = test::read_all(path);
    CHECK_FALSE(rb.incomplete);
    CHECK(rb.trailer.present);
    CHECK(rb.details.pid == x.pid);
    if (x.pid != parent) CHECK(rb.details.ppid == parent);
    REQUIRE(rb.records.size() == x.events);
    bool all_own = true;
    for (const auto& rec : rb.records) all_own = all_own && (rec.addr >> 32) == x.tag;
    CHECK(all_own);  // no parent event leaked into a child's file, nor the reverse
  }
  // Exactly those three trace files (plus the captured output).
  int traces = 0;
  for (const auto& f : test::files_in(dir.path())) traces += f.find("fam.") != std::string::npos;
  CHECK(traces == 3);
}

TEST_CASE("a fork child without %p in the name gets -<pid> added", "[trace][fork]") {
  ScratchDir dir;
  TraceWriterOptions o;
  o.output_pattern = dir.file("nopid.jsonl");
  TraceWriter w(o);
  REQUIRE(w.start());
  Event e{};
  e.addr = 1;
  e.time_ns = TraceWriter::now_ns();
  w.record(e);
  w.before_fork();
  pid_t pid = fork();
  if (pid == 0) {
    w.after_fork_child();
    Event c{};
    c.addr = 2;
    c.time_ns = TraceWriter::now_ns();
    w.record(c);
    w.close();
    _exit(w.path() == dir.file("nopid-" + std::to_string(getpid()) + ".jsonl") ? 0 : 9);
  }
  w.after_fork_parent();
  int status = 0;
  waitpid(pid, &status, 0);
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  w.close();
  ReadBack parent = test::read_all(dir.file("nopid.jsonl"));
  ReadBack child = test::read_all(dir.file("nopid-" + std::to_string(pid) + ".jsonl"));
  REQUIRE(parent.records.size() == 1);
  REQUIRE(child.records.size() == 1);
  CHECK(parent.records[0].addr == 1);
  CHECK(child.records[0].addr == 2);
  CHECK(child.details.ppid == getpid());
}

TEST_CASE("an existing file or link is never overwritten: one message, work untouched", "[trace][errors]") {
  ScratchDir dir;
  std::ofstream(dir.file("exists.jsonl")) << "keep me\n";
  ChildResult r = run_child({"work", dir.file("exists.jsonl"), "20000"}, dir);
  CHECK(r.exit_code == 0);
  CHECK(r.out == expected_work(20000));
  check_one_message(r.err, "File exists");
  CHECK(test::read_file(dir.file("exists.jsonl")) == "keep me\n");

  REQUIRE(symlink(dir.file("target.jsonl").c_str(), dir.file("link.jsonl").c_str()) == 0);
  ChildResult l = run_child({"work", dir.file("link.jsonl"), "20000"}, dir);
  CHECK(l.exit_code == 0);
  CHECK(l.out == expected_work(20000));
  check_one_message(l.err, "link.jsonl");
  CHECK_FALSE(std::filesystem::exists(dir.file("target.jsonl")));  // the link was not followed
}

TEST_CASE("an unwritable directory: one message, work untouched", "[trace][errors]") {
  ScratchDir dir;
  std::string ro = dir.file("ro");
  std::filesystem::create_directory(ro);
  std::string target;
  bool mounted = false;
  if (geteuid() != 0) {
    chmod(ro.c_str(), 0555);
    target = ro + "/t.jsonl";
  } else if (mount_tmpfs(ro, "size=64k", MS_RDONLY)) {
    mounted = true;
    target = ro + "/t.jsonl";
  } else {
    // root without mount rights: permissions do not stop root, a file in place of the directory does
    std::ofstream(dir.file("notadir")) << "x";
    target = dir.file("notadir") + "/t.jsonl";
  }
  ChildResult r = run_child({"work", target, "20000"}, dir);
  if (mounted) umount(ro.c_str());
  CHECK(r.exit_code == 0);
  CHECK(r.out == expected_work(20000));
  check_one_message(r.err, "cannot create the trace file");
}

TEST_CASE("a full disk: one message, work untouched, the trace readable up to the failure", "[trace][errors]") {
  ScratchDir dir;
  constexpr long kEvents = 200000;  // ~16 MB of trace
  SECTION("file size limit (EFBIG, as ENOSPC)") {
    ChildResult r = run_child({"work", dir.file("fsize.jsonl"), std::to_string(kEvents), "65536"}, dir);
    CHECK(r.exit_code == 0);
    CHECK(r.out == expected_work(kEvents));
    check_one_message(r.err, "File too large");
    ReadBack rb = test::read_all(dir.file("fsize.jsonl"));
    CHECK(rb.incomplete);
    CHECK(rb.records.size() > 100);
  }
  SECTION("tiny tmpfs (ENOSPC)") {
    std::string mnt = dir.file("tiny");
    std::filesystem::create_directory(mnt);
    if (!mount_tmpfs(mnt, "size=64k")) {
      WARN("cannot mount a tmpfs here (not root?): the file size limit section covers the full disk");
      return;
    }
    ChildResult r = run_child({"work", mnt + "/t.jsonl", std::to_string(kEvents)}, dir);
    CHECK(r.exit_code == 0);
    CHECK(r.out == expected_work(kEvents));
    check_one_message(r.err, "No space left on device");
    ReadBack rb = test::read_all(mnt + "/t.jsonl");
    CHECK(rb.incomplete);
    CHECK(rb.records.size() > 100);
    umount(mnt.c_str());
  }
}

TEST_CASE("a zstd trace of a killed process decodes up to its last flush", "[trace][durability]") {
  ScratchDir dir;
  const std::string path = dir.file("killed.jsonl.zst");
  pid_t pid = fork();
  if (pid == 0) {
    TraceWriterOptions o;
    o.output_pattern = path;
    TraceWriter w(o);
    if (!w.start()) _exit(3);
    for (std::uint64_t id = 1;; ++id) {
      Event e{};
      e.time_ns = TraceWriter::now_ns();
      e.addr = id;
      e.size_bytes = 512;
      w.record(e);
      if (id % 1000 == 0) usleep(1000);  // about a million events a second at most
    }
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(400));
  kill(pid, SIGKILL);
  int status = 0;
  waitpid(pid, &status, 0);
  REQUIRE(WIFSIGNALED(status));
  ReadBack rb = test::read_all(path);  // an unfinished zstd frame is an incomplete trace, not an error
  CHECK(rb.incomplete);
  REQUIRE(rb.records.size() > 1000);
  bool contiguous = true;
  for (std::size_t i = 0; i < rb.records.size(); ++i) contiguous = contiguous && rb.records[i].addr == i + 1;
  CHECK(contiguous);
}
