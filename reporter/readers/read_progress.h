// A hook through which the passes over a trace report how far they are, for the progress line of
// the commands (commands/progress.h). The passes live in several libraries (the model, the check
// input, the ledger); a hook here lets a command see all of them without a parameter threaded
// through every signature in between.
#pragma once

#include <atomic>
#include <cstdint>

#include "vramtrace/trace/reader.h"

namespace vramtrace {

/// Receives the reader of a pass in progress (its bytes_read() and bytes_total()). Called on the
/// thread that reads; it must not call the reader's next().
using ReadProgressHook = void (*)(const TraceReader& reader);

namespace detail {
inline std::atomic<ReadProgressHook> g_read_progress_hook{nullptr};
}  // namespace detail

/// Installs `hook` (nullptr: none, the default) for every later pass over a trace in this
/// process. Thread-safe; the hook itself is called on whatever thread reads, so install one only
/// where the reading is single-threaded (the report commands) or the hook is thread-safe.
inline void set_read_progress_hook(ReadProgressHook hook) noexcept {
  detail::g_read_progress_hook.store(hook, std::memory_order_relaxed);
}

/// Called by a pass once per record read from `reader`: every 65,536th call on a thread passes
/// the reader to the installed hook, if any. Cheap enough for the innermost loop (a thread-local
/// counter); never throws unless the hook does.
inline void tick_read_progress(const TraceReader& reader) {
  thread_local std::uint32_t ticks = 0;
  if ((++ticks & 0xFFFFu) != 0) return;
  if (ReadProgressHook hook = detail::g_read_progress_hook.load(std::memory_order_relaxed)) hook(reader);
}

}  // namespace vramtrace
