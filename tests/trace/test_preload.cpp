// A stand-in for libvramtrace.so in the `vramtrace run` tests: when loaded with VRAMTRACE_OUTPUT
// set it writes a trace with the real writer (a few segments and blocks on device 0, then the
// trailer at exit) and exports vramtrace_mark as the shim does. No CUDA involved. With
// TEST_PRELOAD_OOMS=retries it then writes what the shim records of PyTorch running out of memory:
// a failed allocation the program survives (it frees a block and asks again), then a request that
// fails twice (Note [one OOM per failed request]: 1 OOM, 2 retries).
#include <pthread.h>
#include <unistd.h>

#include <cstdlib>
#include <string_view>

#include "vramtrace/trace/writer.h"

using namespace vramtrace;
using namespace vramtrace::trace;

namespace {

TraceWriter* g_writer = nullptr;

void on_exit_close() {
  if (g_writer == nullptr) return;
  FlatStats stats = {{"allocated_bytes.all.peak", 3 * 1024 * 1024}, {"reserved_bytes.all.peak", 20 * 1024 * 1024}};
  g_writer->close({stats});
}

__attribute__((constructor)) void start_tracing() {
  if (std::getenv("VRAMTRACE_OUTPUT") == nullptr) return;
  TraceWriterOptions o;
  std::string error;
  TraceWriterOptions::from_environment(o, error);
  o.header.tool_version = "test-preload";
  o.header.devices.push_back({0, "Test GPU", 80ull << 30, ""});
  if (const char* conf = std::getenv("VRAMTRACE_CONF")) o.header.allocator_settings = conf;
  if (const char* nc = std::getenv("PYTORCH_NO_CUDA_MEMORY_CACHING"))
    o.header.settings.push_back({"PYTORCH_NO_CUDA_MEMORY_CACHING", nc});
  g_writer = new TraceWriter(o);
  pthread_atfork([] { g_writer->before_fork(); }, [] { g_writer->after_fork_parent(); },
                 [] { g_writer->after_fork_child(); });
  if (!g_writer->start()) return;
  Event e{};
  e.time_ns = TraceWriter::now_ns();
  e.thread_id = static_cast<std::uint32_t>(getpid());
  e.action = Action::segment_alloc;
  e.addr = 1ull << 32;
  e.size_bytes = e.block_bytes = 20 * 1024 * 1024;
  g_writer->record(e);
  for (int i = 0; i < 3; ++i) {
    e.action = Action::alloc;
    e.addr = (1ull << 32) + static_cast<std::uint64_t>(i) * (1 << 20);
    e.size_bytes = 1000000;
    e.block_bytes = 1 << 20;
    g_writer->record(e);
  }
  if (const char* ooms = std::getenv("TEST_PRELOAD_OOMS"); ooms && std::string_view(ooms) == "retries") {
    auto event = [&](Action a, std::uint64_t addr, std::uint64_t size) {
      e.time_ns = TraceWriter::now_ns();
      e.action = a;
      e.addr = addr;
      e.size_bytes = size;
      e.block_bytes = a == Action::oom ? size : 1 << 20;
      e.aux = a == Action::oom ? 1 << 20 : 0;  // the oom's free bytes
      g_writer->record(e);
    };
    const std::uint64_t last = (1ull << 32) + 2 * (1 << 20);
    event(Action::oom, 0, 1000000);  // survived: a block freed, the same request again
    event(Action::free_requested, last, 1000000);
    event(Action::free_completed, last, 1000000);
    event(Action::alloc, last, 1000000);
    event(Action::oom, 0, 3000000);  // the final request: twice, then the error
    event(Action::oom, 0, 3000000);
  }
  std::atexit(on_exit_close);
}

}  // namespace

extern "C" __attribute__((visibility("default"))) void vramtrace_mark(const char* name) {
  if (g_writer != nullptr && name != nullptr) g_writer->mark(std::string_view(name));
}
