// The lock-free stack and Python-function tables (Note [stacks without locks] in
// vramtrace/trace/stack_interner.h).
#include "vramtrace/trace/stack_interner.h"

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <new>
#include <type_traits>

namespace vramtrace::trace {

namespace {

constexpr std::uint32_t kStackSlots = StackInterner::kMaxStacks * 2;
constexpr std::uint32_t kCodeSlots = StackInterner::kMaxCodes * 2;
static_assert((kStackSlots & (kStackSlots - 1)) == 0 && (kCodeSlots & (kCodeSlots - 1)) == 0);

inline std::uint64_t mix(std::uint64_t h, std::uint64_t v) noexcept {
  h ^= v;
  h *= 0x9E3779B97F4A7C15ull;
  return h ^ (h >> 29);
}

std::uint64_t hash_words(const FrameWord* w, std::size_t n) noexcept {
  std::uint64_t h = 0x243F6A8885A308D3ull ^ n;
  for (std::size_t i = 0; i < n; ++i) h = mix(h, w[i]);
  return h | 1;  // never 0
}

}  // namespace

std::uint64_t StackInterner::hash_text(std::string_view s) noexcept {
  // Eight bytes a step with one multiply (the path of a Python file is most of a frame's text);
  // the avalanche once, at the end.
  const char* p = s.data();
  std::size_t n = s.size();
  std::uint64_t h = 0x13198A2E03707344ull ^ (n * 0x9E3779B97F4A7C15ull);
  for (; n >= 8; n -= 8, p += 8) {
    std::uint64_t v;
    std::memcpy(&v, p, 8);
    h = (h ^ v) * 0x100000001B3ull;
  }
  std::uint64_t tail = 0;
  std::memcpy(&tail, p, n);
  return mix(h, tail);
}

namespace {

// Slots are plain pointers accessed through atomic_ref, so that the calloc'd tables need no
// construction.
template <class T>
T* load(T* const& slot) noexcept {
  return std::atomic_ref<T*>(const_cast<T*&>(slot)).load(std::memory_order_acquire);
}

// The next id of a table, or 0 when it has none left (checked first, so that a full table's
// counter stops growing at kMax plus the threads racing past the check).
std::uint32_t take_id(std::atomic<std::uint32_t>& next, std::uint32_t max) noexcept {
  if (next.load(std::memory_order_relaxed) > max) return 0;
  const std::uint32_t id = next.fetch_add(1, std::memory_order_relaxed);
  return id > max ? 0 : id;
}

}  // namespace

// One allocation: the slot arrays and the id arrays of both tables. calloc'd, so that the pages
// are mapped zero-filled on first touch (the tables are mostly empty).
struct StackInterner::Tables {
  Stack* stack_slots[kStackSlots];
  Stack* stacks_by_id[kMaxStacks + 1];
  Code* code_slots[kCodeSlots];
  Code* codes_by_id[kMaxCodes + 1];
  std::atomic<std::uint32_t> next_stack;
  std::atomic<std::uint32_t> next_code;
};

StackInterner::~StackInterner() {
  // The shim's interner lives until the process ends; writers and tests that own one destroy it
  // after every reader of it is gone (a TraceWriter joins its thread first). Every node has an id
  // (one that lost a race for a slot too), so freeing by id frees each node once.
  Tables* t = tables_.load(std::memory_order_acquire);
  if (!t) return;
  const std::uint32_t stacks = std::min(t->next_stack.load(std::memory_order_acquire), kMaxStacks + 1);
  for (std::uint32_t id = 1; id < stacks; ++id) ::operator delete(t->stacks_by_id[id]);
  const std::uint32_t codes = std::min(t->next_code.load(std::memory_order_acquire), kMaxCodes + 1);
  for (std::uint32_t id = 1; id < codes; ++id) ::operator delete(t->codes_by_id[id]);
  std::free(t);
}

StackInterner::Tables* StackInterner::tables() noexcept {
  Tables* t = tables_.load(std::memory_order_acquire);
  if (t) return t;
  static_assert(std::is_trivially_destructible_v<Tables>);
  void* raw = std::calloc(1, sizeof(Tables));
  if (!raw) {
    full_.store(true, std::memory_order_relaxed);
    return nullptr;
  }
  auto* fresh = static_cast<Tables*>(raw);
  // The counters of calloc'd memory are 0; ids start at 1.
  new (&fresh->next_stack) std::atomic<std::uint32_t>(1);
  new (&fresh->next_code) std::atomic<std::uint32_t>(1);
  Tables* expected = nullptr;
  if (tables_.compare_exchange_strong(expected, fresh, std::memory_order_acq_rel)) return fresh;
  std::free(raw);  // another thread published first
  return expected;
}

std::uint32_t StackInterner::intern_stack(const FrameWord* frames, std::size_t n) noexcept {
  if (n == 0 || n > 0xFFFF) return 0;
  Tables* t = tables();
  if (!t) return 0;
  const std::uint64_t h = hash_words(frames, n);
  Stack* fresh = nullptr;
  for (std::uint32_t probe = 0, i = static_cast<std::uint32_t>(h) & (kStackSlots - 1); probe < kStackSlots;
       ++probe, i = (i + 1) & (kStackSlots - 1)) {
    Stack* cur = load(t->stack_slots[i]);
    if (cur == nullptr) {
      if (fresh == nullptr) {
        const std::uint32_t id = take_id(t->next_stack, kMaxStacks);
        if (id == 0) {
          full_.store(true, std::memory_order_relaxed);
          return 0;
        }
        void* raw = ::operator new(sizeof(Stack) + n * sizeof(FrameWord), std::nothrow);
        if (!raw) {
          full_.store(true, std::memory_order_relaxed);
          return 0;
        }
        fresh = new (raw) Stack{h, id, static_cast<std::uint32_t>(n)};
        std::memcpy(fresh + 1, frames, n * sizeof(FrameWord));
        std::atomic_ref<Stack*>(t->stacks_by_id[id]).store(fresh, std::memory_order_release);
      }
      if (std::atomic_ref<Stack*>(t->stack_slots[i])
              .compare_exchange_strong(cur, fresh, std::memory_order_acq_rel, std::memory_order_acquire))
        return fresh->id;
      // Another thread filled the slot first: `cur` is its node; compare with it below.
    }
    if (cur->hash == h && cur->size == n && std::memcmp(cur->frames(), frames, n * sizeof(FrameWord)) == 0)
      return cur->id;  // `fresh`, if built, stays behind its id only: no event names it
  }
  full_.store(true, std::memory_order_relaxed);
  return 0;
}

std::uint32_t StackInterner::intern_code(std::string_view file, std::string_view name) noexcept {
  return intern_code(file, hash_text(file), name);
}

std::uint32_t StackInterner::intern_code(std::string_view file, std::uint64_t file_hash,
                                         std::string_view name) noexcept {
  if (file.size() > 0xFFFFFF || name.size() > 0xFFFFFF) return 0;
  Tables* t = tables();
  if (!t) return 0;
  const std::uint64_t h = mix(file_hash, hash_text(name)) | 1;
  Code* fresh = nullptr;
  for (std::uint32_t probe = 0, i = static_cast<std::uint32_t>(h) & (kCodeSlots - 1); probe < kCodeSlots;
       ++probe, i = (i + 1) & (kCodeSlots - 1)) {
    Code* cur = load(t->code_slots[i]);
    if (cur == nullptr) {
      if (fresh == nullptr) {
        const std::uint32_t id = take_id(t->next_code, kMaxCodes);
        if (id == 0) {
          full_.store(true, std::memory_order_relaxed);
          return 0;
        }
        void* raw = ::operator new(sizeof(Code) + file.size() + name.size(), std::nothrow);
        if (!raw) {
          full_.store(true, std::memory_order_relaxed);
          return 0;
        }
        fresh = new (raw) Code{h, id, static_cast<std::uint32_t>(file.size()), static_cast<std::uint32_t>(name.size())};
        char* text = reinterpret_cast<char*>(fresh + 1);
        if (!file.empty()) std::memcpy(text, file.data(), file.size());
        if (!name.empty()) std::memcpy(text + file.size(), name.data(), name.size());
        std::atomic_ref<Code*>(t->codes_by_id[id]).store(fresh, std::memory_order_release);
      }
      if (std::atomic_ref<Code*>(t->code_slots[i])
              .compare_exchange_strong(cur, fresh, std::memory_order_acq_rel, std::memory_order_acquire))
        return fresh->id;
    }
    if (cur->hash == h && cur->file() == file && cur->name() == name) return cur->id;
  }
  full_.store(true, std::memory_order_relaxed);
  return 0;
}

const StackInterner::Stack* StackInterner::stack(std::uint32_t id) const noexcept {
  const Tables* t = tables_.load(std::memory_order_acquire);
  if (!t || id == 0 || id > kMaxStacks) return nullptr;
  return load(t->stacks_by_id[id]);
}

const StackInterner::Code* StackInterner::code(std::uint32_t id) const noexcept {
  const Tables* t = tables_.load(std::memory_order_acquire);
  if (!t || id == 0 || id > kMaxCodes) return nullptr;
  return load(t->codes_by_id[id]);
}

}  // namespace vramtrace::trace
