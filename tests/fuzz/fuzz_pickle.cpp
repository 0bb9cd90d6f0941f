// Fuzz target: the pickle reader (reporter/readers/pickle.cpp) over raw bytes, with and without the
// snapshot reader's streaming rule, and once with tight limits.
//
// Properties checked on every input:
//  - malformed or refused input raises PickleError (never another exception, never a crash);
//  - (nothing is executed: the reader has no code path that could; pickles that name callables
//    are tested one by one in tests/reliability/test_untrusted.cpp);
//  - the tight limits hold: no value was built nested deeper than max_depth (cycles through the
//    memo are legal pickles, so this is the depth recorded at construction), the stack and memo
//    stay within their bounds, and the bytes held never passed the memory budget (floor + bytes
//    per input byte: the input is not compressed here);
//  - the memory count is honest: after STOP every value reachable from the result was charged at
//    least its footprint, and the bytes counted as held cover all of them;
//  - a result exists after STOP.
#include <algorithm>
#include <cstring>
#include <string>
#include <unordered_set>
#include <vector>

#include "fuzz_check.h"
#include "readers/pickle.h"
#include "vramtrace/trace/byte_source.h"

using namespace vramtrace;
using namespace vramtrace::pickle;

namespace {

// The input as a ByteSource, without files.
class MemorySource final : public ByteSource {
 public:
  MemorySource(const std::uint8_t* data, std::size_t size) : data_(data), size_(size) {}
  std::size_t read(char* buf, std::size_t n) override {
    const std::size_t k = std::min(n, size_ - pos_);
    if (k) std::memcpy(buf, data_ + pos_, k);
    pos_ += k;
    return k;
  }
  bool truncated() const override { return false; }
  std::uint64_t bytes_read() const override { return pos_; }
  std::uint64_t bytes_total() const override { return size_; }
  Compression compression() const override { return Compression::none; }
  const std::string& path() const override { return path_; }

 private:
  const std::uint8_t* data_;
  std::size_t size_;
  std::size_t pos_ = 0;
  std::string path_ = "fuzz-input";
};

// The deepest nesting the reader recorded for any value reachable from `v` (Value::depth, which
// the reader checks against Limits::max_depth as it builds). Walked iteratively with a visited
// set: the memo can make cycles (a list appended to itself), so the structural depth of a valid
// pickle can be unbounded and only the construction-time depth can be limited.
// The reachable values of `v`, each once (the memo can make cycles and share values).
std::vector<const Value*> reachable(const Value& v) {
  std::vector<const Value*> todo{&v}, out;
  std::unordered_set<const Value*> seen{&v};
  while (!todo.empty()) {
    const Value* p = todo.back();
    todo.pop_back();
    out.push_back(p);
    auto visit = [&](const ValuePtr& c) {
      if (c && seen.insert(c.get()).second) todo.push_back(c.get());
    };
    for (const auto& c : p->items) visit(c);
    for (const auto& [k, val] : p->entries) {
      visit(k);
      visit(val);
    }
  }
  return out;
}

std::uint32_t max_recorded_depth(const Value& v) {
  std::vector<const Value*> todo{&v};
  std::unordered_set<const Value*> seen{&v};
  std::uint32_t deepest = 0;
  while (!todo.empty()) {
    const Value* p = todo.back();
    todo.pop_back();
    deepest = std::max(deepest, p->depth);
    auto visit = [&](const ValuePtr& c) {
      if (c && seen.insert(c.get()).second) todo.push_back(c.get());
    };
    for (const auto& c : p->items) visit(c);
    for (const auto& [k, val] : p->entries) {
      visit(k);
      visit(val);
    }
  }
  return deepest;
}

void run(const std::uint8_t* data, std::size_t size, bool stream, const Limits& limits, bool check_limits) {
  MemorySource src(data, size);
  Unpickler u(src, "fuzz-input", limits);
  std::uint64_t items = 0;
  if (stream) u.stream_key("device_traces", [&](std::int32_t, ValuePtr item) { ++items; });
  // Between opcodes (after a refusal the last charge may be above it, by design).
  auto within_budget = [&] {
    FUZZ_CHECK(u.held_bytes() <= limits.budget_floor_bytes + limits.budget_per_byte * u.offset(),
               "held %llu bytes after %llu input bytes", static_cast<unsigned long long>(u.held_bytes()),
               static_cast<unsigned long long>(u.offset()));
  };
  try {
    while (u.run()) {
      if (check_limits) {
        FUZZ_CHECK(u.stack_size() <= limits.max_stack && u.memo_size() <= limits.max_memo, "stack %zu memo %zu",
                   u.stack_size(), u.memo_size());
        within_budget();
      }
    }
    if (check_limits) within_budget();
    FUZZ_CHECK(u.result() != nullptr, "STOP without a result");
    if (check_limits) {
      const std::uint32_t d = max_recorded_depth(*u.result());
      FUZZ_CHECK(d <= limits.max_depth, "a value nests %u deep, limit %u", d, limits.max_depth);
    }
    if (!stream) {
      // Nothing was handed out, so everything reachable is still counted.
      std::uint64_t total = 0;
      for (const Value* v : reachable(*u.result())) {
        FUZZ_CHECK(v->cost >= footprint(*v), "a value of %llu bytes was charged %llu",
                   static_cast<unsigned long long>(footprint(*v)), static_cast<unsigned long long>(v->cost));
        total += footprint(*v);
      }
      FUZZ_CHECK(u.held_bytes() >= total, "%llu bytes reachable, %llu counted", static_cast<unsigned long long>(total),
                 static_cast<unsigned long long>(u.held_bytes()));
    }
  } catch (const PickleError& e) {
    FUZZ_CHECK(e.what()[0] != '\0', "PickleError without a message");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  run(data, size, false, Limits{}, false);
  run(data, size, true, Limits{}, false);
  Limits tight;
  tight.max_string_bytes = 256;
  tight.max_int_bytes = 16;
  tight.max_stack = 64;
  tight.max_memo = 64;
  tight.max_depth = 8;
  tight.budget_floor_bytes = 64u << 10;
  tight.budget_per_byte = 8;
  run(data, size, true, tight, true);
  return 0;
}
