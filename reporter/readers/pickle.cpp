// Safe streaming pickle reader (see pickle.h). Opcode semantics follow CPython's
// Lib/pickle.py (_Unpickler) and Lib/pickletools.py; only data-building opcodes are executed.
#include "readers/pickle.h"

#include <cstring>

#include <fmt/format.h>

namespace vramtrace::pickle {

Value::~Value() {
  if (items.empty() && entries.empty()) return;
  // Iterative teardown: children whose last owner we are are emptied into `pending` before they
  // are destroyed, so no destructor recurses.
  std::vector<ValuePtr> pending;
  auto take = [&pending](Value& v) {
    for (auto& c : v.items)
      if (c) pending.push_back(std::move(c));
    v.items.clear();
    for (auto& [k, x] : v.entries) {
      if (k) pending.push_back(std::move(k));
      if (x) pending.push_back(std::move(x));
    }
    v.entries.clear();
  };
  take(*this);
  while (!pending.empty()) {
    ValuePtr p = std::move(pending.back());
    pending.pop_back();
    if (p.use_count() == 1) take(*p);
  }
}

bool Value::to_u64(std::uint64_t& out) const {
  if (kind == Kind::boolean) {
    out = boolean ? 1 : 0;
    return true;
  }
  if (kind == Kind::integer) {
    if (integer < 0) return false;
    out = static_cast<std::uint64_t>(integer);
    return true;
  }
  if (kind == Kind::big_integer) {
    const auto* b = reinterpret_cast<const unsigned char*>(text.data());
    std::size_t n = text.size();
    if (n == 0 || (b[n - 1] & 0x80)) return false;  // negative
    for (std::size_t i = 8; i < n; ++i)
      if (b[i] != 0) return false;  // >= 2^64
    std::uint64_t v = 0;
    for (std::size_t i = 0; i < std::min<std::size_t>(n, 8); ++i) v |= std::uint64_t{b[i]} << (8 * i);
    out = v;
    return true;
  }
  return false;
}

bool Value::to_i64(std::int64_t& out) const {
  if (kind == Kind::boolean) {
    out = boolean ? 1 : 0;
    return true;
  }
  if (kind == Kind::integer || kind == Kind::big_integer) {
    out = integer;
    return true;
  }
  return false;
}

namespace {
// A value's node as make_shared allocates it: the Value, the control block's vtable pointer and
// two counts (16 bytes), and the allocator's chunk header (8, rounded to 16).
constexpr std::uint64_t kNodeBytes = sizeof(Value) + 32;
// One node of an unordered_map entry with its bucket (estimate: next pointer, key, value, hash).
constexpr std::uint64_t kMapNodeBytes = 64;
}  // namespace

std::uint64_t footprint(const Value& v) noexcept {
  std::uint64_t n = kNodeBytes;
  // Strings of up to 15 bytes live inside std::string itself (libstdc++ and libc++ alike).
  if (v.text.capacity() > std::string().capacity()) n += v.text.capacity() + 1;
  n += v.items.capacity() * sizeof(ValuePtr);
  n += v.entries.capacity() * sizeof(std::pair<ValuePtr, ValuePtr>);
  return n;
}

const Value* Value::find(std::string_view key) const {
  if (kind != Kind::dict) return nullptr;
  for (const auto& [k, v] : entries)
    if (k && k->kind == Kind::string && k->text == key) return v.get();
  return nullptr;
}

const char* kind_name(Kind kind) noexcept {
  switch (kind) {
    case Kind::none:
      return "NoneType";
    case Kind::boolean:
      return "bool";
    case Kind::integer:
    case Kind::big_integer:
      return "int";
    case Kind::floating:
      return "float";
    case Kind::string:
      return "str";
    case Kind::bytes:
      return "bytes";
    case Kind::list:
      return "list";
    case Kind::tuple:
      return "tuple";
    case Kind::dict:
      return "dict";
    case Kind::set:
      return "set";
  }
  return "unknown";
}

const char* opcode_name(std::uint8_t op) noexcept {
  switch (op) {
    case '(':
      return "MARK";
    case '.':
      return "STOP";
    case '0':
      return "POP";
    case '1':
      return "POP_MARK";
    case '2':
      return "DUP";
    case 'F':
      return "FLOAT";
    case 'I':
      return "INT";
    case 'J':
      return "BININT";
    case 'K':
      return "BININT1";
    case 'L':
      return "LONG";
    case 'M':
      return "BININT2";
    case 'N':
      return "NONE";
    case 'P':
      return "PERSID";
    case 'Q':
      return "BINPERSID";
    case 'R':
      return "REDUCE";
    case 'S':
      return "STRING";
    case 'T':
      return "BINSTRING";
    case 'U':
      return "SHORT_BINSTRING";
    case 'V':
      return "UNICODE";
    case 'X':
      return "BINUNICODE";
    case 'a':
      return "APPEND";
    case 'b':
      return "BUILD";
    case 'c':
      return "GLOBAL";
    case 'd':
      return "DICT";
    case '}':
      return "EMPTY_DICT";
    case 'e':
      return "APPENDS";
    case 'g':
      return "GET";
    case 'h':
      return "BINGET";
    case 'i':
      return "INST";
    case 'j':
      return "LONG_BINGET";
    case 'l':
      return "LIST";
    case ']':
      return "EMPTY_LIST";
    case 'o':
      return "OBJ";
    case 'p':
      return "PUT";
    case 'q':
      return "BINPUT";
    case 'r':
      return "LONG_BINPUT";
    case 's':
      return "SETITEM";
    case 't':
      return "TUPLE";
    case ')':
      return "EMPTY_TUPLE";
    case 'u':
      return "SETITEMS";
    case 'G':
      return "BINFLOAT";
    case 0x80:
      return "PROTO";
    case 0x81:
      return "NEWOBJ";
    case 0x82:
      return "EXT1";
    case 0x83:
      return "EXT2";
    case 0x84:
      return "EXT4";
    case 0x85:
      return "TUPLE1";
    case 0x86:
      return "TUPLE2";
    case 0x87:
      return "TUPLE3";
    case 0x88:
      return "NEWTRUE";
    case 0x89:
      return "NEWFALSE";
    case 0x8a:
      return "LONG1";
    case 0x8b:
      return "LONG4";
    case 'B':
      return "BINBYTES";
    case 'C':
      return "SHORT_BINBYTES";
    case 0x8c:
      return "SHORT_BINUNICODE";
    case 0x8d:
      return "BINUNICODE8";
    case 0x8e:
      return "BINBYTES8";
    case 0x8f:
      return "EMPTY_SET";
    case 0x90:
      return "ADDITEMS";
    case 0x91:
      return "FROZENSET";
    case 0x92:
      return "NEWOBJ_EX";
    case 0x93:
      return "STACK_GLOBAL";
    case 0x94:
      return "MEMOIZE";
    case 0x95:
      return "FRAME";
    case 0x96:
      return "BYTEARRAY8";
    case 0x97:
      return "NEXT_BUFFER";
    case 0x98:
      return "READONLY_BUFFER";
    default:
      return "unknown";
  }
}

namespace {
constexpr std::size_t kBuf = 1u << 20;
constexpr std::uint8_t kRoleOuter = 1;
constexpr std::uint8_t kRoleStreamed = 2;
constexpr std::uint8_t kRoleForgotten = 3;  // the memo's placeholders for dropped values
}  // namespace

Unpickler::Unpickler(ByteSource& src, std::string path, Limits limits)
    : src_(src), path_(std::move(path)), limits_(limits), buf_(kBuf) {
  pool_.resize(3);
  pool_refs_.resize(3, 0);
  pool_[1] = std::make_shared<Value>(Kind::list);
  pool_[1]->role = kRoleForgotten;
  pool_[2] = std::make_shared<Value>(Kind::dict);
  pool_[2]->role = kRoleForgotten;
}

void Unpickler::stream_key(std::string key, std::function<void(std::int32_t, ValuePtr)> on_item) {
  stream_key_ = std::move(key);
  on_item_ = std::move(on_item);
}

void Unpickler::fail(const std::string& what) const {
  // A damaged compressed stream decodes to wrong bytes before its checksum says so: then the
  // damage, not the pickle's content, is the error.
  if (std::string damage = damage_after(src_); !damage.empty())
    throw PickleError(fmt::format("{}; the file is damaged, so the pickle at offset {} is not what was written ({})",
                                  damage, op_offset_, what));
  throw PickleError(
      fmt::format("{}: offset {}: opcode {} (0x{:02x}): {}", path_, op_offset_, opcode_name(op_), op_, what));
}

void Unpickler::fail_truncated() const {
  throw PickleError(fmt::format(
      "{}: offset {}: the pickle ends early inside opcode {} (0x{:02x}) at offset {}: the file "
      "is truncated{}",
      path_, base_ + len_, opcode_name(op_), op_, op_offset_,
      src_.truncated() ? fmt::format(" (its {} stream is cut off)", compression_name(src_.compression())) : ""));
}

std::uint64_t Unpickler::budget_bytes() const {
  auto affine = [](std::uint64_t floor, std::uint64_t per, std::uint64_t n) {
    std::uint64_t x = 0;
    if (__builtin_mul_overflow(per, n, &x) || __builtin_add_overflow(x, floor, &x)) return UINT64_MAX;
    return x;
  };
  std::uint64_t b = affine(limits_.budget_floor_bytes, limits_.budget_per_byte, offset());
  if (src_.compression() != Compression::none)
    b = std::min(b, affine(limits_.budget_floor_bytes, limits_.budget_per_compressed_byte, src_.bytes_read()));
  return b;
}

void Unpickler::check_budget() {
  // Called after value_bytes_ or table_bytes_ grew. The budget only grows with the offset, so
  // anything at or below a peak that passed still passes.
  const std::uint64_t held = held_bytes();
  if (held <= peak_held_) return;
  const std::uint64_t limit = budget_bytes();
  if (held > limit) {
    const std::uint64_t floor = limits_.budget_floor_bytes;
    const std::string floor_text =
        floor % (1u << 20) == 0 ? fmt::format("{} MiB", floor >> 20) : fmt::format("{} bytes", floor);
    std::string rule =
        fmt::format("{} + {} bytes per pickle byte read ({} so far)", floor_text, limits_.budget_per_byte, offset());
    if (src_.compression() != Compression::none)
      rule += fmt::format(", and at most {} + {} bytes per compressed byte read ({} so far)", floor_text,
                          limits_.budget_per_compressed_byte, src_.bytes_read());
    fail(fmt::format(
        "memory limit: the values built so far take {} bytes, more than the {} bytes this input may use ({}); "
        "real PyTorch snapshots need far less, so the file is damaged or not a snapshot",
        held, limit, rule));
  }
  peak_held_ = held;
}

ValuePtr Unpickler::make(Kind kind) {
  auto v = std::make_shared<Value>(kind);
  v->cost = kNodeBytes;
  value_bytes_ += kNodeBytes;
  check_budget();
  return v;
}

void Unpickler::recharge(Value& v) {
  const std::uint64_t now = footprint(v);
  if (now <= v.cost) return;
  const std::uint64_t grown = now - v.cost;
  v.cost = now;
  value_bytes_ += grown;
  check_budget();
}

template <class Container>
void Unpickler::charge_table(const Container& c, std::size_t capacity_before) {
  if (c.capacity() <= capacity_before) return;
  const std::uint64_t grown = (c.capacity() - capacity_before) * sizeof(typename Container::value_type);
  table_bytes_ += grown;
  check_budget();
}

void Unpickler::add_item(Value& parent, ValuePtr child) {
  add_child(parent, child);
  parent.items.push_back(std::move(child));
  recharge(parent);
}

void Unpickler::add_entry(Value& dict, ValuePtr key, ValuePtr value) {
  add_child(dict, value);
  dict.entries.emplace_back(std::move(key), std::move(value));
  recharge(dict);
}

void Unpickler::release(const ValuePtr& v) {
  // Called just before the caller drops its reference `v`: uncounts what that frees, i.e. the
  // values only this reference keeps alive, found by the rule Value::~Value frees them by. A value
  // reached twice from one parent is not uncounted (an over-estimate, never an under-estimate).
  if (!v || v.use_count() != 1) return;
  std::vector<const Value*> todo{v.get()};
  auto visit = [&todo](const ValuePtr& c) {
    if (c && c.use_count() == 1) todo.push_back(c.get());
  };
  while (!todo.empty()) {
    const Value* p = todo.back();
    todo.pop_back();
    value_bytes_ -= std::min(value_bytes_, p->cost);
    for (const auto& c : p->items) visit(c);
    for (const auto& [k, x] : p->entries) {
      visit(k);
      visit(x);
    }
  }
}

void Unpickler::refill(std::size_t need) {
  if (len_ - pos_ >= need) return;
  std::size_t have = len_ - pos_;
  std::memmove(buf_.data(), buf_.data() + pos_, have);
  base_ += pos_;
  pos_ = 0;
  len_ = have;
  while (len_ < need && !eof_) {
    std::size_t got = src_.read(buf_.data() + len_, buf_.size() - len_);
    if (got == 0) eof_ = true;
    len_ += got;
  }
  if (len_ < need) fail_truncated();
}

inline std::uint8_t Unpickler::u8() {
  if (pos_ == len_) refill(1);
  return static_cast<std::uint8_t>(buf_[pos_++]);
}

std::uint32_t Unpickler::u32() {
  refill(4);
  std::uint32_t v;
  std::memcpy(&v, buf_.data() + pos_, 4);  // little-endian host (x86-64, aarch64)
  pos_ += 4;
  return v;
}

std::uint64_t Unpickler::u64() {
  refill(8);
  std::uint64_t v;
  std::memcpy(&v, buf_.data() + pos_, 8);
  pos_ += 8;
  return v;
}

void Unpickler::read_bytes(std::string& out, std::uint64_t n, Value* owner) {
  if (n > limits_.max_string_bytes)
    fail(fmt::format("length field {} exceeds the limit of {} bytes", n, limits_.max_string_bytes));
  std::uint64_t total = src_.bytes_total();
  if (src_.compression() == Compression::none && total != 0 && n > total)
    fail(fmt::format("length field {} is larger than the whole file ({} bytes)", n, total));
  out.clear();
  out.reserve(static_cast<std::size_t>(std::min<std::uint64_t>(n, kBuf)));
  while (n > 0) {
    if (pos_ == len_) refill(1);
    std::size_t k = static_cast<std::size_t>(std::min<std::uint64_t>(n, len_ - pos_));
    out.append(buf_.data() + pos_, k);
    pos_ += k;
    n -= k;
    // Charged as the bytes arrive, so that a long string in a compressed bomb stops early.
    if (owner) recharge(*owner);
  }
}

void Unpickler::push(ValuePtr v) {
  if (stack_.size() >= limits_.max_stack) fail(fmt::format("more than {} values on the stack", limits_.max_stack));
  const std::size_t cap = stack_.capacity();
  stack_.push_back(std::move(v));
  charge_table(stack_, cap);
}

ValuePtr Unpickler::pop() {
  if (stack_.empty() || (!marks_.empty() && marks_.back() == stack_.size())) fail("stack underflow");
  ValuePtr v = std::move(stack_.back());
  stack_.pop_back();
  return v;
}

std::size_t Unpickler::pop_mark() {
  if (marks_.empty()) fail("no MARK on the stack");
  std::size_t m = marks_.back();
  marks_.pop_back();
  return m;
}

void Unpickler::add_child(Value& parent, const ValuePtr& child) {
  std::uint32_t d = child->depth + 1;
  if (d > parent.depth) {
    if (d > limits_.max_depth) fail(fmt::format("containers nested deeper than {} levels", limits_.max_depth));
    parent.depth = d;
  }
}

std::uint32_t* Unpickler::memo_slot(std::uint32_t id, bool create) {
  // Keys are dense in real pickles (MEMOIZE numbers them 0, 1, 2, ...); a key far beyond the
  // dense range (hostile BINPUT/LONG_BINPUT) goes to a hash map instead of growing the vector.
  if (id < memo_dense_.size()) return &memo_dense_[id];
  std::size_t dense_limit = std::max<std::size_t>(memo_dense_.size() * 2, 1u << 16);
  if (id < dense_limit) {
    if (!create) return nullptr;
    const std::size_t cap = memo_dense_.capacity();
    memo_dense_.resize(std::max<std::size_t>(std::size_t{id} + 1, std::min(dense_limit, memo_dense_.size() * 2 + 1024)),
                       0);
    charge_table(memo_dense_, cap);
    return &memo_dense_[id];
  }
  if (!create) {
    auto it = memo_sparse_.find(id);
    return it == memo_sparse_.end() ? nullptr : &it->second;
  }
  if (memo_sparse_.size() >= limits_.max_memo) fail(fmt::format("more than {} sparse memo keys", limits_.max_memo));
  auto [it, inserted] = memo_sparse_.try_emplace(id, 0);
  if (inserted) {
    table_bytes_ += kMapNodeBytes;
    check_budget();
  }
  return &it->second;
}

void Unpickler::memo_put(std::uint32_t id) {
  if (stack_.empty() || (!marks_.empty() && marks_.back() == stack_.size())) fail("memo store with an empty stack");
  std::uint32_t* slot = memo_slot(id, true);
  const ValuePtr& v = stack_.back();
  if (v->pool_index == 0) {
    if (memo_size() >= limits_.max_memo) fail(fmt::format("more than {} memoized values", limits_.max_memo));
    std::uint32_t idx;
    if (!pool_free_.empty()) {
      idx = pool_free_.back();
      pool_free_.pop_back();
      pool_[idx] = v;
    } else {
      idx = static_cast<std::uint32_t>(pool_.size());
      const std::size_t cap = pool_.capacity(), refs_cap = pool_refs_.capacity();
      pool_.push_back(v);
      pool_refs_.push_back(0);
      charge_table(pool_, cap);
      charge_table(pool_refs_, refs_cap);
    }
    v->pool_index = idx;
  }
  if (*slot == 0)
    ++memo_defined_;
  else if (*slot > 2 && --pool_refs_[*slot] == 0 && *slot != v->pool_index) {
    pool_[*slot]->pool_index = 0;
    release(pool_[*slot]);
    pool_[*slot].reset();
    pool_free_.push_back(*slot);
  }
  *slot = v->pool_index;
  ++pool_refs_[v->pool_index];
  if (v->memo_id == UINT32_MAX) v->memo_id = id;
}

const ValuePtr& Unpickler::memo_get(std::uint32_t id) {
  std::uint32_t* slot = memo_slot(id, false);
  if (!slot || *slot == 0) fail(fmt::format("memo key {} is not defined", id));
  return pool_[*slot];
}

void Unpickler::forget(const Value* v, std::uint32_t placeholder) {
  // Points the value's (first) memo key at a placeholder and frees its pool slot when no other
  // key refers to it.
  if (v->pool_index == 0 || v->memo_id == UINT32_MAX) return;
  std::uint32_t* slot = memo_slot(v->memo_id, false);
  if (!slot || *slot != v->pool_index) return;
  std::uint32_t idx = *slot;
  *slot = placeholder;
  if (--pool_refs_[idx] == 0) {
    pool_[idx]->pool_index = 0;
    release(pool_[idx]);
    pool_[idx].reset();
    pool_free_.push_back(idx);
  }
}

ValuePtr Unpickler::make_string(Kind kind, std::uint64_t n) {
  if (n <= 64) {
    // Short strings are interned: PyTorch's pickles memoize a fresh "N/A" or "" per entry.
    std::string text;
    read_bytes(text, n, nullptr);
    if (kind == Kind::string) {
      auto [it, inserted] = interned_.try_emplace(text);
      if (inserted) {
        if (interned_.size() > limits_.max_memo) fail("too many distinct strings");
        table_bytes_ += kMapNodeBytes + (text.capacity() > std::string().capacity() ? text.capacity() + 1 : 0);
        it->second = make(Kind::string);
        it->second->text = std::move(text);
        recharge(*it->second);
      }
      return it->second;
    }
    auto v = make(kind);
    v->text = std::move(text);
    recharge(*v);
    return v;
  }
  auto v = make(kind);
  read_bytes(v->text, n, v.get());
  return v;
}

void Unpickler::check_new_list() {
  // Called before pushing a new list: decide whether it is the outer streamed list (the value
  // of stream_key_ in the outermost dict) or one of its inner lists (streamed).
  if (stream_key_.empty()) return;
  Value& list = *stack_.back();       // the new list, pushed already
  std::size_t n = stack_.size() - 1;  // values below the new list
  if (n >= 2 && stack_[n - 1]->kind == Kind::string && stack_[n - 1]->text == stream_key_ &&
      stack_[0]->kind == Kind::dict) {
    // Key position inside the outermost dict: SETITEMS after MARK at 1, or SETITEM with no mark.
    bool in_setitems = marks_.size() == 1 && marks_[0] == 1 && (n - 1 - 1) % 2 == 0;
    bool in_setitem = marks_.empty() && n == 2;
    if (in_setitems || in_setitem) {
      list.role = kRoleOuter;
      return;
    }
  }
  if (!marks_.empty()) {
    std::size_t m = marks_.back();
    if (m >= 1 && m <= n && stack_[m - 1]->role == kRoleOuter && stack_[m - 1]->kind == Kind::list) {
      list.role = kRoleStreamed;
      list.tag = static_cast<std::int32_t>(stack_[m - 1]->items.size() + (n - m));
      return;
    }
  }
  if (n >= 1 && stack_[n - 1]->role == kRoleOuter && stack_[n - 1]->kind == Kind::list &&
      (marks_.empty() || marks_.back() < n)) {
    list.role = kRoleStreamed;
    list.tag = static_cast<std::int32_t>(stack_[n - 1]->items.size());
  }
}

void Unpickler::append_items(const ValuePtr& list, std::size_t from) {
  if (list->kind != Kind::list) fail("append to a value that is not a list");
  if (list->role == kRoleForgotten) fail("append to a streamed trace entry's list, which is not kept");
  if (list->role == kRoleStreamed) {
    for (std::size_t i = from; i < stack_.size(); ++i) {
      ValuePtr item = std::move(stack_[i]);
      // Drop the entry and its own containers (frames list, ...) from the memo: see stream_key.
      forget(item.get(), item->kind == Kind::list ? 1 : 2);
      for (const auto& [k, v] : item->entries)
        if (v && (v->kind == Kind::list || v->kind == Kind::dict)) forget(v.get(), v->kind == Kind::list ? 1 : 2);
      ++delivered_;
      release(item);  // the callback owns it from here
      on_item_(list->tag, std::move(item));
    }
  } else {
    // Python's pickler fills a new list in batches of 1000 (APPENDS): the first batch is often all
    // of it, so it gets exactly its room; later ones grow by doubling.
    if (list->items.empty()) list->items.reserve(stack_.size() - from);
    for (std::size_t i = from; i < stack_.size(); ++i) add_item(*list, std::move(stack_[i]));
  }
  stack_.resize(from);
}

ValuePtr Unpickler::make_int_from_le(const std::string& b) {
  auto v = make(Kind::integer);
  std::size_t n = b.size();
  if (n == 0) return v;
  const auto* u = reinterpret_cast<const unsigned char*>(b.data());
  bool negative = u[n - 1] & 0x80;
  // Fits in int64 when every byte above the eighth is the sign extension of the eighth byte's top bit.
  bool fits = true;
  if (n > 8) {
    unsigned char ext = (u[7] & 0x80) ? 0xff : 0x00;
    for (std::size_t i = 8; i < n; ++i)
      if (u[i] != ext) fits = false;
  }
  if (fits) {
    std::uint64_t x = 0;
    std::size_t k = std::min<std::size_t>(n, 8);
    for (std::size_t i = 0; i < k; ++i) x |= std::uint64_t{u[i]} << (8 * i);
    if (k < 8 && negative) x |= ~std::uint64_t{0} << (8 * k);
    v->integer = static_cast<std::int64_t>(x);
    return v;
  }
  v->kind = Kind::big_integer;
  v->text = b;
  recharge(*v);
  v->integer = negative ? INT64_MIN : INT64_MAX;
  return v;
}

bool Unpickler::run() {
  if (result_) return false;
  const std::uint64_t delivered_before = delivered_;
  std::string scratch;
  for (;;) {
    if (delivered_ != delivered_before) return true;
    op_offset_ = base_ + pos_;
    if (pos_ == len_) {
      // Read more, if there is more.
      base_ += pos_;
      pos_ = len_ = 0;
      while (len_ == 0 && !eof_) {
        std::size_t got = src_.read(buf_.data(), buf_.size());
        if (got == 0) eof_ = true;
        len_ = got;
      }
      if (len_ == 0) {
        if (base_ == 0) throw PickleError(fmt::format("{}: empty file", path_));
        throw PickleError(fmt::format(
            "{}: offset {}: the pickle ends before its STOP opcode: the file is truncated{}", path_, base_,
            src_.truncated() ? fmt::format(" (its {} stream is cut off)", compression_name(src_.compression())) : ""));
      }
    }
    op_ = u8();
    switch (op_) {
      case 0x80: {  // PROTO
        int p = u8();
        if (p > 5) fail(fmt::format("pickle protocol {} is not supported (0 to 5)", p));
        protocol_ = p;
        break;
      }
      case 0x95:  // FRAME: a length hint only; frames are read through like the rest
        (void)u64();
        break;
      case '(': {
        const std::size_t cap = marks_.capacity();
        marks_.push_back(stack_.size());
        charge_table(marks_, cap);
        break;
      }
      case '.': {  // STOP
        ValuePtr result = pop();
        // Python's pickler writes exactly one value and closes every MARK; what is left over was
        // never part of a dumped object (a damaged or hand-made file, or a bomb of containers).
        if (!stack_.empty() || !marks_.empty())
          fail(
              fmt::format("{} values and {} marks are left on the stack below the result: not a pickle "
                          "Python's pickle.dump writes",
                          stack_.size(), marks_.size()));
        result_ = std::move(result);
        memo_dense_.clear();
        memo_dense_.shrink_to_fit();
        memo_sparse_.clear();
        for (std::size_t i = 3; i < pool_.size(); ++i) {
          release(pool_[i]);
          pool_[i].reset();
        }
        pool_.resize(3);
        pool_refs_.resize(3);
        pool_free_.clear();
        for (const auto& [text, v] : interned_) release(v);
        interned_.clear();
        stack_.shrink_to_fit();
        marks_.shrink_to_fit();
        pool_.shrink_to_fit();
        pool_refs_.shrink_to_fit();
        table_bytes_ = 0;  // what stays is the result
        return false;
      }
      case '0':
        release(pop());
        break;
      case '1': {
        std::size_t m = pop_mark();
        for (std::size_t i = m; i < stack_.size(); ++i) release(stack_[i]);
        stack_.resize(m);
        break;
      }
      case '2': {
        if (stack_.empty()) fail("stack underflow");
        ValuePtr top = stack_.back();
        push(std::move(top));
        break;
      }
      case 'N':
        push(make(Kind::none));
        break;
      case 0x88:
      case 0x89: {
        auto v = make(Kind::boolean);
        v->boolean = op_ == 0x88;
        push(std::move(v));
        break;
      }
      case 'J': {
        auto v = make(Kind::integer);
        v->integer = static_cast<std::int32_t>(u32());
        push(std::move(v));
        break;
      }
      case 'K': {
        auto v = make(Kind::integer);
        v->integer = u8();
        push(std::move(v));
        break;
      }
      case 'M': {
        refill(2);
        auto v = make(Kind::integer);
        v->integer = static_cast<std::uint8_t>(buf_[pos_]) | (static_cast<std::uint8_t>(buf_[pos_ + 1]) << 8);
        pos_ += 2;
        push(std::move(v));
        break;
      }
      case 0x8a:
      case 0x8b: {  // LONG1, LONG4
        std::uint64_t n = op_ == 0x8a ? u8() : u32();
        if (op_ == 0x8b && static_cast<std::int32_t>(n) < 0) fail("negative length");
        if (n > limits_.max_int_bytes)
          fail(fmt::format("integer of {} bytes exceeds the limit of {}", n, limits_.max_int_bytes));
        read_bytes(scratch, n, nullptr);
        push(make_int_from_le(scratch));
        break;
      }
      case 'G': {
        std::uint64_t bits = u64();
        bits = __builtin_bswap64(bits);  // big-endian on the wire
        auto v = make(Kind::floating);
        std::memcpy(&v->floating, &bits, 8);
        push(std::move(v));
        break;
      }
      case 'X':
      case 0x8c:
      case 0x8d:
      case 'T':
      case 'U': {  // BINUNICODE, SHORT_BINUNICODE, BINUNICODE8, BINSTRING, SHORT_BINSTRING
        std::uint64_t n = (op_ == 0x8c || op_ == 'U') ? u8() : op_ == 0x8d ? u64() : u32();
        if (op_ == 'T' && static_cast<std::int32_t>(n) < 0) fail("negative length");
        push(make_string(Kind::string, n));
        break;
      }
      case 'B':
      case 'C':
      case 0x8e:
      case 0x96: {  // BINBYTES, SHORT_BINBYTES, BINBYTES8, BYTEARRAY8
        std::uint64_t n = op_ == 'C' ? u8() : op_ == 'B' ? u32() : u64();
        push(make_string(Kind::bytes, n));
        break;
      }
      case 0x98:  // READONLY_BUFFER: no effect on in-band data
        if (stack_.empty()) fail("stack underflow");
        break;
      case ')':
        push(make(Kind::tuple));
        break;
      case 0x85:
      case 0x86:
      case 0x87: {
        std::size_t n = op_ - 0x84;
        if (stack_.size() < n || (!marks_.empty() && stack_.size() - marks_.back() < n)) fail("stack underflow");
        auto t = make(Kind::tuple);
        t->items.reserve(n);
        for (std::size_t i = stack_.size() - n; i < stack_.size(); ++i) add_item(*t, std::move(stack_[i]));
        stack_.resize(stack_.size() - n);
        push(std::move(t));
        break;
      }
      case 't':
      case 'l':
      case 0x91: {  // TUPLE, LIST, FROZENSET (from MARK)
        std::size_t m = pop_mark();
        auto t = make(op_ == 't' ? Kind::tuple : op_ == 'l' ? Kind::list : Kind::set);
        t->items.reserve(stack_.size() - m);
        for (std::size_t i = m; i < stack_.size(); ++i) add_item(*t, std::move(stack_[i]));
        stack_.resize(m);
        push(std::move(t));
        break;
      }
      case ']':
        push(make(Kind::list));
        check_new_list();
        break;
      case '}':
        push(make(Kind::dict));
        break;
      case 0x8f:
        push(make(Kind::set));
        break;
      case 'd': {  // DICT from MARK
        std::size_t m = pop_mark();
        if ((stack_.size() - m) % 2 != 0) fail("odd number of items for a dict");
        auto d = make(Kind::dict);
        d->entries.reserve((stack_.size() - m) / 2);
        for (std::size_t i = m; i < stack_.size(); i += 2)
          add_entry(*d, std::move(stack_[i]), std::move(stack_[i + 1]));
        stack_.resize(m);
        push(std::move(d));
        break;
      }
      case 'a': {  // APPEND
        if (stack_.size() < 2 || (!marks_.empty() && stack_.size() - marks_.back() < 2)) fail("stack underflow");
        append_items(stack_[stack_.size() - 2], stack_.size() - 1);
        break;
      }
      case 'e': {  // APPENDS
        std::size_t m = pop_mark();
        if (m == 0) fail("APPENDS without a list below its MARK");
        append_items(stack_[m - 1], m);
        break;
      }
      case 0x90: {  // ADDITEMS
        std::size_t m = pop_mark();
        if (m == 0 || stack_[m - 1]->kind != Kind::set) fail("ADDITEMS without a set below its MARK");
        Value& s = *stack_[m - 1];
        if (s.items.empty()) s.items.reserve(stack_.size() - m);  // as for APPENDS
        for (std::size_t i = m; i < stack_.size(); ++i) add_item(s, std::move(stack_[i]));
        stack_.resize(m);
        break;
      }
      case 's': {  // SETITEM
        if (stack_.size() < 3 || (!marks_.empty() && stack_.size() - marks_.back() < 3)) fail("stack underflow");
        Value& d = *stack_[stack_.size() - 3];
        if (d.kind != Kind::dict || d.role == kRoleForgotten) fail("SETITEM on a value that is not a dict");
        add_entry(d, std::move(stack_[stack_.size() - 2]), std::move(stack_[stack_.size() - 1]));
        stack_.resize(stack_.size() - 2);
        break;
      }
      case 'u': {  // SETITEMS
        std::size_t m = pop_mark();
        if (m == 0 || stack_[m - 1]->kind != Kind::dict || stack_[m - 1]->role == kRoleForgotten)
          fail("SETITEMS without a dict below its MARK");
        if ((stack_.size() - m) % 2 != 0) fail("odd number of items for SETITEMS");
        Value& d = *stack_[m - 1];
        if (d.entries.empty()) d.entries.reserve((stack_.size() - m) / 2);  // as for APPENDS
        for (std::size_t i = m; i < stack_.size(); i += 2) add_entry(d, std::move(stack_[i]), std::move(stack_[i + 1]));
        stack_.resize(m);
        break;
      }
      case 'q':
        memo_put(u8());
        break;
      case 'r':
        memo_put(u32());
        break;
      case 0x94:
        memo_put(static_cast<std::uint32_t>(std::min<std::uint64_t>(memo_defined_, UINT32_MAX)));
        break;
      case 'h': {
        std::uint32_t id = u8();
        ValuePtr v = memo_get(id);
        push(std::move(v));
        break;
      }
      case 'j': {
        std::uint32_t id = u32();
        ValuePtr v = memo_get(id);
        push(std::move(v));
        break;
      }
      case 'c':
      case 0x93:
      case 'R':
      case 'b':
      case 'i':
      case 'o':
      case 0x81:
      case 0x92:
      case 0x82:
      case 0x83:
      case 0x84:
      case 'P':
      case 'Q':
        fail(
            "refused: this opcode imports or calls Python objects; vramtrace reads plain data only and never "
            "executes a pickle (a PyTorch snapshot needs none of these)");
      case 0x97:
        fail("refused: out-of-band buffers (protocol 5 NEXT_BUFFER) are not part of a snapshot file");
      case 'F':
      case 'I':
      case 'L':
      case 'S':
      case 'V':
      case 'g':
      case 'p':
        fail("text opcode of pickle protocol 0 is not supported (snapshots use protocol 2 or newer)");
      default:
        fail("not a pickle opcode (corrupt or not a pickle file)");
    }
  }
}

}  // namespace vramtrace::pickle
