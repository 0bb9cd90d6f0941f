// The pickle layout is drawn in pickle_writer.h.
#include "render/pickle_writer.h"

#include <bit>
#include <stdexcept>

namespace vramtrace {
namespace {

constexpr char kProto = '\x80';
constexpr char kEmptyDict = '}';
constexpr char kEmptyList = ']';
constexpr char kMark = '(';
constexpr char kSetItems = 'u';
constexpr char kAppends = 'e';
constexpr char kShortBinUnicode = '\x8c';
constexpr char kBinUnicode = 'X';
constexpr char kBinInt1 = 'K';
constexpr char kBinInt2 = 'M';
constexpr char kBinInt = 'J';
constexpr char kLong1 = '\x8a';
constexpr char kBinFloat = 'G';
constexpr char kNewTrue = '\x88';
constexpr char kNewFalse = '\x89';
constexpr char kNone = 'N';
constexpr char kStop = '.';
constexpr char kBinPut = 'q';
constexpr char kLongBinPut = 'r';
constexpr char kBinGet = 'h';
constexpr char kLongBinGet = 'j';

// Python's pickler closes a batch of SETITEMS/APPENDS every 1000 items.
constexpr std::uint32_t kBatch = 1000;
// Strings shorter than a BINGET are written again; the memo stops growing at this many strings
// (later new strings are written in full), which bounds the writer's memory.
constexpr std::size_t kMemoMinBytes = 4;
constexpr std::size_t kMemoMaxStrings = 1u << 20;

void put_le(std::string& out, std::uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xffu));
}

}  // namespace

PickleWriter::PickleWriter() {
  out_.push_back(kProto);
  out_.push_back('\x04');
}

void PickleWriter::before_value() {
  if (finished_) throw std::logic_error("pickle: a value after finish()");
  if (open_.empty()) {
    if (top_written_) throw std::logic_error("pickle: a second top-level value");
    return;
  }
  Open& o = open_.back();
  if (o.dict && !o.key_pending) throw std::logic_error("pickle: a dict value without its key");
}

void PickleWriter::after_value() {
  if (open_.empty()) {
    top_written_ = true;
    return;
  }
  Open& o = open_.back();
  o.key_pending = false;
  if (++o.batch == kBatch) {
    out_.push_back(o.dict ? kSetItems : kAppends);
    out_.push_back(kMark);
    o.batch = 0;
  }
}

void PickleWriter::begin_dict() {
  before_value();
  out_.push_back(kEmptyDict);
  out_.push_back(kMark);
  open_.push_back({true, false, 0});
}

void PickleWriter::begin_list() {
  before_value();
  out_.push_back(kEmptyList);
  out_.push_back(kMark);
  open_.push_back({false, false, 0});
}

void PickleWriter::end_container(bool dict) {
  if (open_.empty() || open_.back().dict != dict)
    throw std::logic_error(dict ? "pickle: end_dict() outside a dict" : "pickle: end_list() outside a list");
  if (open_.back().key_pending) throw std::logic_error("pickle: a dict key without its value");
  // An empty batch is valid for both opcodes (Python and MemoryViz.js add nothing).
  out_.push_back(dict ? kSetItems : kAppends);
  open_.pop_back();
  after_value();
}

void PickleWriter::end_dict() { end_container(true); }
void PickleWriter::end_list() { end_container(false); }

void PickleWriter::key(std::string_view k) {
  if (open_.empty() || !open_.back().dict || open_.back().key_pending)
    throw std::logic_error("pickle: key() outside a dict, or twice");
  // Keys are not counted as items: a batch counts key-value pairs.
  put_string(k);
  open_.back().key_pending = true;
}

void PickleWriter::put_string(std::string_view s) {
  if (s.size() > UINT32_MAX) throw std::length_error("pickle: a string over 4 GiB");
  const bool memoizable = s.size() >= kMemoMinBytes;
  if (memoizable) {
    if (auto it = memo_.find(std::string(s)); it != memo_.end()) {
      if (it->second < 256) {
        out_.push_back(kBinGet);
        put_le(out_, it->second, 1);
      } else {
        out_.push_back(kLongBinGet);
        put_le(out_, it->second, 4);
      }
      return;
    }
  }
  if (s.size() < 256) {
    out_.push_back(kShortBinUnicode);
    out_.push_back(static_cast<char>(s.size()));
  } else {
    out_.push_back(kBinUnicode);
    put_le(out_, s.size(), 4);
  }
  out_.append(s);
  if (memoizable && memo_.size() < kMemoMaxStrings) {
    const auto id = static_cast<std::uint32_t>(memo_.size());
    if (id < 256) {
      out_.push_back(kBinPut);
      put_le(out_, id, 1);
    } else {
      out_.push_back(kLongBinPut);
      put_le(out_, id, 4);
    }
    memo_.emplace(std::string(s), id);
  }
}

void PickleWriter::string(std::string_view s) {
  before_value();
  put_string(s);
  after_value();
}

void PickleWriter::integer(std::int64_t v) {
  before_value();
  if (v >= 0 && v < 256) {
    out_.push_back(kBinInt1);
    put_le(out_, static_cast<std::uint64_t>(v), 1);
  } else if (v >= 0 && v < 65536) {
    out_.push_back(kBinInt2);
    put_le(out_, static_cast<std::uint64_t>(v), 2);
  } else if (v >= INT32_MIN && v <= INT32_MAX) {
    out_.push_back(kBinInt);
    put_le(out_, static_cast<std::uint64_t>(v), 4);
  } else {
    // LONG1: the shortest little-endian two's complement that keeps the sign bit.
    const auto bits = static_cast<std::uint64_t>(v);
    int n = 8;
    while (n > 1) {
      const auto top = static_cast<std::uint8_t>(bits >> (8 * (n - 1)));
      const auto next_sign = static_cast<std::uint8_t>((bits >> (8 * (n - 2))) & 0x80u);
      if ((v >= 0 && top == 0x00 && next_sign == 0) || (v < 0 && top == 0xff && next_sign != 0))
        --n;
      else
        break;
    }
    out_.push_back(kLong1);
    out_.push_back(static_cast<char>(n));
    put_le(out_, bits, n);
  }
  after_value();
}

void PickleWriter::unsigned_integer(std::uint64_t v) {
  if (v <= static_cast<std::uint64_t>(INT64_MAX)) {
    integer(static_cast<std::int64_t>(v));
    return;
  }
  before_value();
  // 2^63 and above: eight bytes and a zero byte, so that Python does not read it as negative.
  out_.push_back(kLong1);
  out_.push_back('\x09');
  put_le(out_, v, 8);
  out_.push_back('\x00');
  after_value();
}

void PickleWriter::real(double v) {
  before_value();
  out_.push_back(kBinFloat);
  const auto bits = std::bit_cast<std::uint64_t>(v);
  for (int i = 7; i >= 0; --i) out_.push_back(static_cast<char>((bits >> (8 * i)) & 0xffu));
  after_value();
}

void PickleWriter::boolean(bool v) {
  before_value();
  out_.push_back(v ? kNewTrue : kNewFalse);
  after_value();
}

void PickleWriter::none() {
  before_value();
  out_.push_back(kNone);
  after_value();
}

void PickleWriter::finish() {
  if (!open_.empty()) throw std::logic_error("pickle: finish() with a container open");
  if (!top_written_) throw std::logic_error("pickle: finish() before any value");
  if (finished_) throw std::logic_error("pickle: finish() twice");
  out_.push_back(kStop);
  finished_ = true;
}

std::string PickleWriter::take_bytes() {
  std::string bytes;
  bytes.swap(out_);
  return bytes;
}

}  // namespace vramtrace
