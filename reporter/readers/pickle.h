// A safe, streaming reader of Python pickles (protocols 2 to 5) that builds plain data only.
//
// It never executes anything: the opcodes that import or call Python objects (GLOBAL,
// STACK_GLOBAL, REDUCE, BUILD, INST, OBJ, NEWOBJ, NEWOBJ_EX, EXT1/2/4, PERSID, BINPERSID,
// NEXT_BUFFER) are rejected with a PickleError naming the opcode and its byte offset. Python's own
// pickle.load would run code from a hostile file; this reader cannot.
//
// Streaming: lists can be marked "streamed" by a rule (see Unpickler::stream_key); items appended
// to them are handed to a callback and dropped, so that a snapshot with 10^7 trace entries is
// read with bounded memory.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "readers/open_trace.h"
#include "vramtrace/trace/byte_source.h"

namespace vramtrace::pickle {

/// Malformed or refused pickle input; the message names the file and the byte offset (of the
/// decompressed stream).
class PickleError : public TraceError {
 public:
  using TraceError::TraceError;
};

enum class Kind : std::uint8_t { none, boolean, integer, big_integer, floating, string, bytes, list, tuple, dict, set };

struct Value;
using ValuePtr = std::shared_ptr<Value>;

/// One Python value. Containers hold shared pointers (the pickle memo shares objects).
/// Destruction is iterative, so arbitrarily deep nesting cannot overflow the C++ stack.
/// Reference cycles (possible through the memo) are not freed; their size is bounded by the input.
struct Value {
  Kind kind = Kind::none;
  bool boolean = false;
  std::uint8_t role = 0;     ///< Unpickler's streaming marks
  std::int32_t tag = 0;      ///< Unpickler's streaming tag (device index)
  std::int64_t integer = 0;  ///< integer; for big_integer the value saturated to int64
  double floating = 0.0;
  /// string (UTF-8) and bytes; for big_integer the little-endian two's complement bytes.
  std::string text;
  std::vector<ValuePtr> items;                         ///< list, tuple, set
  std::vector<std::pair<ValuePtr, ValuePtr>> entries;  ///< dict, in insertion order
  std::uint32_t memo_id = UINT32_MAX;                  ///< first memo slot this value was stored in
  std::uint32_t pool_index = 0;                        ///< Unpickler's slot for memoized values (0 = none)
  std::uint32_t depth = 0;                             ///< nesting depth (0 for scalars), as far as observed
  /// Bytes the Unpickler charged to its memory budget for this value: footprint() when it last grew.
  std::uint64_t cost = 0;

  Value() = default;
  explicit Value(Kind k) : kind(k) {}
  ~Value();
  Value(const Value&) = delete;
  Value& operator=(const Value&) = delete;

  bool is_int() const { return kind == Kind::integer || kind == Kind::big_integer || kind == Kind::boolean; }
  /// The value as an unsigned 64-bit integer: non-negative integers up to 2^64-1 (also big
  /// integers in that range, pytorch/pytorch 115234) and booleans. False otherwise.
  bool to_u64(std::uint64_t& out) const;
  /// Integers in int64 range and booleans; big integers saturate. False for other kinds.
  bool to_i64(std::int64_t& out) const;
  /// Dict entry whose key is the string `key`; nullptr when absent or not a dict.
  const Value* find(std::string_view key) const;
};

/// Bytes of memory one value occupies: the node and its shared_ptr control block (make_shared),
/// plus the heap storage of its string (beyond the small-string buffer), items and entries, by
/// capacity. What the Unpickler counts against Limits' memory budget. Thread-safe (reads `v`).
std::uint64_t footprint(const Value& v) noexcept;

/// Python's name of the type a value of this kind comes from ("dict", "int", "NoneType", ...), for
/// messages. Thread-safe.
const char* kind_name(Kind kind) noexcept;

/// Python's name of an opcode byte ("GLOBAL", "BINUNICODE", ...), "unknown" if none.
const char* opcode_name(std::uint8_t op) noexcept;

/// Limits on what a pickle may make us hold (hostile input); all checked with a clear error.
///
/// Memory budget: the bytes the unpickler holds (Unpickler::held_bytes: the footprint() of every
/// value it built and still owns, plus its stack, marks, memo and string table) may not exceed
///
///     budget_floor_bytes + budget_per_byte * (pickle bytes read so far)
///
/// and, for gzip or zstd input, also not
///
///     budget_floor_bytes + budget_per_compressed_byte * (compressed bytes read so far).
///
/// "Pickle bytes" are the decompressed stream the opcodes are read from. Without the second rule a
/// few KiB of zstd could unpack to gigabytes of opcodes that each build just under the per-byte
/// budget; with it, memory is proportional to the file on disk as well.
///
/// Why these numbers (tests/reporter/test_pickle.cpp, "[measure]"; the table is in
/// docs/reliability.md, "Pickles"): the real snapshots in tests/data hold at most 10 bytes per
/// pickle byte over a whole file of more than 64 KiB (the `device_traces` history is streamed and
/// freed as it is read, so what stays is mostly `segments`) and at most 125 per byte on disk. The
/// densest shape is a snapshot without history (segments and blocks only): a synthetic one of
/// 100,000 blocks holds 31 per pickle byte, and one with 12 frames per block, compressed with
/// zstd -19, 982 per byte on disk. The defaults are 4 and 16 times those worst cases. Hostile input
/// amplifies more: every one-byte EMPTY_LIST, EMPTY_DICT or NONE opcode waiting on the stack costs
/// about 190 bytes, so a pickle made of them is refused a few hundred KiB in, whatever its length.
/// The floor lets small pickles through whatever their shape.
struct Limits {
  std::uint64_t max_string_bytes = 1ull << 30;       ///< one string/bytes value
  std::uint64_t max_int_bytes = 1u << 20;            ///< one LONG1/LONG4 integer
  std::uint64_t max_stack = 1u << 24;                ///< values on the stack
  std::uint64_t max_memo = 1u << 24;                 ///< distinct live memoized values
  std::uint32_t max_depth = 10000;                   ///< container nesting
  std::uint64_t budget_floor_bytes = 16ull << 20;    ///< memory budget: fixed part (bytes)
  std::uint64_t budget_per_byte = 128;               ///< memory budget: bytes per pickle byte read
  std::uint64_t budget_per_compressed_byte = 16384;  ///< memory budget: bytes per compressed byte read
};

/// Runs a pickle's opcodes over a byte stream. Not thread-safe.
class Unpickler {
 public:
  /// `src` must outlive the unpickler; `path` names the file in messages.
  Unpickler(ByteSource& src, std::string path, Limits limits = {});

  /// Streaming rule: a list that is the value of the string key `key` in the outermost dict is
  /// a list of lists; each inner list is streamed: items appended to it go to
  /// `on_item(index of the inner list in the outer list, item)` and are dropped.
  ///
  /// Memory: a delivered item and its direct container children (its `frames` list) are
  /// dropped from the memo; their memo keys then refer to an empty placeholder (PyTorch shares a
  /// frames list between the entries of one block, and we never use frames). What stays per
  /// trace entry is 4 bytes per memo key; strings of up to 64 bytes are interned.
  void stream_key(std::string key, std::function<void(std::int32_t, ValuePtr)> on_item);

  /// Executes opcodes until at least one streamed item was delivered (true) or until STOP
  /// (false; result() is then set). Throws PickleError.
  bool run();

  /// The unpickled object, after run() returned false.
  const ValuePtr& result() const { return result_; }
  /// Offset (decompressed bytes) of the next opcode.
  std::uint64_t offset() const { return base_ + pos_; }
  /// Distinct values the memo keeps alive, and stack depth now (for tests of bounded memory).
  std::size_t memo_size() const { return pool_.size() - 3 - pool_free_.size(); }
  std::size_t stack_size() const { return stack_.size(); }
  /// Bytes the unpickler holds now, counted against the memory budget (see Limits): the
  /// footprint() of the values it built and still owns (a streamed item no longer counts once it
  /// was handed to the callback, which owns it then) and the capacity of its own stack, marks and
  /// memo tables. An estimate of the heap it uses, never below what is reachable from its stack,
  /// memo and result. Its peak so far, and the budget at the current offset.
  std::uint64_t held_bytes() const { return value_bytes_ + table_bytes_; }
  std::uint64_t peak_held_bytes() const { return peak_held_; }
  std::uint64_t budget_bytes() const;
  /// Protocol from the PROTO opcode (0 if none).
  int protocol() const { return protocol_; }

 private:
  [[noreturn]] void fail(const std::string& what) const;
  [[noreturn]] void fail_truncated() const;
  void refill(std::size_t need);
  std::uint8_t u8();
  std::uint32_t u32();
  std::uint64_t u64();
  void read_bytes(std::string& out, std::uint64_t n, Value* owner);
  void push(ValuePtr v);
  ValuePtr pop();
  std::size_t pop_mark();
  void add_child(Value& parent, const ValuePtr& child);
  void append_items(const ValuePtr& list, std::size_t from);
  void memo_put(std::uint32_t id);
  const ValuePtr& memo_get(std::uint32_t id);
  std::uint32_t* memo_slot(std::uint32_t id, bool create);
  void forget(const Value* v, std::uint32_t placeholder);
  ValuePtr make_string(Kind kind, std::uint64_t n);
  void check_new_list();
  ValuePtr make_int_from_le(const std::string& bytes);
  ValuePtr make(Kind kind);
  void check_budget();
  void recharge(Value& v);
  template <class Container>
  void charge_table(const Container& c, std::size_t capacity_before);
  void add_item(Value& parent, ValuePtr child);
  void add_entry(Value& dict, ValuePtr key, ValuePtr value);
  void release(const ValuePtr& v);

  ByteSource& src_;
  std::string path_;
  Limits limits_;
  std::vector<char> buf_;
  std::size_t pos_ = 0;
  std::size_t len_ = 0;
  std::uint64_t base_ = 0;  // offset of buf_[0]
  std::uint64_t op_offset_ = 0;
  std::uint8_t op_ = 0;
  bool eof_ = false;
  int protocol_ = 0;

  std::vector<ValuePtr> stack_;
  std::vector<std::size_t> marks_;
  // Memo: key -> pool slot (0 = undefined, 1/2 = forgotten list/dict placeholders).
  std::vector<std::uint32_t> memo_dense_;
  std::unordered_map<std::uint32_t, std::uint32_t> memo_sparse_;
  std::vector<ValuePtr> pool_;
  std::vector<std::uint32_t> pool_refs_;
  std::vector<std::uint32_t> pool_free_;
  std::uint64_t memo_defined_ = 0;  // distinct keys ever stored: the next MEMOIZE key
  std::unordered_map<std::string, ValuePtr> interned_;
  ValuePtr result_;

  std::string stream_key_;
  std::function<void(std::int32_t, ValuePtr)> on_item_;
  std::uint64_t delivered_ = 0;

  std::uint64_t value_bytes_ = 0;  // footprint of the values built and not yet released
  std::uint64_t table_bytes_ = 0;  // capacity of stack_, marks_, the memo and interned_
  std::uint64_t peak_held_ = 0;
};

}  // namespace vramtrace::pickle
