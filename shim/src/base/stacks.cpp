// Capturing call stacks (Note [stack capture] in base/stacks.h).
#include "base/stacks.h"

#include <dlfcn.h>
#include <link.h>
#include <sys/types.h>

#include <algorithm>
#include <atomic>
#include <string_view>

#include "base/config.h"
#include "base/counters.h"
#include "base/entry.h"
#include "base/log.h"
#include "base/real.h"
#include "base/sink.h"
#include "base/unwind.h"
#include "vramtrace/trace/writer.h"

namespace vramtrace::shim {

namespace {

using trace::FrameWord;

// --- native frames ----------------------------------------------------------------------------

// The address range of the shim's own loadable segments: frames there are left out. Found once,
// lock-free (two threads finding it at once store the same values).
std::atomic<std::uintptr_t> g_self_lo{0};
std::atomic<std::uintptr_t> g_self_hi{0};

void find_self() noexcept {
  struct Probe {
    std::uintptr_t address, lo, hi;
  } probe{reinterpret_cast<std::uintptr_t>(&find_self), 0, 0};
  dl_iterate_phdr(
      [](dl_phdr_info* info, std::size_t, void* arg) -> int {
        auto* p = static_cast<Probe*>(arg);
        std::uintptr_t lo = ~std::uintptr_t{0}, hi = 0;
        for (int i = 0; i < info->dlpi_phnum; ++i) {
          const ElfW(Phdr)& ph = info->dlpi_phdr[i];
          if (ph.p_type != PT_LOAD) continue;
          lo = std::min<std::uintptr_t>(lo, info->dlpi_addr + ph.p_vaddr);
          hi = std::max<std::uintptr_t>(hi, info->dlpi_addr + ph.p_vaddr + ph.p_memsz);
        }
        if (p->address < lo || p->address >= hi) return 0;
        p->lo = lo;
        p->hi = hi;
        return 1;
      },
      &probe);
  g_self_lo.store(probe.lo, std::memory_order_relaxed);
  g_self_hi.store(probe.hi != 0 ? probe.hi : 1, std::memory_order_release);
}

unsigned native_frames(FrameWord* out, unsigned max) noexcept {
  if (g_self_hi.load(std::memory_order_acquire) == 0) find_self();
  const unsigned n =
      native_backtrace(out, max, g_self_lo.load(std::memory_order_relaxed), g_self_hi.load(std::memory_order_relaxed));
  // A word with the top bit set would read as a Python frame; no user-space address has it.
  unsigned kept = 0;
  for (unsigned i = 0; i < n; ++i)
    if ((out[i] & trace::kPythonFrame) == 0) out[kept++] = out[i];
  return kept;
}

// --- Python frames -----------------------------------------------------------------------------

// The C API functions the walk uses, found with dlsym(RTLD_DEFAULT): in the python executable or
// the libpython it loaded. PyObject* is void* here: the shim has no Python headers.
struct PyApi {
  int (*is_initialized)();
  int (*is_finalizing)();   // Py_IsFinalizing (3.13) or _Py_IsFinalizing; may be null
  void* (*thread_state)();  // PyThreadState_GetUnchecked (3.13) or _PyThreadState_UncheckedGet
  int (*gil_check)();
  void* (*get_frame)();        // borrowed reference
  void* (*frame_back)(void*);  // new reference (3.9)
  void* (*frame_code)(void*);  // new reference (3.9)
  int (*frame_line)(void*);
  void* (*get_attr)(void*, const char*);   // new reference
  void* (*get_attr_object)(void*, void*);  // PyObject_GetAttr: new reference
  void* (*intern)(const char*);            // PyUnicode_InternFromString: new reference
  void* (*interpreter_of)(void*);          // PyThreadState_GetInterpreter (3.9)
  void* (*main_interpreter)();             // PyInterpreterState_Main
  const char* (*utf8)(void*, ssize_t*);
  void (*incref)(void*);
  void (*decref)(void*);
  void (*err_fetch)(void**, void**, void**);
  void (*err_restore)(void*, void*, void*);
  void (*err_clear)();
  int (*gc_disable)();  // PyGC_Disable (3.10); may be null
  int (*gc_enable)();
};

// Published once found; a Python older than 3.9 leaves it null for good (g_py_old).
std::atomic<const PyApi*> g_py{nullptr};
std::atomic<bool> g_py_old{false};
std::atomic<std::uint64_t> g_py_misses{0};

template <class Fn>
bool look_up(Fn& slot, DlsymFn sym, const char* name) noexcept {
  slot = reinterpret_cast<Fn>(sym(RTLD_DEFAULT, name));
  return slot != nullptr;
}

// The API, or null when this process has no Python we can walk. A process without libpython
// looks again now and then (a program may load an interpreter later): at the 1st, 2nd, 4th,
// 8th ... capture, so a plain CUDA program pays a few dlsym calls in all.
const PyApi* python_api() noexcept {
  if (const PyApi* p = g_py.load(std::memory_order_acquire)) return p;
  if (g_py_old.load(std::memory_order_relaxed)) return nullptr;
  const std::uint64_t miss = g_py_misses.fetch_add(1, std::memory_order_relaxed) + 1;
  if ((miss & (miss - 1)) != 0) return nullptr;
  DlsymFn sym = real_dlsym();
  PyApi api{};
  if (!look_up(api.is_initialized, sym, "Py_IsInitialized") || !look_up(api.gil_check, sym, "PyGILState_Check"))
    return nullptr;  // no interpreter (yet)
  if (!look_up(api.frame_back, sym, "PyFrame_GetBack") || !look_up(api.frame_code, sym, "PyFrame_GetCode")) {
    if (!g_py_old.exchange(true))
      log_line(LogLevel::debug,
               "Python before 3.9 (no PyFrame_GetBack / PyFrame_GetCode): call stacks have native frames only");
    return nullptr;
  }
  if (!look_up(api.thread_state, sym, "PyThreadState_GetUnchecked"))
    look_up(api.thread_state, sym, "_PyThreadState_UncheckedGet");
  if (!look_up(api.is_finalizing, sym, "Py_IsFinalizing")) look_up(api.is_finalizing, sym, "_Py_IsFinalizing");
  look_up(api.gc_disable, sym, "PyGC_Disable");
  look_up(api.gc_enable, sym, "PyGC_Enable");
  if (!api.gc_enable) api.gc_disable = nullptr;
  const bool complete =
      api.thread_state && look_up(api.get_frame, sym, "PyEval_GetFrame") &&
      look_up(api.frame_line, sym, "PyFrame_GetLineNumber") && look_up(api.get_attr, sym, "PyObject_GetAttrString") &&
      look_up(api.get_attr_object, sym, "PyObject_GetAttr") && look_up(api.intern, sym, "PyUnicode_InternFromString") &&
      look_up(api.interpreter_of, sym, "PyThreadState_GetInterpreter") &&
      look_up(api.main_interpreter, sym, "PyInterpreterState_Main") &&
      look_up(api.utf8, sym, "PyUnicode_AsUTF8AndSize") && look_up(api.incref, sym, "Py_IncRef") &&
      look_up(api.decref, sym, "Py_DecRef") && look_up(api.err_fetch, sym, "PyErr_Fetch") &&
      look_up(api.err_restore, sym, "PyErr_Restore") && look_up(api.err_clear, sym, "PyErr_Clear");
  if (!complete) {
    if (!g_py_old.exchange(true))
      log_line(LogLevel::debug, "this Python lacks a function of the C API the stack walk needs: native frames only");
    return nullptr;
  }
  auto* fresh = new (std::nothrow) PyApi(api);
  if (!fresh) return nullptr;
  const PyApi* expected = nullptr;
  if (!g_py.compare_exchange_strong(expected, fresh, std::memory_order_acq_rel)) {
    delete fresh;  // another thread published the same functions first
    return expected;
  }
  log_line(LogLevel::debug, "Python found: call stacks get Python frames on threads that hold the GIL");
  return fresh;
}

// The attribute names "co_filename" and "co_name" as interned strings of the main interpreter,
// made at the first walk there and kept for the life of the process (the only references the
// walk keeps, as a C extension keeps its module's names): PyObject_GetAttrString would make and
// hash a new string for every frame, most of a frame's cost. Other interpreters (isolated
// sub-interpreters own their strings) take the slow path.
std::atomic<void*> g_co_filename{nullptr};
std::atomic<void*> g_co_name{nullptr};

void* attribute_name(const PyApi& py, std::atomic<void*>& slot, const char* text) noexcept {
  if (void* name = slot.load(std::memory_order_acquire)) return name;
  void* fresh = py.intern(text);
  if (!fresh) {
    py.err_clear();
    return nullptr;
  }
  void* expected = nullptr;
  if (slot.compare_exchange_strong(expected, fresh, std::memory_order_acq_rel)) return fresh;
  py.decref(fresh);  // another thread (a build without the GIL) made it first
  return expected;
}

// A string attribute of `code` as UTF-8, kept alive by `*holder` (a new reference, or null).
// `name` is the attribute's interned name, or null for the slow path.
std::string_view code_text(const PyApi& py, void* code, void* name, const char* attr, void** holder) noexcept {
  *holder = name ? py.get_attr_object(code, name) : py.get_attr(code, attr);
  if (*holder) {
    ssize_t size = 0;
    if (const char* text = py.utf8(*holder, &size); text && size >= 0) return {text, static_cast<std::size_t>(size)};
  }
  py.err_clear();  // no such attribute, or not encodable as UTF-8 (lone surrogates)
  return "??";
}

unsigned python_frames(FrameWord* out, unsigned max, trace::StackInterner& table) noexcept {
  const PyApi* api = python_api();
  if (!api) return 0;
  const PyApi& py = *api;
  // Never call Python from a thread that does not hold the GIL, nor outside the interpreter's life.
  if (!py.is_initialized() || (py.is_finalizing && py.is_finalizing()) || !py.thread_state() || py.gil_check() != 1)
    return 0;
  void *type = nullptr, *value = nullptr, *traceback = nullptr;
  py.err_fetch(&type, &value, &traceback);
  const int gc_was_enabled = py.gc_disable ? py.gc_disable() : 0;
  unsigned n = 0;
  void *co_filename = nullptr, *co_name = nullptr;
  if (py.interpreter_of(py.thread_state()) == py.main_interpreter()) {
    co_filename = attribute_name(py, g_co_filename, "co_filename");
    co_name = co_filename ? attribute_name(py, g_co_name, "co_name") : nullptr;
    if (!co_name) co_filename = nullptr;
  }
  std::string_view last_file;
  std::uint64_t last_file_hash = 0;
  void* frame = py.get_frame();
  if (frame) py.incref(frame);
  while (frame && n < max) {
    if (void* code = py.frame_code(frame)) {
      const int line = py.frame_line(frame);
      void *file_ref = nullptr, *name_ref = nullptr;
      const std::string_view file = code_text(py, code, co_filename, "co_filename", &file_ref);
      const std::string_view name = code_text(py, code, co_name, "co_name", &name_ref);
      // A stack's frames often share a file (the same string object of the module's code): its
      // text is hashed once per walk.
      if (file.data() != last_file.data() || file.size() != last_file.size()) {
        last_file = file;
        last_file_hash = trace::StackInterner::hash_text(file);
      }
      if (const std::uint32_t id = table.intern_code(file, last_file_hash, name); id != 0)
        out[n++] = trace::python_frame(id, line > 0 ? static_cast<std::uint32_t>(line) : 0);
      if (file_ref) py.decref(file_ref);
      if (name_ref) py.decref(name_ref);
      py.decref(code);
    }
    void* back = py.frame_back(frame);
    py.decref(frame);
    frame = back;
  }
  if (frame) py.decref(frame);
  if (gc_was_enabled) py.gc_enable();
  py.err_restore(type, value, traceback);
  return n;
}

// --- capture ---------------------------------------------------------------------------------

std::uint32_t capture() noexcept {
  const StackSettings& s = config().stacks;
  if (!s.native && !s.python) return 0;
  trace::TraceWriter* w = trace_writer();
  if (!w || !w->accepting()) return 0;
  ThreadEntry& t = t_entry;
  if (t.capturing) return 0;  // entered again from inside a capture: no stack, no recursion
  t.capturing = true;
  FrameWord words[2 * StackSettings::kMaxDepth];
  unsigned n = s.native ? native_frames(words, s.depth) : 0;
  const unsigned python = s.python ? python_frames(words + n, s.depth, w->stacks()) : 0;
  n += python;
  t.capturing = false;
  bump(g_counters.stacks_captured);
  if (python != 0) bump(g_counters.python_stacks);
  const std::uint32_t id = w->stacks().intern_stack(words, n);
  if (id == 0 && n != 0 && w->stacks().full()) {
    static std::atomic<bool> said{false};
    if (!said.exchange(true))
      log_line(LogLevel::warn,
               "the table of call stacks is full ({} stacks or {} Python functions); later allocations are traced "
               "without their stack",
               trace::StackInterner::kMaxStacks, trace::StackInterner::kMaxCodes);
  }
  return id;
}

// Whether a stack can ever be captured in this process: there is a trace writer and the settings
// ask for frames. Settled at the first call (the writer is made once and lives to the end), so
// that a process without a trace pays one relaxed load per allocation.
enum : int { kUnknown, kNever, kMaybe };
std::atomic<int> g_capturing{kUnknown};

bool may_capture() noexcept {
  const int c = g_capturing.load(std::memory_order_relaxed);
  if (c != kUnknown) return c == kMaybe;
  const StackSettings& s = config().stacks;
  const bool maybe = (s.native || s.python) && trace_writer() != nullptr;
  g_capturing.store(maybe ? kMaybe : kNever, std::memory_order_relaxed);
  return maybe;
}

}  // namespace

std::uint32_t call_stack() noexcept {
  if (!may_capture()) return 0;
  ThreadEntry& t = t_entry;
  if (t.stack_taken) return t.stack;
  const std::uint32_t id = capture();
  // Kept for the rest of the outermost call; outside any hook (no call to share it with) and
  // inside a capture (the outer capture's result is the call's) it is not.
  if (t.entry != 0 && !t.capturing) {
    t.stack = id;
    t.stack_taken = true;
  }
  return id;
}

std::uint32_t current_call_stack() noexcept { return t_entry.stack_taken ? t_entry.stack : 0; }

}  // namespace vramtrace::shim
