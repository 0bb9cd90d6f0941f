// A program that uses the trace writer as the shim does (pthread_atfork hooks included), for the
// tests that need separate processes: fork and exec families, and the failure cases whose stderr
// and exit status the tests inspect.
//
//   trace_child family PATTERN   parent + fork child + exec'd child, each writes its own file
//   trace_child leaf PATTERN     (exec'd by family) writes 200 events tagged 3
//   trace_child exit CODE        exits with CODE through exit() (atexit handlers run)
//   trace_child die-after MS     sleeps MS milliseconds, then SIGKILLs itself
//   trace_child work PATTERN N [FSIZE_BYTES]
//                                records N events while computing a checksum; prints
//                                "work=<checksum>" and exits 0 whatever happens to the trace
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "vramtrace/trace/writer.h"

using namespace vramtrace;
using namespace vramtrace::trace;

namespace {

TraceWriter* g_writer = nullptr;

void before_fork() { g_writer->before_fork(); }
void after_fork_parent() { g_writer->after_fork_parent(); }
void after_fork_child() { g_writer->after_fork_child(); }

TraceWriter& make_writer(const char* pattern) {
  TraceWriterOptions o;
  o.output_pattern = pattern;
  o.buffer_events = 256;
  o.header.tool_version = "trace_child";
  g_writer = new TraceWriter(o);  // lives until exit, as in the shim
  pthread_atfork(before_fork, after_fork_parent, after_fork_child);
  return *g_writer;
}

// Events carry who wrote them in the address: tag << 32 | index.
void record_tagged(TraceWriter& w, std::uint64_t tag, int count) {
  for (int i = 0; i < count; ++i) {
    Event e{};
    e.action = i % 2 ? Action::free_completed : Action::alloc;
    e.time_ns = TraceWriter::now_ns();
    e.addr = (tag << 32) | static_cast<std::uint64_t>(i);
    e.size_bytes = 512;
    e.block_bytes = 512;
    e.thread_id = static_cast<std::uint32_t>(getpid());
    w.record(e);
  }
}

int family(const char* pattern, const char* self) {
  TraceWriter& w = make_writer(pattern);
  if (!w.start()) return 3;
  record_tagged(w, 1, 1000);  // the ring is likely not drained yet at the fork: on purpose
  pid_t fork_child = fork();
  if (fork_child == 0) {
    record_tagged(w, 2, 500);
    w.close();
    _exit(0);
  }
  pid_t exec_child = fork();
  if (exec_child == 0) {
    execl(self, self, "leaf", pattern, static_cast<char*>(nullptr));
    _exit(127);
  }
  int status = 0;
  waitpid(fork_child, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) return 4;
  waitpid(exec_child, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) return 5;
  record_tagged(w, 1, 300);
  w.close();
  std::printf("parent=%d fork_child=%d exec_child=%d\n", getpid(), fork_child, exec_child);
  return 0;
}

int leaf(const char* pattern) {
  TraceWriter& w = make_writer(pattern);
  if (!w.start()) return 3;
  record_tagged(w, 3, 200);
  w.close();
  return 0;
}

int work(const char* pattern, long n, long fsize) {
  if (fsize > 0) {
    signal(SIGXFSZ, SIG_IGN);  // then write(2) fails with EFBIG, as on a full disk
    rlimit rl{static_cast<rlim_t>(fsize), static_cast<rlim_t>(fsize)};
    setrlimit(RLIMIT_FSIZE, &rl);
  }
  TraceWriter& w = make_writer(pattern);
  w.start();
  std::uint64_t checksum = 0;
  for (long i = 0; i < n; ++i) {
    checksum = checksum * 31 + static_cast<std::uint64_t>(i);
    Event e{};
    e.action = Action::alloc;
    e.time_ns = TraceWriter::now_ns();
    e.addr = 0x7f0000000000ull + static_cast<std::uint64_t>(i) * 512;
    e.size_bytes = static_cast<std::uint64_t>(i);
    e.block_bytes = (e.size_bytes + 511) / 512 * 512;  // rounded up, as an allocator does
    w.record(e);
    if (i % 1000 == 0) w.mark("step");
  }
  w.close();
  std::printf("work=%llu\n", static_cast<unsigned long long>(checksum));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc >= 3 && std::strcmp(argv[1], "exit") == 0) std::exit(std::atoi(argv[2]));
  if (argc >= 3 && std::strcmp(argv[1], "die-after") == 0) {
    usleep(static_cast<useconds_t>(std::atoi(argv[2])) * 1000);
    raise(SIGKILL);
  }
  if (argc >= 3 && std::strcmp(argv[1], "family") == 0) return family(argv[2], argv[0]);
  if (argc >= 3 && std::strcmp(argv[1], "leaf") == 0) return leaf(argv[2]);
  if (argc >= 4 && std::strcmp(argv[1], "work") == 0) {
    return work(argv[2], std::atol(argv[3]), argc >= 5 ? std::atol(argv[4]) : 0);
  }
  std::fprintf(stderr, "usage: trace_child family|leaf|work PATTERN [N [FSIZE]]\n");
  return 2;
}
