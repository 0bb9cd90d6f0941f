// Where the shim's events go: the trace writer (vramtrace/trace/writer.h) behind a counting
// adaptor, so that the stats file counts every event whether or not a trace is written.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "vramtrace/event.h"

namespace vramtrace::trace {
class TraceWriter;
}

namespace vramtrace::shim {

/// The sink the shim and its allocators write to; null when tracing is off. Created on first use
/// by make_trace_sink() and wrapped by a counting adaptor (counts feed the stats file).
EventSink* sink() noexcept;

/// THE single place where the trace writer is created: a vramtrace::trace::TraceWriter configured
/// from VRAMTRACE_OUTPUT and the writer's other variables (file created by the first event), or
/// null when VRAMTRACE_OUTPUT is unset, the writer is not compiled in, or its settings are bad
/// (one stderr line; the shim works on without a trace). Called once.
EventSink* make_trace_sink() noexcept;

/// The trace writer behind sink(), creating the sink on first use; null when there is no trace
/// file (events are then only counted). For the call stacks (base/stacks.h), which are interned in
/// the writer's table.
trace::TraceWriter* trace_writer() noexcept;

/// Asks the trace writer to write out what it buffered (vramtrace_flush). No-op without a writer.
void flush_trace_sink() noexcept;

/// The driver's figures when the shim first met a context of a device (Note [the context's share]
/// in policies/context_pool.cpp), in bytes; all 0 when not measured.
struct ContextReading {
  std::uint64_t free_bytes = 0;   ///< cuMemGetInfo's free, as the driver said it
  std::uint64_t total_bytes = 0;  ///< cuMemGetInfo's total
  std::uint64_t held_bytes = 0;   ///< device memory the shim held on the device then
};

/// Adds a device to the trace header (called when its first pool is created, before its first
/// event), with the reading taken when its first context was met. A device already noted keeps
/// its first entry. No-op without a writer.
void sink_note_device(int device, int driver_version, const char* name, std::uint64_t total_bytes,
                      const ContextReading& context) noexcept;

/// pthread_atfork prepare/parent halves for the writer (the child half is sink_after_fork_child).
void sink_before_fork() noexcept;
void sink_after_fork_parent() noexcept;

/// At exit: writes the trailer with the final statistics (device ordinal, flat stats) and closes
/// the trace. No-op without a writer.
void sink_close(const std::vector<std::pair<int, std::vector<std::pair<std::string, std::int64_t>>>>& stats) noexcept;

/// Events seen per action and per entry point (for the stats file and tests).
struct EventCounts {
  std::atomic<std::uint64_t> by_action[16];
  std::atomic<std::uint64_t> by_entry[256];
};
extern EventCounts g_event_counts;

/// Emits one event the shim makes itself (pass-through memory, marks): Event::aux = `kind`
/// (MemoryKind, vramtrace/event.h). Fills time_ns (event_time_ns), thread_id and, for an action
/// that carries one (carries_stack), the call stack (call_stack in base/stacks.h: call it without
/// any lock of the shim held). No-op when tracing is disabled or there is no sink.
void emit(Action action, std::uint64_t addr, std::uint64_t size_bytes, std::uint64_t stream, std::uint16_t entry,
          MemoryKind kind, int device) noexcept;

/// Emits a `mark` event (Event::aux = `name_id`, device 0: a mark belongs to no device).
void emit_mark(std::uint32_t name_id) noexcept;

/// Id of a mark name in the writer's string table (the writer will provide
/// vramtrace::trace::intern_mark; until the merge a local table). Thread-safe.
std::uint32_t intern_mark_name(const char* name) noexcept;

/// Called in the child after fork (the writer reopens its file under the child's pid).
void sink_after_fork_child() noexcept;

}  // namespace vramtrace::shim
