#include "sink.h"

#include <time.h>

#include <cstdlib>
#include <mutex>
#include <string>
#include <unordered_map>

#include "config.h"
#include "streams.h"

namespace vramtrace::shim {

EventCounts g_event_counts{};

namespace {

/// Counts every event by action and entry point, then hands it to the writer (if any).
class CountingSink final : public EventSink {
 public:
  explicit CountingSink(EventSink* next) : next_(next) {}
  void record(const Event& e) noexcept override {
    count(e);
    if (next_) next_->record(e);
  }
  void record_oom(const Event& e, const Snapshot& state) noexcept override {
    count(e);
    if (next_) next_->record_oom(e, state);
  }
  EventSink* next() const noexcept { return next_; }

 private:
  static void count(const Event& e) noexcept {
    g_event_counts.by_action[static_cast<unsigned>(e.action) & 15].fetch_add(1, std::memory_order_relaxed);
    g_event_counts.by_entry[e.entry_point & 255].fetch_add(1, std::memory_order_relaxed);
  }
  EventSink* next_;
};

CountingSink* make_sink() noexcept {
  EventSink* writer = make_trace_sink();
  return new (std::nothrow) CountingSink(writer);
}

CountingSink* counting_sink() noexcept {
  static CountingSink* s = make_sink();  // never destroyed: events may arrive during exit
  return s;
}

std::uint64_t now_ns() noexcept {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<std::uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<std::uint64_t>(ts.tv_nsec);
}

}  // namespace

EventSink* sink() noexcept {
  if (!enabled()) return nullptr;
  return counting_sink();
}

// ---------------------------------------------------------------------------------------------
// MERGE POINT (lead): create the trace writer here, e.g.
//   if (const char* out = std::getenv("VRAMTRACE_OUTPUT"); out && *out)
//     return vramtrace::trace::TraceWriter::create(out);   // whatever its factory is named
// Until then the shim runs without a trace file (events are still counted).
EventSink* make_trace_sink() noexcept { return nullptr; }

void flush_trace_sink() noexcept {
  // MERGE POINT (lead): forward to the writer's flush once it exists.
}

void sink_after_fork_child() noexcept {
  for (auto& c : g_event_counts.by_action) c.store(0, std::memory_order_relaxed);
  for (auto& c : g_event_counts.by_entry) c.store(0, std::memory_order_relaxed);
  // MERGE POINT (lead): the writer reopens its output under the child's pid (if it does not use
  // its own pthread_atfork handler).
}

void emit(Action action, std::uint64_t addr, std::uint64_t size_bytes, std::uint64_t stream,
          std::uint16_t entry, PassKind kind, int device) noexcept {
  EventSink* s = sink();
  if (!s) return;
  Event e;
  e.time_ns = now_ns();
  e.addr = addr;
  e.size_bytes = size_bytes;
  e.block_bytes = size_bytes;
  e.stream = stream;
  e.aux = static_cast<std::uint64_t>(kind);
  e.device = device;
  e.thread_id = this_thread_id();
  e.action = action;
  e.entry_point = entry;
  s->record(e);
}

void emit_mark(std::uint32_t name_id) noexcept {
  EventSink* s = sink();
  if (!s) return;
  Event e;
  e.time_ns = now_ns();
  e.aux = name_id;
  e.thread_id = this_thread_id();
  e.action = Action::mark;
  s->record(e);
}

// Local string table until vramtrace::trace::intern_mark exists (MERGE POINT: forward to it).
std::uint32_t intern_mark_name(const char* name) noexcept {
  static std::mutex mu;
  static auto* table = new std::unordered_map<std::string, std::uint32_t>;
  try {
    std::lock_guard<std::mutex> lock(mu);
    auto [it, inserted] = table->try_emplace(name ? name : "", static_cast<std::uint32_t>(table->size() + 1));
    return it->second;
  } catch (...) {
    return 0;
  }
}

}  // namespace vramtrace::shim
