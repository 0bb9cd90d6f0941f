#include "base/sink.h"

#include <cstdlib>
#include <mutex>
#include <string>
#include <unordered_map>

#include <utility>
#include <vector>

#include "base/config.h"
#include "base/entry.h"
#include "base/hooks.h"
#include "base/log.h"
#include "base/stacks.h"
#include "base/streams.h"
#include "vramtrace.h"
#include "vramtrace/trace/writer.h"

namespace vramtrace::shim {

EventCounts g_event_counts{};

namespace {

/// Counts every event by action and entry point, then hands it to the writer (if any), with the
/// call stack of the hook call in progress on an allocator event that carries one (captured by
/// the hook before the allocator took its lock: Note [stack capture] in base/stacks.h).
class CountingSink final : public EventSink {
 public:
  explicit CountingSink(EventSink* next) : next_(next) {}
  void record(const Event& e) noexcept override {
    count(e);
    if (!next_) return;
    if (const std::uint32_t stack = needs_stack(e)) {
      Event stamped = e;
      stamped.stack_id = stack;
      next_->record(stamped);
      return;
    }
    next_->record(e);
  }
  void record_oom(const Event& e, const Snapshot& state) noexcept override {
    count(e);
    if (!next_) return;
    Event stamped = e;
    if (const std::uint32_t stack = needs_stack(e)) stamped.stack_id = stack;
    next_->record_oom(stamped, state);
  }
  EventSink* next() const noexcept { return next_; }

 private:
  // The stack to stamp on `e`: the call's, for an allocation event without one; 0 otherwise.
  static std::uint32_t needs_stack(const Event& e) noexcept {
    return e.stack_id == 0 && carries_stack(e.action) ? current_call_stack() : 0;
  }
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

}  // namespace

EventSink* sink() noexcept {
  if (!enabled()) return nullptr;
  return counting_sink();
}

// ---------------------------------------------------------------------------------------------
// The trace writer (trace/include/vramtrace/trace/writer.h): started lazily when a trace file is
// asked for; without one, events are still counted for the stats file.
namespace {
trace::TraceWriter* g_writer = nullptr;  // never destroyed: events may arrive during exit

// The writer's failure line goes through the shim's logger (at exit: its raw path).
void report_writer_failure(std::string_view message) noexcept { log_line(LogLevel::error, "{}", message); }

trace::HeaderInfo base_header() {
  trace::HeaderInfo h;
  h.tool_version = vramtrace_version();
  h.allocator_settings = config().settings.to_string();
  h.settings.emplace_back("reuse", reuse_policy_name(config().settings.reuse));
  // Which call stacks the events carry (base/stacks.h): a trace without stack records then says
  // whether it is because they were off.
  h.settings.emplace_back("stacks", config().stacks.name());
  h.settings.emplace_back("stack_depth", std::to_string(config().stacks.depth));
  // The memory cap (memory_cap.h) in the list form of `limit`, in bytes; absent without one. The
  // devices' total_bytes are already the capped totals.
  if (const DeviceLimits& l = config().limits; l.any()) {
    std::string v;
    for (const auto& [d, b] : l.by_device) v += (v.empty() ? "" : ",") + std::to_string(d) + ":" + std::to_string(b);
    if (l.others_bytes != 0) v += (v.empty() ? "" : ",") + std::string("*:") + std::to_string(l.others_bytes);
    h.settings.emplace_back("limit", "[" + v + "]");
  }
  // Whether PyTorch's caching allocator was switched off in this process (`vramtrace run
  // --tensors`): the reports read a trace of a PyTorch program as its tensors then, and as
  // PyTorch's segments otherwise (reporter/model/allocation_level.h). Absent when unset.
  if (const char* v = std::getenv("PYTORCH_NO_CUDA_MEMORY_CACHING"); v != nullptr)
    h.settings.emplace_back("pytorch_no_cuda_memory_caching", v);
  for (std::size_t i = 0; i < kHookCount; ++i) h.entry_points.emplace_back(hook_name(static_cast<std::uint16_t>(i)));
  return h;
}
}  // namespace

EventSink* make_trace_sink() noexcept {
  const char* out = std::getenv("VRAMTRACE_OUTPUT");
  if (!out || !*out) {
    log_line(LogLevel::info, "VRAMTRACE_OUTPUT is not set: no trace file (events are only counted)");
    return nullptr;
  }
  try {
    trace::TraceWriterOptions options;
    std::string error;
    if (!trace::TraceWriterOptions::from_environment(options, error)) {
      log_line(LogLevel::warn, "{}; tracing is off, the program continues", error);
      return nullptr;
    }
    options.start_on_first_event = true;  // processes that never allocate leave no file
    options.header = base_header();
    options.report_failure = report_writer_failure;
    log_line(LogLevel::info, "tracing to '{}' (the file is created by the first event)", out);
    g_writer = new trace::TraceWriter(std::move(options));
    return g_writer;
  } catch (...) {
    return nullptr;
  }
}

trace::TraceWriter* trace_writer() noexcept {
  (void)sink();  // the writer is made with the sink
  return g_writer;
}

void flush_trace_sink() noexcept {
  if (g_writer) g_writer->flush();
}

void sink_note_device(int device, int driver_version, const char* name, std::uint64_t total_bytes,
                      const ContextReading& context) noexcept {
  if (!g_writer) return;
  static std::mutex mu;
  static auto* devices = new std::vector<trace::DeviceInfo>;
  try {
    std::lock_guard<std::mutex> lock(mu);
    for (auto& d : *devices)
      if (d.id == device) return;
    devices->push_back(
        {device, name ? name : "", total_bytes, "", context.free_bytes, context.total_bytes, context.held_bytes});
    trace::HeaderInfo h = base_header();
    h.cuda_driver_version = driver_version;
    h.devices = *devices;
    g_writer->set_header_info(std::move(h));
  } catch (...) {
  }
}

void sink_before_fork() noexcept {
  if (g_writer) g_writer->before_fork();
}
void sink_after_fork_parent() noexcept {
  if (g_writer) g_writer->after_fork_parent();
}

void sink_close(const std::vector<std::pair<int, std::vector<std::pair<std::string, std::int64_t>>>>& stats) noexcept {
  if (!g_writer) return;
  try {
    std::vector<trace::FlatStats> by_device;
    for (auto& [device, flat] : stats) {
      if (device < 0) continue;
      if (by_device.size() <= static_cast<std::size_t>(device)) by_device.resize(device + 1);
      if (by_device[device].empty()) by_device[device] = flat;
    }
    g_writer->close(by_device);
  } catch (...) {
    g_writer->close();
  }
}

// Returns false when there is no writer. With a writer, *id is the writer's id, 0 included
// (0 = the writer's table is full): a local id would name the wrong string in the trace.
bool writer_intern_mark(const char* name, std::uint32_t* id) noexcept {
  if (!g_writer) return false;
  *id = g_writer->intern_mark(name ? name : "");
  return true;
}

void sink_after_fork_child() noexcept {
  for (auto& c : g_event_counts.by_action) c.store(0, std::memory_order_relaxed);
  for (auto& c : g_event_counts.by_entry) c.store(0, std::memory_order_relaxed);
  if (g_writer) g_writer->after_fork_child();  // the child writes its own file, started lazily
}

void emit(Action action, std::uint64_t addr, std::uint64_t size_bytes, std::uint64_t stream, std::uint16_t entry,
          MemoryKind kind, int device) noexcept {
  EventSink* s = sink();
  if (!s) return;
  Event e;
  e.time_ns = event_time_ns();
  e.addr = addr;
  e.size_bytes = size_bytes;
  e.block_bytes = size_bytes;
  e.stream = stream;
  e.aux = static_cast<std::uint64_t>(kind);
  e.device = device;
  e.thread_id = this_thread_id();
  e.action = action;
  e.entry_point = entry;
  if (carries_stack(action)) e.stack_id = call_stack();
  s->record(e);
}

void emit_mark(std::uint32_t name_id) noexcept {
  EventSink* s = sink();
  if (!s) return;
  Event e;
  e.time_ns = event_time_ns();
  e.aux = name_id;
  e.thread_id = this_thread_id();
  e.action = Action::mark;
  s->record(e);
}

// The writer's string table when there is a writer; otherwise a local one (marks are still
// counted for the stats file).
std::uint32_t intern_mark_name(const char* name) noexcept {
  if (std::uint32_t id = 0; writer_intern_mark(name, &id)) return id;
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
