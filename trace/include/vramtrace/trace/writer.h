// The trace writer: the shim's EventSink that streams allocator events to a JSON Lines file
// (docs/trace-format.md) without slowing the allocation path.
//
//   allocation path (any thread)           background thread "vramtrace-wr"
//   ----------------------------           --------------------------------
//   record(e): copy 64 bytes into  ----->  pop records in order, format lines into a
//   the MPSC ring (ring_buffer.h)          TextBuffer, write(2) them (zstd-flushed) whenever the
//                                          ring runs empty, 256 KiB is pending or a line has
//                                          waited flush_interval/4; sleeps at most
//                                          flush_interval/4 when idle
//
// Call stacks: an event's Event::stack_id names a stack of stacks() (interned by the recording
// thread, lock-free). Note [records before use]: the background thread writes a stack's record,
// and the module and string records it needs, into the same text right before the first event
// line that names it, so the order holds in the file whatever the ring's interleaving of threads
// and whatever the compression.
//
// Note [trace durability]: a line reaches the kernel (write(2)) within flush_interval of being
// recorded, so a process killed with SIGKILL leaves a file whose every event older than the
// interval is present and whose last line at most is cut. Nothing is fsync'ed: a machine crash
// can still lose the page cache. The OOM record is the exception: record_oom returns only after
// the oom line (and everything before it) has been written.
//
// Usable without CUDA: plain C++20 and pthreads. Compiled into libvramtrace.so with hidden
// visibility (target vramtrace_trace_writer in trace/CMakeLists.txt).
#pragma once

#include <pthread.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "vramtrace/event.h"
#include "vramtrace/snapshot.h"
#include "vramtrace/trace/format.h"
#include "vramtrace/trace/modules.h"
#include "vramtrace/trace/output.h"
#include "vramtrace/trace/ring_buffer.h"
#include "vramtrace/trace/stack_interner.h"

namespace vramtrace::trace {

enum class Compression : std::uint8_t {
  automatic,  ///< zstd when the output name ends with ".zst", else none
  none,
  zstd,
};

/// How the writer behaves; the shim fills `header` and usually takes the rest from the
/// environment (from_environment).
struct TraceWriterOptions {
  /// Output name with placeholders (%p %h %r %t %%, see expand_output_path).
  std::string output_pattern = "vramtrace.%p.jsonl";
  Compression compression = Compression::automatic;
  /// zstd level (1..19) when compressing; 1 keeps the writer thread fastest.
  int zstd_level = 1;
  /// Ring capacity in events (64 bytes each), rounded up to a power of two. The default (1 MiB)
  /// absorbs a burst of 16,384 events without waiting, yet is drained within a few milliseconds
  /// even by a writer thread that gets a fraction of a core (Note [trace durability]).
  std::size_t buffer_events = std::size_t{1} << 14;
  /// false (default): a full ring makes the recording thread wait, nothing is lost.
  /// true: an event that finds the ring full is dropped and counted (trailer "dropped").
  bool drop_when_full = false;
  /// Upper bound in milliseconds on how long a recorded event stays in memory before write(2).
  std::uint32_t flush_interval_ms = 100;
  /// true: the file is created by the first recorded event (or mark) instead of by start(), so
  /// that processes that never allocate device memory (shells, launchers, DataLoader workers)
  /// leave no file. The shim sets this and fills the header (set_header_info) once CUDA is up.
  bool start_on_first_event = false;
  HeaderInfo header;
  /// Where the writer's one failure line goes (see the failure policy of TraceWriter): called at
  /// most once per writer with the message alone ("cannot create the trace file ...; tracing is
  /// off, the program continues": no prefix, no newline). It may be called on any thread,
  /// the background thread included, and during process exit (close), so it must not throw and
  /// must not call back into the writer. Null (the default): "vramtrace: <message>\n" is written
  /// to stderr with write(2). The shim passes its logger (shim/src/base/log.h).
  void (*report_failure)(std::string_view message) noexcept = nullptr;

  /// Reads VRAMTRACE_OUTPUT (the output name), VRAMTRACE_TRACE_BUFFER (events),
  /// VRAMTRACE_TRACE_ON_FULL (wait|drop), VRAMTRACE_TRACE_COMPRESSION (auto|none|zstd) and
  /// VRAMTRACE_TRACE_FLUSH_MS (10..10000) on top of the defaults. Returns false and sets `error`
  /// (naming the variable and what it accepts) on a bad value; `out` then keeps the defaults for
  /// that variable. Not thread-safe (getenv).
  static bool from_environment(TraceWriterOptions& out, std::string& error);
};

/// Streams events to a trace file. See the file comment for the design.
///
/// Thread safety: record, record_oom, mark, intern_mark and flush may be called from any number
/// of threads at once. start and close are serialised internally. The fork hooks follow
/// pthread_atfork's contract (called by the forking thread only).
///
/// Failure policy: any failure to create or write the file prints one line to stderr
/// ("vramtrace: ...; tracing is off, the program continues"; through
/// TraceWriterOptions::report_failure when set) and turns tracing off; the program's own work is
/// never affected and no call here throws or aborts.
class TraceWriter final : public EventSink {
 public:
  explicit TraceWriter(TraceWriterOptions options);
  ~TraceWriter() override;
  TraceWriter(const TraceWriter&) = delete;
  TraceWriter& operator=(const TraceWriter&) = delete;

  /// Creates the file, writes the header and starts the background thread. Returns true when
  /// tracing is on afterwards. Call once; later calls return the current state.
  bool start() noexcept;

  /// Replaces the header's CUDA and device information for the file not yet created (this
  /// process's, or a fork child's). When the file is already written, each device of `info`
  /// that its header does not list is written as a `device` record (format 1.1) before the
  /// events recorded after this call. Thread-safe.
  void set_header_info(HeaderInfo info) noexcept;

  /// The table of call stacks behind Event::stack_id (thread-safe, lock-free). A stack is written
  /// to the file (as a `stack` record, with its modules and strings) before the first event that
  /// names it; an id it does not hold is written as no stack.
  StackInterner& stacks() noexcept { return stacks_; }

  /// Whether an event recorded now would be written: tracing is on, or the file would be created
  /// by it (a lazy start, a fork child). For callers that do work only to fill an event (a call
  /// stack). Thread-safe, one atomic load.
  bool accepting() const noexcept {
    const int s = state_.load(std::memory_order_relaxed);
    return s == kRunning || s == kForkPending || (s == kIdle && options_.start_on_first_event);
  }

  /// Appends one event (time_ns, thread_id etc. as the caller stamped them). Lock-free: a copy
  /// into the ring and a release store; waits only when the ring is full (or drops, by option).
  /// No-op unless tracing is on. With start_on_first_event, and in a fork child, the first call
  /// creates the file (on the calling thread, once).
  void record(const Event& e) noexcept override;

  /// Appends the oom event with `state` formatted as PyTorch's snapshot and returns after the oom
  /// line and every earlier event have been written to the file (bounded wait: 10 s). Heap
  /// allocation and formatting happen on the calling thread here: OOMs are rare. The event's
  /// stack_id travels beside the snapshot (its field carries the snapshot's ticket in the ring).
  void record_oom(const Event& e, const Snapshot& state) noexcept override;

  /// The id of a mark name, creating it on first use (takes a lock and may allocate: call it
  /// outside hot loops and keep the id). At most 1,048,576 distinct names; further new names get
  /// id 0, written as "(too many mark names)". Thread-safe.
  std::uint32_t intern_mark(std::string_view name) noexcept;
  /// Records a mark with an interned id, stamped now on the calling thread.
  void mark(std::uint32_t id) noexcept;
  /// Records a mark by name (intern_mark + mark(id)).
  void mark(std::string_view name) noexcept;

  /// Waits until every event recorded before the call is written to the file (bounded: 10 s).
  void flush() noexcept;

  /// Writes everything still buffered, the trailer with `final_stats` (PyTorch's flat statistics
  /// per device ordinal) and closes the file. Events recorded afterwards are ignored. Idempotent.
  void close(const std::vector<FlatStats>& final_stats = {}) noexcept;

  /// pthread_atfork hooks. before_fork/after_fork_parent keep the writer's locks consistent
  /// across fork, and before_fork waits until the background thread is between batches (at most
  /// one batch's formatting and write): the child never inherits a copy taken while that thread
  /// was inside the formatter, the compressor or the host allocator, whose locks it would hold
  /// forever in the child (glibc's malloc is fork-safe; sanitizer allocators before LLVM 17 are
  /// not). after_fork_child forgets the parent's file and buffered events, so that the child
  /// writes its own file (its pid in %p, or "-<pid>" added when the name has no %p), started
  /// lazily by the child's first event. Calling only after_fork_child also works.
  void before_fork() noexcept;
  void after_fork_parent() noexcept;
  void after_fork_child() noexcept;

  /// True while events are being written.
  bool enabled() const noexcept { return state_.load(std::memory_order_acquire) == kRunning; }
  /// The file's path once created ("" before).
  std::string path() const;
  /// Events dropped because the ring was full (drop mode only).
  std::uint64_t dropped() const noexcept { return dropped_.load(std::memory_order_relaxed); }
  /// Current CLOCK_MONOTONIC in nanoseconds, the clock of Event::time_ns (event_time_ns).
  static std::uint64_t now_ns() noexcept;

 private:
  enum State : int { kIdle, kRunning, kForkPending, kDisabled, kClosed };

  bool push(const Event& e, std::uint64_t* pos, bool never_drop) noexcept;
  void record_slow(const Event& e) noexcept;
  bool start_locked(bool in_fork_child) noexcept;
  void wait_written(std::uint64_t pos) noexcept;
  void wake() noexcept;
  void fail(const std::string& message) noexcept;
  static void* thread_main(void* self) noexcept;
  void run() noexcept;
  void format(const Event& e);
  bool write_stack_record(std::uint32_t id);
  std::uint32_t string_record(std::string_view text);
  bool write_pending() noexcept;
  void publish_progress(std::uint64_t pos) noexcept;

  TraceWriterOptions options_;
  MpscRing<Event> ring_;
  std::uint64_t wake_mask_;  // producers wake the writer when a position crosses a quarter ring

  alignas(64) std::atomic<int> state_{kIdle};
  std::atomic<std::uint64_t> dropped_{0};
  std::atomic<std::uint32_t> wake_word_{0};  // futex the idle writer sleeps on
  std::atomic<bool> stop_{false};
  std::atomic<bool> message_printed_{false};

  std::mutex lifecycle_mu_;  // start, close, fork restart
  // Held by the background thread while it pops, formats and writes (not while it sleeps);
  // before_fork takes it so that fork finds the thread between batches. fork_waiting_ makes the
  // thread stand aside until the fork is done instead of taking the mutex again at once.
  std::mutex work_mu_;
  std::atomic<bool> fork_waiting_{false};
  std::atomic<bool> thread_in_loop_{false};  // the background thread has finished starting up
  pthread_t thread_{};
  bool thread_running_ = false;
  bool fork_locked_ = false;

  std::mutex progress_mu_;
  std::condition_variable progress_cv_;
  std::atomic<std::uint64_t> written_pos_{0};  // positions < this are on disk

  mutable std::mutex marks_mu_;
  std::vector<std::string> mark_names_;  // index = id; 0 = "(too many mark names)"
  std::unordered_map<std::string, std::uint32_t> mark_ids_;

  // Devices noted after the header was written (set_header_info), for `device` records.
  std::mutex devices_mu_;
  std::vector<DeviceInfo> pending_devices_;
  std::vector<std::int32_t> written_devices_;  // ids in the header or in a device record
  std::atomic<bool> devices_pending_{false};
  void format_pending_devices();

  std::mutex oom_mu_;
  struct PendingOom {
    std::uint32_t ticket;
    std::uint32_t stack_id;
    std::string snapshot;  // JSON
  };
  std::vector<PendingOom> pending_snapshots_;
  std::uint32_t next_ticket_ = 1;

  StackInterner stacks_;
  // Note [records before use], owned by the background thread (by start_locked before it runs):
  // which stacks, strings and modules the file has already.
  ModuleMap modules_;
  std::vector<bool> stack_written_;                                    // by stack id
  std::vector<std::pair<std::uint32_t, std::uint32_t>> code_strings_;  // code id -> (file, name) string ids
  std::unordered_map<std::string, std::uint32_t> string_ids_;

  // Owned by the background thread while it runs (by start/close otherwise).
  mutable std::mutex path_mu_;
  std::string path_;
  std::string parent_path_;  // set in a fork child: the parent's file
  TraceFile file_;
  TextBuffer text_;
  std::int64_t origin_ns_ = 0;
  std::uint64_t events_written_ = 0;
  std::uint64_t counts_[16] = {};
};

}  // namespace vramtrace::trace
