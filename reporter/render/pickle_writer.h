// A writer of Python pickles of plain data (dicts, lists, strings, integers, floats, booleans,
// None), for files that PyTorch's tools open: the memory snapshot of `vramtrace export --format
// memory-viz` (render/memory_viz.h).
//
// The opcodes are those of protocol 4 that pytorch.org/memory_viz's own unpickler
// (torch/utils/viz/MemoryViz.js) knows, so that the viewer reads the file as Python does:
//
//   PROTO 4                          0x80 0x04, once at the start
//   dict   EMPTY_DICT MARK k v k v ... SETITEMS   ('}' '(' ... 'u'), re-MARKed every 1000 items
//   list   EMPTY_LIST MARK v v ...     APPENDS    (']' '(' ... 'e'), re-MARKed every 1000 items
//   str    SHORT_BINUNICODE n:u8 bytes (< 256 bytes) or BINUNICODE n:u32le bytes, then BINPUT i:u8
//          or LONG_BINPUT i:u32le; a string written before: BINGET i:u8 or LONG_BINGET i:u32le
//   int    BININT1 u8, BININT2 u16le, BININT i32le, else LONG1 n:u8 two's complement little-endian
//   float  BINFLOAT f64 big-endian
//   True/False/None  NEWTRUE, NEWFALSE, NONE
//   end    STOP '.'
//
// No FRAME opcodes (optional in protocol 4), no GLOBAL/REDUCE: the file holds data only, and any
// unpickler can load it without running code. Only strings go through the memo (dict keys, file
// and function names of frames): a history repeats a few hundred call stacks millions of times,
// and each repeated name then costs 2 to 5 bytes. Containers are never shared, so that a reader
// that streams entries and drops them (ours, readers/pickle.h) sees every entry whole.
// Batches of 1000 are what Python's pickler writes; they keep the viewer's JavaScript from
// spreading millions of arguments into one call.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace vramtrace {

/// Builds a pickle value by value, depth first: open a container, write its items (in a dict,
/// key() before each value), close it. Bytes accumulate in a buffer that take_bytes() hands out,
/// so that a caller can stream a large file with bounded memory. Misuse (a value in a dict
/// without its key, closing the wrong container, finishing with containers open, a second
/// top-level value) throws std::logic_error. Not thread-safe.
class PickleWriter {
 public:
  /// Starts the pickle (PROTO 4).
  PickleWriter();

  void begin_dict();
  void end_dict();
  void begin_list();
  void end_list();
  /// The key of the next value of the dict being written (a Python str).
  void key(std::string_view k);

  /// A Python str; `s` must be UTF-8 (it is written as is).
  void string(std::string_view s);
  /// A Python int, of any 64-bit value.
  void integer(std::int64_t v);
  void unsigned_integer(std::uint64_t v);
  /// A Python float (IEEE double).
  void real(double v);
  void boolean(bool v);
  void none();

  /// One entry of the dict being written: key(k), then the value (the forms above).
  void string_entry(std::string_view k, std::string_view v) {
    key(k);
    string(v);
  }
  void integer_entry(std::string_view k, std::int64_t v) {
    key(k);
    integer(v);
  }
  void unsigned_entry(std::string_view k, std::uint64_t v) {
    key(k);
    unsigned_integer(v);
  }
  void boolean_entry(std::string_view k, bool v) {
    key(k);
    boolean(v);
  }

  /// Ends the pickle (STOP) after its one top-level value. Throws std::logic_error when a
  /// container is still open or no value was written.
  void finish();

  /// The bytes written since the last call, moved out.
  std::string take_bytes();
  /// Bytes waiting in the buffer.
  std::size_t buffered() const noexcept { return out_.size(); }

 private:
  struct Open {
    bool dict = false;
    bool key_pending = false;  // dicts: key() written, its value not yet
    std::uint32_t batch = 0;   // items since the last MARK
  };
  void before_value();
  void after_value();
  void end_container(bool dict);

  void put_string(std::string_view s);

  std::string out_;
  std::vector<Open> open_;
  std::unordered_map<std::string, std::uint32_t> memo_;  // string -> memo index
  bool top_written_ = false;
  bool finished_ = false;
};

}  // namespace vramtrace
