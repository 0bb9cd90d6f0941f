// The trace writer (see vramtrace/trace/writer.h for the design and Note [trace durability]).
#include "vramtrace/trace/writer.h"

#include <fcntl.h>
#include <linux/futex.h>
#include <signal.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <new>

namespace vramtrace::trace {

namespace {

constexpr std::size_t kWriteChunkBytes = std::size_t{256} << 10;  // write(2) at least this much when busy
constexpr std::size_t kPopBatch = 256;
constexpr std::uint32_t kMaxMarkNames = std::uint32_t{1} << 20;
constexpr std::int64_t kWaitLimitNs = 10'000'000'000;  // flush / OOM waits give up after 10 s

std::int64_t clock_ns(clockid_t clock) noexcept {
  timespec ts{};
  clock_gettime(clock, &ts);
  return static_cast<std::int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

// The default of TraceWriterOptions::report_failure.
void write_stderr(const std::string& line) noexcept {
  std::string text = "vramtrace: " + line + "\n";
  const char* p = text.data();
  std::size_t n = text.size();
  while (n > 0) {
    ssize_t w = ::write(2, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return;
    p += w;
    n -= static_cast<std::size_t>(w);
  }
}

std::vector<std::string> read_command_line() {
  std::vector<std::string> args;
  int fd = ::open("/proc/self/cmdline", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return args;
  std::string data;
  char buf[4096];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    data.append(buf, static_cast<std::size_t>(n));
    if (data.size() > (std::size_t{1} << 20)) break;  // enough for any report
  }
  ::close(fd);
  std::size_t start = 0;
  while (start < data.size()) {
    std::size_t end = data.find('\0', start);
    if (end == std::string::npos) end = data.size();
    args.emplace_back(data, start, end - start);
    start = end + 1;
  }
  return args;
}

bool parse_uint(const char* text, std::uint64_t& out) {
  if (text == nullptr || *text == '\0') return false;
  const char* end = text + std::strlen(text);
  auto r = std::from_chars(text, end, out);
  return r.ec == std::errc() && r.ptr == end;
}

long futex(std::atomic<std::uint32_t>* word, int op, std::uint32_t value, const timespec* timeout) noexcept {
  return ::syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(word), op, value, timeout, nullptr, 0);
}

}  // namespace

bool TraceWriterOptions::from_environment(TraceWriterOptions& out, std::string& error) {
  bool ok = true;
  auto bad = [&](const std::string& message) {
    if (!error.empty()) error += "; ";
    error += message;
    ok = false;
  };
  if (const char* v = std::getenv("VRAMTRACE_OUTPUT"); v != nullptr && *v != '\0') out.output_pattern = v;
  if (const char* v = std::getenv("VRAMTRACE_TRACE_BUFFER"); v != nullptr) {
    std::uint64_t n = 0;
    if (parse_uint(v, n) && n >= 64 && n <= (std::uint64_t{1} << 26)) {
      out.buffer_events = static_cast<std::size_t>(n);
    } else {
      bad(std::string("VRAMTRACE_TRACE_BUFFER='") + v + "': expected a number of events from 64 to 67108864");
    }
  }
  if (const char* v = std::getenv("VRAMTRACE_TRACE_ON_FULL"); v != nullptr) {
    if (std::strcmp(v, "wait") == 0) {
      out.drop_when_full = false;
    } else if (std::strcmp(v, "drop") == 0) {
      out.drop_when_full = true;
    } else {
      bad(std::string("VRAMTRACE_TRACE_ON_FULL='") + v + "': expected wait or drop");
    }
  }
  if (const char* v = std::getenv("VRAMTRACE_TRACE_COMPRESSION"); v != nullptr) {
    if (std::strcmp(v, "auto") == 0) {
      out.compression = Compression::automatic;
    } else if (std::strcmp(v, "none") == 0) {
      out.compression = Compression::none;
    } else if (std::strcmp(v, "zstd") == 0) {
      out.compression = Compression::zstd;
    } else {
      bad(std::string("VRAMTRACE_TRACE_COMPRESSION='") + v + "': expected auto, none or zstd");
    }
  }
  if (const char* v = std::getenv("VRAMTRACE_TRACE_FLUSH_MS"); v != nullptr) {
    std::uint64_t n = 0;
    if (parse_uint(v, n) && n >= 10 && n <= 10000) {
      out.flush_interval_ms = static_cast<std::uint32_t>(n);
    } else {
      bad(std::string("VRAMTRACE_TRACE_FLUSH_MS='") + v + "': expected milliseconds from 10 to 10000");
    }
  }
  return ok;
}

TraceWriter::TraceWriter(TraceWriterOptions options)
    : options_(std::move(options)),
      ring_(std::max<std::size_t>(options_.buffer_events, 64)),
      wake_mask_(ring_.capacity() / 4 - 1),
      text_(kWriteChunkBytes + 64 * 1024) {
  options_.buffer_events = ring_.capacity();
  options_.flush_interval_ms = std::clamp<std::uint32_t>(options_.flush_interval_ms, 10, 10000);
  mark_names_.emplace_back("(too many mark names)");
}

TraceWriter::~TraceWriter() { close(); }

std::uint64_t TraceWriter::now_ns() noexcept { return event_time_ns(); }

std::string TraceWriter::path() const {
  std::lock_guard<std::mutex> lock(path_mu_);
  return path_;
}

// ---- lifecycle ------------------------------------------------------------------------------

bool TraceWriter::start() noexcept {
  std::lock_guard<std::mutex> lock(lifecycle_mu_);
  int s = state_.load(std::memory_order_acquire);
  if (s == kIdle) return start_locked(false);
  if (s == kForkPending) return start_locked(true);
  return s == kRunning;
}

bool TraceWriter::start_locked(bool in_fork_child) noexcept {
  try {
    HeaderFields h;
    h.info = options_.header;
    h.pid = ::getpid();
    h.ppid = ::getppid();
    h.host = host_name();
    h.rank = rank_from_environment();
    h.local_rank = local_rank_from_environment();
    if (const char* v = std::getenv("CUDA_VISIBLE_DEVICES")) h.cuda_visible_devices = std::string(v);
    h.command_line = read_command_line();
    h.origin_monotonic_ns = static_cast<std::int64_t>(event_time_ns());  // the events' clock
    h.start_unix_ns = clock_ns(CLOCK_REALTIME);
    h.buffer_events = ring_.capacity();
    h.drop_when_full = options_.drop_when_full;
    h.flush_interval_ms = options_.flush_interval_ms;

    PathFields pf{h.pid, h.host, h.rank, static_cast<std::time_t>(h.start_unix_ns / 1'000'000'000)};
    std::string path = expand_output_path(options_.output_pattern, pf);
    if (in_fork_child && path == parent_path_) path = path_with_pid(path, h.pid);
    bool zstd = options_.compression == Compression::zstd ||
                (options_.compression == Compression::automatic && path.size() >= 4 &&
                 path.compare(path.size() - 4, 4, ".zst") == 0);
    h.compression = zstd ? "zstd" : "none";
    {
      std::lock_guard<std::mutex> lock(path_mu_);
      path_ = path;
    }

    std::string error;
    if (!file_.create(path, zstd, options_.zstd_level, error)) {
      fail(error);
      return false;
    }
    origin_ns_ = h.origin_monotonic_ns;
    {
      std::lock_guard<std::mutex> devices_lock(devices_mu_);
      written_devices_.clear();
      for (const DeviceInfo& d : h.info.devices) written_devices_.push_back(d.id);
      pending_devices_.clear();
      devices_pending_.store(false, std::memory_order_relaxed);
    }
    // A new file (this process's first, or a fork child's) has no stack, module or string yet.
    stack_written_.clear();
    code_strings_.clear();
    string_ids_.clear();
    modules_.reset_ids();
    text_.clear();
    encode_header(text_, h);
    if (!file_.write(text_.view(), error)) {
      text_.clear();
      fail(error);
      return false;
    }
    text_.clear();
    events_written_ = 0;
    std::fill(std::begin(counts_), std::end(counts_), 0);
    stop_.store(false, std::memory_order_relaxed);

    // The writer thread takes no signals: they stay with the program's own threads.
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    state_.store(kRunning, std::memory_order_release);
    thread_in_loop_.store(false, std::memory_order_relaxed);
    int rc = pthread_create(&thread_, nullptr, &TraceWriter::thread_main, this);
    pthread_sigmask(SIG_SETMASK, &old, nullptr);
    if (rc != 0) {
      fail("cannot start the trace writer thread: " + std::string(std::strerror(rc)));
      return false;
    }
    thread_running_ = true;
    return true;
  } catch (...) {
    fail("cannot start tracing: out of host memory");
    return false;
  }
}

void TraceWriter::close(const std::vector<FlatStats>& final_stats) noexcept {
  std::lock_guard<std::mutex> lock(lifecycle_mu_);
  int s = state_.load(std::memory_order_acquire);
  if (s == kRunning) {
    // Let the thread write everything recorded so far, then stop it. Events recorded from now on
    // are ignored (record sees kClosed); a thread waiting on a full ring gives up.
    state_.store(kClosed, std::memory_order_release);
    stop_.store(true, std::memory_order_release);
    wake();
  } else if (s == kIdle || s == kForkPending) {
    state_.store(kClosed, std::memory_order_release);
  }
  if (thread_running_) {
    pthread_join(thread_, nullptr);
    thread_running_ = false;
  }
  if (s != kRunning) return;
  // The thread has drained every published record; if it failed meanwhile, the file is closed.
  if (!file_.is_open()) return;
  try {
    TrailerFields t;
    t.time_ns = static_cast<std::int64_t>(event_time_ns()) - origin_ns_;
    t.events = events_written_;
    t.dropped = dropped_.load(std::memory_order_relaxed);
    std::copy(std::begin(counts_), std::end(counts_), std::begin(t.counts));
    t.device_stats = final_stats;
    text_.clear();
    encode_trailer(text_, t);
    std::string error;
    if (!file_.write(text_.view(), error) || !file_.finish(error)) {
      file_.abandon();
      fail(error);
    }
    text_.clear();
  } catch (...) {
    file_.abandon();
  }
  publish_progress(ring_.claimed());
}

void TraceWriter::fail(const std::string& message) noexcept {
  state_.store(kDisabled, std::memory_order_release);
  if (!message_printed_.exchange(true)) {
    try {
      const std::string line = message + "; tracing is off, the program continues";
      if (options_.report_failure)
        options_.report_failure(line);
      else
        write_stderr(line);
    } catch (...) {
    }
  }
  // Release anyone waiting for the file.
  { std::lock_guard<std::mutex> lock(progress_mu_); }
  progress_cv_.notify_all();
}

void TraceWriter::before_fork() noexcept {
  lifecycle_mu_.lock();
  // A thread started just now may still be inside the C library's (or a sanitizer's) thread
  // start-up, which allocates: let it reach its loop first.
  while (thread_running_ && !thread_in_loop_.load(std::memory_order_acquire)) {
    timespec pause{0, 50'000};
    nanosleep(&pause, nullptr);
  }
  fork_waiting_.store(true, std::memory_order_relaxed);
  work_mu_.lock();  // the background thread is asleep or between batches from here on
  marks_mu_.lock();
  devices_mu_.lock();
  oom_mu_.lock();
  path_mu_.lock();
  fork_locked_ = true;
}

void TraceWriter::after_fork_parent() noexcept {
  if (!fork_locked_) return;
  fork_locked_ = false;
  path_mu_.unlock();
  oom_mu_.unlock();
  devices_mu_.unlock();
  marks_mu_.unlock();
  work_mu_.unlock();
  fork_waiting_.store(false, std::memory_order_relaxed);
  lifecycle_mu_.unlock();
}

void TraceWriter::after_fork_child() noexcept {
  if (fork_locked_) {
    fork_locked_ = false;
    path_mu_.unlock();
    oom_mu_.unlock();
    devices_mu_.unlock();
    marks_mu_.unlock();
    work_mu_.unlock();
    lifecycle_mu_.unlock();
  } else {
    // Another thread of the parent may have held these at fork: it does not exist here.
    new (&lifecycle_mu_) std::mutex();
    new (&work_mu_) std::mutex();
    new (&marks_mu_) std::mutex();
    new (&oom_mu_) std::mutex();
    new (&devices_mu_) std::mutex();
    new (&path_mu_) std::mutex();
  }
  new (&progress_mu_) std::mutex();
  new (&progress_cv_) std::condition_variable();
  fork_waiting_.store(false, std::memory_order_relaxed);
  int s = state_.load(std::memory_order_acquire);
  // The parent's thread does not exist in the child; its file and buffered events stay the
  // parent's to write.
  thread_running_ = false;
  if (s == kRunning || s == kForkPending) {
    file_.abandon();
    ring_.reset();
    text_.clear();
    pending_snapshots_.clear();
    pending_devices_.clear();  // the child's header lists every device noted so far
    written_devices_.clear();
    devices_pending_.store(false, std::memory_order_relaxed);
    events_written_ = 0;
    std::fill(std::begin(counts_), std::end(counts_), 0);
    dropped_.store(0, std::memory_order_relaxed);
    written_pos_.store(0, std::memory_order_relaxed);
    stop_.store(false, std::memory_order_relaxed);
    if (s == kRunning) parent_path_ = path_;
    path_.clear();
    state_.store(kForkPending, std::memory_order_release);
  }
}

void TraceWriter::set_header_info(HeaderInfo info) noexcept {
  std::lock_guard<std::mutex> lock(lifecycle_mu_);
  options_.header = std::move(info);
  if (state_.load(std::memory_order_acquire) != kRunning) return;  // the header will list them
  try {
    std::lock_guard<std::mutex> devices_lock(devices_mu_);
    for (const DeviceInfo& d : options_.header.devices) {
      if (std::find(written_devices_.begin(), written_devices_.end(), d.id) != written_devices_.end()) continue;
      written_devices_.push_back(d.id);
      pending_devices_.push_back(d);
      // Release: an event recorded after this call is popped by the writer thread after it sees
      // the flag, so the device record precedes the device's events.
      devices_pending_.store(true, std::memory_order_release);
    }
  } catch (...) {
    // out of host memory: the device goes unnamed in this trace (reports fall back to device 0's)
  }
}

void TraceWriter::format_pending_devices() {
  std::vector<DeviceInfo> devices;
  {
    std::lock_guard<std::mutex> lock(devices_mu_);
    devices.swap(pending_devices_);
    devices_pending_.store(false, std::memory_order_relaxed);
  }
  for (const DeviceInfo& d : devices) encode_device(text_, d);
}

// ---- recording (any thread) ------------------------------------------------------------------

bool TraceWriter::push(const Event& e, std::uint64_t* pos, bool never_drop) noexcept {
  if (options_.drop_when_full && !never_drop) {
    if (!ring_.try_push(e, pos)) {
      dropped_.fetch_add(1, std::memory_order_relaxed);
      return false;
    }
  } else if (!ring_.push_wait(e, pos, [this] { return state_.load(std::memory_order_relaxed) == kRunning; })) {
    return false;
  }
  if ((*pos & wake_mask_) == 0) wake();
  return true;
}

void TraceWriter::record(const Event& e) noexcept {
  if (state_.load(std::memory_order_relaxed) != kRunning) [[unlikely]] {
    record_slow(e);
    return;
  }
  std::uint64_t pos;
  push(e, &pos, false);
}

void TraceWriter::record_slow(const Event& e) noexcept {
  const int s = state_.load(std::memory_order_acquire);
  if (s == kForkPending || (s == kIdle && options_.start_on_first_event)) {
    start();  // the first event opens the file (a fork child's own file, or a lazy start)
  }
  if (state_.load(std::memory_order_acquire) != kRunning) return;
  std::uint64_t pos;
  push(e, &pos, false);
}

void TraceWriter::record_oom(const Event& e, const Snapshot& state) noexcept {
  if (state_.load(std::memory_order_acquire) != kRunning) {
    const int s = state_.load(std::memory_order_acquire);
    if (s == kForkPending || (s == kIdle && options_.start_on_first_event)) start();
    if (state_.load(std::memory_order_acquire) != kRunning) return;
  }
  Event copy = e;
  copy.action = Action::oom;
  copy.stack_id = 0;  // in the ring, an oom's stack_id is its ticket (0: no snapshot, no stack)
  try {
    TextBuffer snapshot;
    encode_snapshot(snapshot, state);
    std::lock_guard<std::mutex> lock(oom_mu_);
    copy.stack_id = next_ticket_++;
    if (next_ticket_ == 0) next_ticket_ = 1;
    pending_snapshots_.push_back({copy.stack_id, e.stack_id, std::string(snapshot.view())});
  } catch (...) {
    copy.stack_id = 0;  // out of host memory: the oom line goes without its snapshot and stack
  }
  std::uint64_t pos;
  if (!push(copy, &pos, true)) return;
  wake();
  wait_written(pos + 1);
}

std::uint32_t TraceWriter::intern_mark(std::string_view name) noexcept {
  try {
    std::lock_guard<std::mutex> lock(marks_mu_);
    std::string key(name);
    auto it = mark_ids_.find(key);
    if (it != mark_ids_.end()) return it->second;
    if (mark_names_.size() >= kMaxMarkNames) return 0;
    auto id = static_cast<std::uint32_t>(mark_names_.size());
    mark_names_.push_back(key);
    mark_ids_.emplace(std::move(key), id);
    return id;
  } catch (...) {
    return 0;
  }
}

void TraceWriter::mark(std::uint32_t id) noexcept {
  Event e{};
  e.action = Action::mark;
  e.aux = id;
  e.time_ns = now_ns();
  e.thread_id = static_cast<std::uint32_t>(::syscall(SYS_gettid));
  record(e);
}

void TraceWriter::mark(std::string_view name) noexcept { mark(intern_mark(name)); }

void TraceWriter::flush() noexcept {
  if (state_.load(std::memory_order_acquire) != kRunning) return;
  std::uint64_t target = ring_.claimed();
  wake();
  wait_written(target);
}

void TraceWriter::wait_written(std::uint64_t pos) noexcept {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::nanoseconds(kWaitLimitNs);
  std::unique_lock<std::mutex> lock(progress_mu_);
  while (written_pos_.load(std::memory_order_acquire) < pos && state_.load(std::memory_order_acquire) == kRunning) {
    if (progress_cv_.wait_until(lock, deadline) == std::cv_status::timeout) return;
  }
}

void TraceWriter::wake() noexcept {
  wake_word_.fetch_add(1, std::memory_order_release);
  futex(&wake_word_, FUTEX_WAKE_PRIVATE, 1, nullptr);
}

// ---- the background thread ------------------------------------------------------------------

void* TraceWriter::thread_main(void* self) noexcept {
  pthread_setname_np(pthread_self(), "vramtrace-wr");
  static_cast<TraceWriter*>(self)->run();
  return nullptr;
}

void TraceWriter::publish_progress(std::uint64_t pos) noexcept {
  {
    std::lock_guard<std::mutex> lock(progress_mu_);
    written_pos_.store(pos, std::memory_order_release);
  }
  progress_cv_.notify_all();
}

bool TraceWriter::write_pending() noexcept {
  if (!text_.empty()) {
    std::string error;
    bool ok = false;
    try {
      ok = file_.write(text_.view(), error);
    } catch (...) {
      error = "writing the trace file failed: out of host memory";
    }
    text_.clear();
    if (!ok) {
      file_.abandon();
      fail(error);
      return false;
    }
  }
  publish_progress(ring_.consumed());
  return true;
}

void TraceWriter::format(const Event& e) {
  const auto a = static_cast<std::size_t>(e.action);
  if (a < 16) ++counts_[a];
  ++events_written_;
  if (e.action == Action::mark) {
    std::lock_guard<std::mutex> lock(marks_mu_);
    std::string_view name = e.aux < mark_names_.size() ? std::string_view(mark_names_[e.aux]) : std::string_view();
    encode_event(text_, e, origin_ns_, name);
  } else if (e.action == Action::oom) {
    std::string snapshot;
    Event copy = e;
    copy.stack_id = 0;
    if (e.stack_id != 0) {  // the ticket (record_oom)
      std::lock_guard<std::mutex> lock(oom_mu_);
      for (auto it = pending_snapshots_.begin(); it != pending_snapshots_.end(); ++it) {
        if (it->ticket == e.stack_id) {
          snapshot = std::move(it->snapshot);
          copy.stack_id = it->stack_id;
          pending_snapshots_.erase(it);
          break;
        }
      }
    }
    if (copy.stack_id != 0 && !write_stack_record(copy.stack_id)) copy.stack_id = 0;
    encode_event(text_, copy, origin_ns_, snapshot);
  } else if (e.stack_id != 0 && carries_stack(e.action) && !write_stack_record(e.stack_id)) {
    Event copy = e;
    copy.stack_id = 0;  // an id the table never gave: the line names no stack
    encode_event(text_, copy, origin_ns_);
  } else {
    encode_event(text_, e, origin_ns_);
  }
}

// Note [records before use]: the stack's module and string records, then the stack record, all
// before the event line that follows. False when the table has no such stack.
bool TraceWriter::write_stack_record(std::uint32_t id) {
  if (id < stack_written_.size() && stack_written_[id]) return true;
  const StackInterner::Stack* s = stacks_.stack(id);
  if (s == nullptr) return false;
  StackRecord rec;
  rec.id = id;
  rec.frames.reserve(s->size);
  const FrameWord* words = s->frames();
  for (std::uint32_t i = 0; i < s->size; ++i) {
    FrameRecord f;
    if (is_python_frame(words[i])) {
      f.python = true;
      f.line = python_line(words[i]);
      const std::uint32_t code = python_code(words[i]);
      if (code >= code_strings_.size()) code_strings_.resize(code + 1, {0, 0});
      if (code_strings_[code].first == 0) {
        const StackInterner::Code* c = stacks_.code(code);
        code_strings_[code] = {string_record(c ? c->file() : std::string_view("??")),
                               string_record(c ? c->name() : std::string_view("??"))};
      }
      f.file = code_strings_[code].first;
      f.name = code_strings_[code].second;
    } else {
      f.pc = words[i];
      if (ModuleInfo* m = modules_.find(words[i])) {
        if (modules_.assign_id(*m)) encode_module(text_, *m);
        f.module = m->id;
      }
    }
    rec.frames.push_back(f);
  }
  encode_stack(text_, rec);
  if (id >= stack_written_.size()) stack_written_.resize(std::max<std::size_t>(id + 1, stack_written_.size() * 2));
  stack_written_[id] = true;
  return true;
}

// The id of a string of Python frames in this file, writing its record the first time.
std::uint32_t TraceWriter::string_record(std::string_view text) {
  auto [it, inserted] = string_ids_.try_emplace(std::string(text), static_cast<std::uint32_t>(string_ids_.size() + 1));
  if (inserted) encode_string(text_, {it->second, it->first});
  return it->second;
}

void TraceWriter::run() noexcept {
  thread_in_loop_.store(true, std::memory_order_release);
  Event batch[kPopBatch];
  const std::int64_t idle_sleep_ns = std::int64_t{options_.flush_interval_ms} * 1'000'000 / 4;
  std::int64_t last_write_ns = clock_ns(CLOCK_MONOTONIC);
  unsigned batches_since_write = 0;
  for (;;) {
    // A fork in progress waits for work_mu_: stand aside until it is done (a fork takes
    // milliseconds at most; producers meanwhile fill the ring as they would during a slow write).
    while (fork_waiting_.load(std::memory_order_relaxed)) {
      timespec pause{0, 50'000};
      nanosleep(&pause, nullptr);
    }
    std::unique_lock<std::mutex> work(work_mu_);
    const std::uint32_t word = wake_word_.load(std::memory_order_acquire);
    std::size_t n = ring_.pop(batch, kPopBatch);
    if (n != 0) {
      try {
        if (devices_pending_.load(std::memory_order_acquire)) format_pending_devices();
        for (std::size_t i = 0; i < n; ++i) format(batch[i]);
      } catch (...) {
        text_.clear();
        file_.abandon();
        fail("formatting the trace failed: out of host memory");
        return;
      }
      // Write when enough text is pending, or when the oldest pending line has waited a quarter
      // of the flush interval (a writer that never finds the ring empty still writes in time).
      if (text_.size() >= kWriteChunkBytes ||
          ((++batches_since_write & 15) == 0 && clock_ns(CLOCK_MONOTONIC) - last_write_ns >= idle_sleep_ns)) {
        if (!write_pending()) return;
        last_write_ns = clock_ns(CLOCK_MONOTONIC);
        batches_since_write = 0;
      }
      continue;
    }
    // The ring is empty (or its next record is still being copied in): write what we have.
    if (devices_pending_.load(std::memory_order_acquire)) {
      try {
        format_pending_devices();
      } catch (...) {
      }
    }
    if (!write_pending()) return;
    last_write_ns = clock_ns(CLOCK_MONOTONIC);
    batches_since_write = 0;
    if (stop_.load(std::memory_order_acquire)) {
      // A producer that claimed a position before close may still be copying its record:
      // give it a moment, then stop (close ignores it otherwise).
      if (ring_.consumed() < ring_.claimed()) {
        timespec ts{0, 1'000'000};
        nanosleep(&ts, nullptr);
        if (ring_.pop(batch, 1) == 1) {
          try {
            // A device noted just before this event (and before close) still goes first: the
            // check at the top of this iteration ran before the event was published.
            if (devices_pending_.load(std::memory_order_acquire)) format_pending_devices();
            format(batch[0]);
          } catch (...) {
          }
          continue;
        }
      }
      return;
    }
    if (state_.load(std::memory_order_acquire) != kRunning && state_.load(std::memory_order_acquire) != kClosed) return;
    work.unlock();
    timespec timeout{idle_sleep_ns / 1'000'000'000, idle_sleep_ns % 1'000'000'000};
    futex(&wake_word_, FUTEX_WAIT_PRIVATE, word, &timeout);
  }
}

}  // namespace vramtrace::trace
