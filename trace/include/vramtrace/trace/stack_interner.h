// The distinct call stacks of a traced process, each stored once and named by an id that events
// carry (Event::stack_id), so that a training loop that repeats a few hundred stacks millions of
// times writes each of them once (docs/trace-format.md, "stack").
//
// Note [stacks without locks]: the shim interns a stack on the allocating thread, in any thread
// that calls CUDA, possibly with the caching allocator's lock held further up (never while
// unwinding; see shim/src/base/stacks.h). So interning takes no lock at all: two open-addressing
// tables of node pointers (stacks, and the (file, function) pairs of Python frames), filled by
// compare-and-swap. A node is built completely and stored in the id table before the
// compare-and-swap publishes it, so that whoever finds a node by content, or an id in an event,
// also finds its frames (the writer thread reads them by id through the ring buffer's
// release/acquire). Nodes are never freed or changed. Two threads that build the same new node at
// once both publish it in the id table, and the loser's id names a node no event refers to: ids
// are unique but may have holes. A fork child inherits the tables whole (no lock can be held).
//
// Capacity is fixed: kMaxStacks stacks and kMaxCodes Python functions, tables at most half full
// (short probes). The tables are allocated at the first intern (about 4.5 MiB of address space,
// calloc'd, so that pages are touched as the tables fill). When a table is full, new stacks (or Python frames) are not
// recorded and full() says so; events then carry no stack.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace vramtrace::trace {

/// One frame of a captured stack, as the shim records it: either a native return address (the
/// value of the instruction after the call, as the unwinder reports it), or a Python frame
/// (kPythonFrame set): the id of its (file, function) pair (StackInterner::intern_code) and its
/// line.
using FrameWord = std::uint64_t;
inline constexpr FrameWord kPythonFrame = FrameWord{1} << 63;
inline constexpr unsigned kPythonLineBits = 24;
inline constexpr std::uint32_t kMaxPythonLine = (std::uint32_t{1} << kPythonLineBits) - 1;

/// The word of a Python frame: code id `code` (from intern_code, at most 2^39 - 1) at `line`
/// (1-based; 0 = unknown; lines above kMaxPythonLine read as unknown).
constexpr FrameWord python_frame(std::uint32_t code, std::uint32_t line) noexcept {
  return kPythonFrame | (FrameWord{code} << kPythonLineBits) | (line > kMaxPythonLine ? 0 : line);
}
constexpr bool is_python_frame(FrameWord w) noexcept { return (w & kPythonFrame) != 0; }
constexpr std::uint32_t python_code(FrameWord w) noexcept {
  return static_cast<std::uint32_t>((w & ~kPythonFrame) >> kPythonLineBits);
}
constexpr std::uint32_t python_line(FrameWord w) noexcept { return static_cast<std::uint32_t>(w & kMaxPythonLine); }

/// See the file comment. All members are thread-safe and lock-free; none allocates except
/// intern_* for a new stack or function (and the first call, for the tables).
class StackInterner {
 public:
  static constexpr std::uint32_t kMaxStacks = std::uint32_t{1} << 17;
  static constexpr std::uint32_t kMaxCodes = std::uint32_t{1} << 16;

  /// A stack: `size` frames, innermost first.
  struct Stack {
    std::uint64_t hash;
    std::uint32_t id;
    std::uint32_t size;
    const FrameWord* frames() const noexcept { return reinterpret_cast<const FrameWord*>(this + 1); }
  };
  /// A Python function: its code object's co_filename and co_name, UTF-8.
  struct Code {
    std::uint64_t hash;
    std::uint32_t id;
    std::uint32_t file_size;
    std::uint32_t name_size;
    std::string_view file() const noexcept { return {reinterpret_cast<const char*>(this + 1), file_size}; }
    std::string_view name() const noexcept { return {reinterpret_cast<const char*>(this + 1) + file_size, name_size}; }
  };

  StackInterner() noexcept = default;
  StackInterner(const StackInterner&) = delete;
  StackInterner& operator=(const StackInterner&) = delete;
  ~StackInterner();

  /// The id of the stack `frames[0..n)` (innermost first), adding it when new. 0 when n == 0,
  /// when the table is full, or when host memory runs out.
  std::uint32_t intern_stack(const FrameWord* frames, std::size_t n) noexcept;
  /// The id of the Python function (file, name), adding it when new; 0 as intern_stack.
  std::uint32_t intern_code(std::string_view file, std::string_view name) noexcept;
  /// The same with `file_hash` = hash_text(file) given, for a caller that meets the same file in
  /// frame after frame (a stack walk hashes each file once).
  std::uint32_t intern_code(std::string_view file, std::uint64_t file_hash, std::string_view name) noexcept;
  /// The hash intern_code uses for a text. Pure.
  static std::uint64_t hash_text(std::string_view s) noexcept;

  /// The stack or function of an id that intern_* returned; null for 0 or any other id.
  const Stack* stack(std::uint32_t id) const noexcept;
  const Code* code(std::uint32_t id) const noexcept;

  /// True once a stack or a function could not be added (table full or no memory).
  bool full() const noexcept { return full_.load(std::memory_order_relaxed); }

 private:
  struct Tables;
  Tables* tables() noexcept;

  std::atomic<Tables*> tables_{nullptr};
  std::atomic<bool> full_{false};
};

}  // namespace vramtrace::trace
