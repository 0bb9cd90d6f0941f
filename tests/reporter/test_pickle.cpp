// The safe pickle reader and the snapshot TraceReader (cases S1, S2, S3 of docs/cases.md).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "readers/open_trace.h"
#include "readers/pickle.h"
#include "test_util.h"
#include "vramtrace/trace/byte_source.h"

using namespace vramtrace;
using vramtrace::test::write_file;

namespace {

// The bytes of a string literal, NULs included.
template <std::size_t N>
std::string bin(const char (&s)[N]) {
  return {s, N - 1};
}

std::string snapshot_path() { return test::data_path("torch-h200/encoder_varlen.snapshot.pickle"); }

struct Loaded {
  std::vector<TraceRecord> records;
  Snapshot final_state;
  TraceHeader header;
};

Loaded load(const std::string& path) {
  auto r = open_trace(path);
  Loaded out;
  TraceRecord rec;
  while (r->next(rec)) out.records.push_back(rec);
  REQUIRE(r->final_state() != nullptr);
  out.final_state = *r->final_state();
  out.header = r->header();
  return out;
}

std::string error_of(const std::string& bytes, const std::string& name = "hostile.pickle") {
  auto path = write_file(name, bytes);
  try {
    auto r = open_trace(path);
    TraceRecord rec;
    while (r->next(rec)) {
    }
  } catch (const TraceError& e) {
    return e.what();
  }
  return "";
}

/// Emits pickle opcodes (protocol 4 style, MEMOIZE) for synthetic snapshots.
class Emitter {
 public:
  std::string out;
  void op(char c) { out += c; }
  void u32(std::uint32_t v) { out.append(reinterpret_cast<const char*>(&v), 4); }
  void str(const std::string& s) {
    auto it = memo_.find(s);
    if (it != memo_.end()) {
      out += 'j';  // LONG_BINGET
      u32(it->second);
      return;
    }
    out += '\x8c';
    out += static_cast<char>(s.size());
    out += s;
    memoize();
    memo_[s] = next_ - 1;
  }
  void integer(std::uint64_t v) {
    if (v < 256) {
      out += 'K';
      out += static_cast<char>(v);
    } else {
      out += '\x8a';  // LONG1, 9 bytes: always non-negative
      out += '\x09';
      out.append(reinterpret_cast<const char*>(&v), 8);
      out += '\0';
    }
  }
  std::uint32_t memoize() {
    out += '\x94';
    return next_++;
  }
  void get(std::uint32_t id) {
    out += 'j';
    u32(id);
  }

 private:
  std::map<std::string, std::uint32_t> memo_;
  std::uint32_t next_ = 0;
};

/// A snapshot with `n` alloc entries on one device, each with its own frames list of two
/// shared frame dicts, as PyTorch's pickles look.
std::string synthetic_snapshot(std::size_t n) {
  Emitter e;
  e.out = "\x80\x04";
  e.op('}');
  e.memoize();
  e.op('(');
  e.str("segments");
  e.op(']');
  e.memoize();
  e.str("device_traces");
  e.op(']');
  e.memoize();
  e.op(']');  // device 0
  e.memoize();
  std::uint32_t frame_ids[2] = {0, 0};
  for (std::size_t i = 0; i < n; ++i) {
    if (i % 1000 == 0) e.op('(');
    e.op('}');
    e.memoize();
    e.op('(');
    e.str("action");
    e.str("alloc");
    e.str("addr");
    e.integer(0x7f0000000000ull + i * 512);
    e.str("size");
    e.integer(512);
    e.str("stream");
    e.integer(0);
    e.str("frames");
    e.op(']');
    e.memoize();
    e.op('(');
    for (int f = 0; f < 2; ++f) {
      if (i == 0) {
        e.op('}');
        frame_ids[f] = e.memoize();
        e.op('(');
        e.str("name");
        e.str(f ? "forward" : "backward");
        e.str("line");
        e.integer(10 + f);
        e.op('u');
      } else {
        e.get(frame_ids[f]);
      }
    }
    e.op('e');                                     // APPENDS frames
    e.op('u');                                     // SETITEMS entry
    if (i % 1000 == 999 || i + 1 == n) e.op('e');  // APPENDS into the device list
  }
  e.op('a');  // APPEND device list into device_traces
  e.str("allocator_settings");
  e.op('}');
  e.memoize();
  e.op('(');
  e.str("PYTORCH_CUDA_ALLOC_CONF");
  e.str("garbage_collection_threshold:0.5");
  e.op('u');
  e.op('u');  // SETITEMS top
  e.op('.');
  return e.out;
}

}  // namespace

TEST_CASE("snapshot: the real snapshot pickle gives exactly what Python's pickle.load sees", "[pickle]") {
  Loaded got = load(snapshot_path());
  auto expected = nlohmann::json::parse(test::read_file(test::data_path("pickle/encoder_varlen.expected.json")));
  CHECK(got.header.format == "snapshot");
  CHECK(got.header.settings == expected["settings"].get<std::string>());
  const auto& entries = expected["entries"];
  REQUIRE(got.records.size() == entries.size());
  for (std::size_t i = 0; i < entries.size(); ++i) {
    const auto& x = entries[i];
    INFO("entry " << i);
    REQUIRE(got.records[i].device == x[0].get<int>());
    REQUIRE(action_name(got.records[i].action) == x[1].get<std::string>());
    REQUIRE(got.records[i].addr == x[2].get<std::uint64_t>());
    REQUIRE(got.records[i].size == x[3].get<std::uint64_t>());
    REQUIRE(got.records[i].stream == x[4].get<std::uint64_t>());
    REQUIRE(got.records[i].time_ns == x[5].get<std::int64_t>() * 1000);
  }
  const auto& segs = expected["segments"];
  REQUIRE(got.final_state.segments.size() == segs.size());
  // Ours are sorted by address; Python's are in PyTorch's order.
  std::map<std::uint64_t, const nlohmann::json*> by_addr;
  for (const auto& s : segs) by_addr[s[1].get<std::uint64_t>()] = &s;
  for (const auto& s : got.final_state.segments) {
    REQUIRE(by_addr.count(s.address));
    const auto& x = *by_addr[s.address];
    CHECK(s.total_size == x[2].get<std::uint64_t>());
    CHECK(s.allocated_size == x[3].get<std::uint64_t>());
    CHECK(s.requested_size == x[4].get<std::uint64_t>());
    CHECK(s.is_large == (x[5].get<std::string>() == "large"));
    CHECK(s.is_expandable == x[6].get<bool>());
    REQUIRE(s.blocks.size() == x[7].size());
    for (std::size_t b = 0; b < s.blocks.size(); ++b) {
      CHECK(s.blocks[b].address == x[7][b][0].get<std::uint64_t>());
      CHECK(s.blocks[b].size == x[7][b][1].get<std::uint64_t>());
      CHECK(s.blocks[b].requested_size == x[7][b][2].get<std::uint64_t>());
      CHECK(block_state_name(s.blocks[b].state) == x[7][b][3].get<std::string>());
    }
  }
}

TEST_CASE("snapshot S1: the same data written with protocols 2, 3, 4 and 5 loads the same", "[pickle]") {
  Loaded ref = load(snapshot_path());
  for (int proto : {2, 3, 4, 5}) {
    INFO("protocol " << proto);
    Loaded got = load(test::data_path("pickle/encoder_varlen.proto" + std::to_string(proto) + ".pickle.gz"));
    REQUIRE(got.records.size() == ref.records.size());
    for (std::size_t i = 0; i < ref.records.size(); ++i) {
      REQUIRE(got.records[i].action == ref.records[i].action);
      REQUIRE(got.records[i].addr == ref.records[i].addr);
      REQUIRE(got.records[i].size == ref.records[i].size);
      REQUIRE(got.records[i].stream == ref.records[i].stream);
      REQUIRE(got.records[i].time_ns == ref.records[i].time_ns);
    }
    REQUIRE(got.final_state.segments.size() == ref.final_state.segments.size());
    for (std::size_t s = 0; s < ref.final_state.segments.size(); ++s) {
      CHECK(got.final_state.segments[s].address == ref.final_state.segments[s].address);
      CHECK(got.final_state.segments[s].blocks.size() == ref.final_state.segments[s].blocks.size());
    }
    CHECK(got.header.settings == ref.header.settings);
  }
}

TEST_CASE("snapshot S2: integers of 2^63 and more load", "[pickle]") {
  Loaded got = load(test::data_path("pickle/bigint.snapshot.pickle"));
  REQUIRE(got.records.size() == 2);
  CHECK(got.records[0].addr == (1ull << 63) + 4096);
  CHECK(got.records[0].stream == ~0ull);
  CHECK(got.records[1].action == Action::alloc);
  CHECK(got.records[1].size == 100);
  REQUIRE(got.final_state.segments.size() == 1);
  CHECK(got.final_state.segments[0].address == (1ull << 63) + 4096);
  CHECK(got.final_state.segments[0].blocks.size() == 2);
  CHECK(got.header.settings == "max_split_size_mb:128");
}

TEST_CASE("pickle values: LONG1 integers, big integers, floats, tuples, sets, bytes", "[pickle]") {
  // [2**63, -1, -(2**70), 1.5, (1, 2), {3}, b"ab", True, None] written by Python, protocol 4.
  const std::string bytes(
      "\x80\x04\x95\x3c\x00\x00\x00\x00\x00\x00\x00\x5d\x94\x28\x8a\x09\x00\x00\x00\x00\x00\x00\x00\x80\x00"
      "\x4a\xff\xff\xff\xff\x8a\x09\x00\x00\x00\x00\x00\x00\x00\x00\xc0\x47\x3f\xf8\x00\x00\x00\x00\x00\x00"
      "\x4b\x01\x4b\x02\x86\x94\x8f\x94\x28\x4b\x03\x90\x43\x02\x61\x62\x94\x88\x4e\x65\x2e",
      71);
  auto src = ByteSource::open(write_file("values.pickle", bytes));
  pickle::Unpickler u(*src, "values.pickle");
  REQUIRE_FALSE(u.run());
  const auto& v = *u.result();
  REQUIRE(v.kind == pickle::Kind::list);
  REQUIRE(v.items.size() == 9);
  std::uint64_t x = 0;
  CHECK(v.items[0]->kind == pickle::Kind::big_integer);
  CHECK(v.items[0]->to_u64(x));
  CHECK(x == 1ull << 63);
  CHECK(v.items[1]->integer == -1);
  CHECK(v.items[2]->kind == pickle::Kind::big_integer);
  CHECK_FALSE(v.items[2]->to_u64(x));
  CHECK(v.items[2]->integer == INT64_MIN);  // saturated
  CHECK(v.items[3]->floating == 1.5);
  CHECK(v.items[4]->kind == pickle::Kind::tuple);
  CHECK(v.items[4]->items.size() == 2);
  CHECK(v.items[5]->kind == pickle::Kind::set);
  CHECK(v.items[6]->kind == pickle::Kind::bytes);
  CHECK(v.items[6]->text == "ab");
  CHECK(v.items[7]->boolean);
  CHECK(v.items[8]->kind == pickle::Kind::none);
  CHECK(u.protocol() == 4);
}

TEST_CASE("pickle: hostile and broken pickles give clear errors", "[pickle]") {
  // pickle.dumps of os.system("ls") via __reduce__, protocol 2.
  std::string e = error_of(
      std::string("\x80\x02\x63\x70\x6f\x73\x69\x78\x0a\x73\x79\x73\x74\x65\x6d\x0a\x71\x00\x58\x02\x00\x00\x00\x6c\x73"
                  "\x71\x01\x85\x71\x02\x52\x71\x03\x2e",
                  34));
  CHECK_THAT(e, Catch::Contains("offset 2: opcode GLOBAL (0x63): refused"));
  // Protocol 4: STACK_GLOBAL
  e = error_of(
      std::string("\x80\x04\x95\x1d\x00\x00\x00\x00\x00\x00\x00\x8c\x05\x70\x6f\x73\x69\x78\x94\x8c\x06\x73\x79\x73\x74"
                  "\x65\x6d\x94\x93\x94\x8c\x02\x6c\x73\x94\x85\x94\x52\x94\x2e",
                  40));
  CHECK_THAT(e, Catch::Contains("opcode STACK_GLOBAL (0x93): refused"));
  e = error_of(std::string("\x80\x02NNR.", 6));
  CHECK_THAT(e, Catch::Contains("offset 4: opcode REDUCE (0x52): refused"));
  e = error_of(std::string("\x80\x02}N(b.", 7));
  CHECK_THAT(e, Catch::Contains("opcode BUILD"));
  e = error_of(std::string("\x80\x05\x97.", 4));
  CHECK_THAT(e, Catch::Contains("NEXT_BUFFER"));

  // Truncated: the real snapshot cut in half, plain and gzip.
  std::string full = test::read_file(snapshot_path());
  e = error_of(full.substr(0, full.size() / 2));
  CHECK_THAT(e, Catch::Contains("truncated"));
  std::string gz = test::read_file(test::data_path("pickle/encoder_varlen.proto4.pickle.gz"));
  e = error_of(gz.substr(0, gz.size() / 2), "cut.pickle.gz");
  CHECK_THAT(e, Catch::Contains("truncated") && Catch::Contains("gzip stream is cut off"));

  // Deep nesting: 20000 nested lists.
  std::string deep = "\x80\x04";
  for (int i = 0; i < 20000; ++i) deep += ']';
  for (int i = 0; i < 19999; ++i) deep += 'a';
  deep += '.';
  e = error_of(deep);
  CHECK_THAT(e, Catch::Contains("nested deeper than 10000 levels"));

  // Huge length fields: no allocation of that size, an error instead.
  e = error_of(std::string("\x80\x04\x8d\x00\x00\x00\x00\x00\x00\x00\x40xyz.", 15));
  CHECK_THAT(e, Catch::Contains("opcode BINUNICODE8") && Catch::Contains("exceeds the limit"));
  e = error_of(std::string("\x80\x04X\x00\x00\x00\x30xyz.", 11));
  CHECK_THAT(e, Catch::Contains("larger than the whole file"));
  e = error_of(test::gzip(std::string("\x80\x04X\x00\x00\x00\x30xyz", 10)), "huge.pickle.gz");
  CHECK_THAT(e, Catch::Contains("truncated"));
  e = error_of(std::string("\x80\x04\x8b\x00\x00\x00\x7f.", 8));
  CHECK_THAT(e, Catch::Contains("LONG4") && Catch::Contains("exceeds the limit"));

  // Other malformed input.
  e = error_of(std::string("\x80\x04j\x07\x00\x00\x00.", 8));
  CHECK_THAT(e, Catch::Contains("memo key 7 is not defined"));
  e = error_of(std::string("\x80\x04.", 3));
  CHECK_THAT(e, Catch::Contains("stack underflow"));
  e = error_of(std::string("\x80\x04\xff.", 4));
  CHECK_THAT(e, Catch::Contains("not a pickle opcode"));
  e = error_of(std::string("\x80\x09.", 3));
  CHECK_THAT(e, Catch::Contains("protocol 9 is not supported"));
  e = error_of(std::string("\x80\x04N", 3));
  CHECK_THAT(e, Catch::Contains("ends before its STOP opcode"));
  e = error_of(std::string("\x80\x04K\x01.", 5));
  CHECK_THAT(e, Catch::Contains("not a PyTorch memory snapshot"));
}

TEST_CASE("snapshot S3: device_traces entries stream with bounded memory", "[pickle]") {
  const std::size_t n = 300000;
  std::string bytes = synthetic_snapshot(n);
  auto path = write_file("big.pickle", bytes);
  bytes.clear();
  auto src = ByteSource::open(path);
  pickle::Unpickler u(*src, path);
  std::size_t delivered = 0, max_memo = 0, max_stack = 0;
  std::uint64_t last_addr = 0;
  u.stream_key("device_traces", [&](std::int32_t device, pickle::ValuePtr item) {
    REQUIRE(device == 0);
    std::uint64_t a = 0;
    REQUIRE(item->find("addr")->to_u64(a));
    REQUIRE(a == 0x7f0000000000ull + delivered * 512);
    last_addr = a;
    ++delivered;
  });
  while (u.run()) {
    max_memo = std::max(max_memo, u.memo_size());
    max_stack = std::max(max_stack, u.stack_size());
  }
  CHECK(delivered == n);
  // Without streaming the memo would hold 2 entries per trace entry (600000).
  CHECK(max_memo < 100);
  CHECK(max_stack < 3000);  // one APPENDS batch of 1000 at most
  const auto* settings = u.result()->find("allocator_settings");
  REQUIRE(settings);
  CHECK(settings->find("PYTORCH_CUDA_ALLOC_CONF")->text == "garbage_collection_threshold:0.5");
  // The device list kept no items.
  const auto* traces = u.result()->find("device_traces");
  REQUIRE(traces);
  REQUIRE(traces->items.size() == 1);
  CHECK(traces->items[0]->items.empty());
}

TEST_CASE("snapshot: a pickle that is not a PyTorch memory snapshot is refused, every real shape is read", "[pickle]") {
  // pickle.dumps({"foo": 1}, protocol=4), as Python writes it.
  std::string e = error_of(bin("\x80\x04\x95\x0c\x00\x00\x00\x00\x00\x00\x00}\x94\x8c\x03"
                               "foo\x94K\x01s."),
                           "foo.pickle");
  CHECK_THAT(e, Catch::Contains("foo.pickle: a pickle, but not a PyTorch memory snapshot") &&
                    Catch::Contains("a dict of 'foo' without \"segments\" or \"device_traces\""));
  e = error_of(bin("\x80\x04}."));
  CHECK_THAT(e, Catch::Contains("not a PyTorch memory snapshot: its top-level value is an empty dict"));
  // Top-level values that are not dicts.
  e = error_of(bin("\x80\x04K\x01."));
  CHECK_THAT(e, Catch::Contains("not a PyTorch memory snapshot: its top-level value is of type int, not a dict"));
  e = error_of(bin("\x80\x04N."));
  CHECK_THAT(e, Catch::Contains("of type NoneType, not a dict"));
  e =
      error_of(bin("\x80\x04\x8c\x03"
                   "abc."));
  CHECK_THAT(e, Catch::Contains("of type str, not a dict"));
  e = error_of(bin("\x80\x04)."));
  CHECK_THAT(e, Catch::Contains("of type tuple, not a dict"));
  // Lists that are not lists of segments.
  e =
      error_of(bin("\x80\x04]K\x01"
                   "a."));
  CHECK_THAT(e, Catch::Contains("a list whose item 0 is of type int, not a segment dict"));
  e =
      error_of(bin("\x80\x04]}\x8c\x03"
                   "fooK\x01sa."));
  CHECK_THAT(e, Catch::Contains("a list whose item 0 is a dict without an integer \"address\""));
  // Snapshot dicts whose history is not a list of lists.
  e =
      error_of(bin("\x80\x04}\x8c\x0d"
                   "device_tracesK\x01s."));
  CHECK_THAT(e, Catch::Contains("\"device_traces\" is not a list"));
  e =
      error_of(bin("\x80\x04}\x8c\x0d"
                   "device_traces]K\x01"
                   "as."));
  CHECK_THAT(e, Catch::Contains("device_traces[0] is not a list"));

  // What real snapshots look like, and the shapes PyTorch writes when there is little to say.
  CHECK(error_of(bin("\x80\x04].")).empty());  // memory_snapshot() with no segments
  CHECK(error_of(bin("\x80\x04}\x8c\x08segments]s.")).empty());
  CHECK(error_of(bin("\x80\x04}\x8c\x0d"
                     "device_traces]s."))
            .empty());
  for (const char* name : {"pickle/segments_only.pickle", "pickle/no_history.snapshot.pickle",
                           "pickle/bigint.snapshot.pickle", "torch-h200/gpt2_run.snapshot.pickle.zst"}) {
    INFO(name);
    Loaded got = load(test::data_path(name));
    CHECK_FALSE(got.final_state.segments.empty());
  }
}

TEST_CASE("pickle: values left on the stack at STOP are refused", "[pickle]") {
  std::string e = error_of(bin("\x80\x04]]]."));
  CHECK_THAT(e, Catch::Contains("opcode STOP") && Catch::Contains("2 values and 0 marks are left on the stack"));
  e = error_of(bin("\x80\x04(]."));
  CHECK_THAT(e, Catch::Contains("0 values and 1 marks are left on the stack"));
}

namespace {

// Runs a pickle through the unpickler with the snapshot reader's streaming rule (items dropped as
// they come). Returns the PickleError message, "" on success.
std::string unpickle(const std::string& path, const pickle::Limits& limits, std::uint64_t* peak = nullptr,
                     std::uint64_t* offset = nullptr) {
  auto src = ByteSource::open(path);
  pickle::Unpickler u(*src, path, limits);
  u.stream_key("device_traces", [](std::int32_t, const pickle::ValuePtr&) {});
  std::string error;
  try {
    while (u.run()) {
    }
  } catch (const pickle::PickleError& e) {
    error = e.what();
  }
  if (peak) *peak = u.peak_held_bytes();
  if (offset) *offset = u.offset();
  return error;
}

std::vector<std::string> real_snapshots() {
  std::vector<std::string> out;
  for (const char* name :
       {"torch-h200/encoder_varlen.snapshot.pickle", "torch-h200/gpt2_run.snapshot.pickle.zst",
        "pickle/encoder_varlen.proto2.pickle.gz", "pickle/encoder_varlen.proto4.pickle.gz",
        "pickle/late_start.snapshot.pickle.gz", "pickle/no_history.snapshot.pickle", "pickle/segments_only.pickle",
        "pickle/sites.snapshot.pickle", "oom/bert_16g/bert.485.torch.pickle.gz",
        "oom/encoder_10g/encoder.484.torch.pickle.gz", "oom/llama_t4/llama.470.torch.pickle.gz",
        "oom/dead_run.snapshot.pickle", "ledger/run.4242.torch.pickle"})
    out.push_back(test::data_path(name));
  return out;
}

std::uint64_t decompressed_size(const std::string& path) {
  auto src = ByteSource::open(path);
  std::vector<char> buf(1 << 20);
  std::uint64_t n = 0;
  while (std::size_t k = src->read(buf.data(), buf.size())) n += k;
  return n;
}

}  // namespace

TEST_CASE("pickle memory budget: an EMPTY_LIST bomb is refused early, plain, gzip and zstd", "[pickle]") {
  const std::string bomb = "\x80\x04" + std::string(16u << 20, ']') + ".";
  for (const auto& [name, bytes] : {std::pair<std::string, std::string>{"bomb.pickle", bomb},
                                    {"bomb.pickle.gz", test::gzip(bomb)},
                                    {"bomb.pickle.zst", test::zstd(bomb)}}) {
    INFO(name << ", " << bytes.size() << " bytes on disk");
    const std::string path = write_file(name, bytes);
    std::uint64_t peak = 0, offset = 0;
    const std::string e = unpickle(path, pickle::Limits{}, &peak, &offset);
    INFO(e);
    CHECK_THAT(e, Catch::StartsWith(path + ": offset ") && Catch::Contains("opcode EMPTY_LIST") &&
                      Catch::Contains("memory limit: the values built so far take") &&
                      Catch::Contains("16 MiB + 128 bytes per pickle byte read"));
    // Refused within the first MiB (about 190 bytes are built per byte, 128 allowed), holding no
    // more than the floor and what the bytes read allow.
    CHECK(offset < (1u << 20));
    CHECK(peak <= (16u << 20) + 128 * offset);
    // The trace reader's message is the same.
    CHECK_THAT(error_of(bytes, name), Catch::Contains("memory limit"));
  }
}

TEST_CASE("pickle memory budget: a compressed file that unpacks to a large pickle is bounded by its size on disk",
          "[pickle]") {
  // A list of 7 million BININTs appended one by one: 29 bytes built per pickle byte, below the
  // per-byte budget, but its 40 MiB zstd to about 4 KiB.
  std::string p = "\x80\x04]";
  const std::string item(
      "J\x01\x00\x00\x00"
      "a",
      6);
  p.reserve(p.size() + 7000000 * item.size() + 1);
  for (int i = 0; i < 7000000; ++i) p += item;
  p += '.';
  const std::string zst = test::zstd(p);
  INFO(p.size() << " bytes, " << zst.size() << " zstd");
  CHECK(zst.size() < 16384);
  const std::string path = write_file("ints.pickle.zst", zst);
  std::uint64_t offset = 0;
  const std::string e = unpickle(path, pickle::Limits{}, nullptr, &offset);
  CHECK_THAT(e, Catch::Contains("memory limit") && Catch::Contains("16384 bytes per compressed byte read"));
  CHECK(offset < p.size() / 4);
  // The same pickle uncompressed is within the per-byte budget (a list of numbers is not a
  // snapshot, but that is the snapshot reader's to say).
  pickle::Limits small_floor;
  small_floor.budget_floor_bytes = 1u << 20;
  const std::string plain = write_file("ints.pickle", p.substr(0, 3 + 100000 * item.size()) + ".");
  CHECK(unpickle(plain, small_floor).empty());
}

TEST_CASE("pickle memory budget: streamed trace entries stop counting once handed out", "[pickle]") {
  // 300,000 entries held at once would take about 300 MB; streamed, what is held is one APPENDS
  // batch of 1,000 entries (about 1.2 MB) and the memo's 4 bytes per key (about 4 MB).
  const std::string path = write_file("streamed.pickle", synthetic_snapshot(300000));
  pickle::Limits tight;
  tight.budget_floor_bytes = 8u << 20;
  tight.budget_per_byte = 1;
  std::uint64_t peak = 0;
  CHECK(unpickle(path, tight, &peak) == "");
  CHECK(peak < (8u << 20));
}

TEST_CASE("pickle memory budget: every real snapshot needs under a quarter of it", "[pickle]") {
  // The defaults leave a margin of more than 4 per pickle byte and 10 per compressed byte (the
  // measured ratios are in docs/reliability.md, "Pickles"); these are the defaults divided so.
  pickle::Limits quarter;
  quarter.budget_floor_bytes = 1u << 20;
  quarter.budget_per_byte = pickle::Limits{}.budget_per_byte / 4;
  quarter.budget_per_compressed_byte = pickle::Limits{}.budget_per_compressed_byte / 10;
  for (const auto& path : real_snapshots()) {
    INFO(path);
    CHECK(unpickle(path, quarter) == "");
  }
}

TEST_CASE("pickle memory budget: the ratios of the real snapshots (prints them)", "[.][pickle][measure]") {
  // `test_readers "[measure]"`: the figures of docs/reliability.md, "Pickles" (also of the
  // files named in $VRAMTRACE_MEASURE_PICKLES, separated by ':'). The worst point of a run is the
  // largest held/read ratio once 64 KiB (16 KiB compressed) are read: what the rules meet.
  std::vector<std::string> paths = real_snapshots();
  if (const char* more = std::getenv("VRAMTRACE_MEASURE_PICKLES")) {
    std::string list = more;
    for (std::size_t at = 0; at <= list.size();) {
      const std::size_t end = std::min(list.find(':', at), list.size());
      if (end > at) paths.push_back(list.substr(at, end - at));
      at = end + 1;
    }
  }
  for (const auto& path : paths) {
    auto src = ByteSource::open(path);
    pickle::Limits unlimited;
    unlimited.budget_floor_bytes = UINT64_MAX / 2;
    pickle::Unpickler u(*src, path, unlimited);
    u.stream_key("device_traces", [](std::int32_t, const pickle::ValuePtr&) {});
    double worst = 0, worst_compressed = 0;
    auto sample = [&] {
      if (u.offset() >= (64u << 10)) worst = std::max(worst, double(u.held_bytes()) / double(u.offset()));
      if (src->compression() != Compression::none && src->bytes_read() >= (16u << 10))
        worst_compressed = std::max(worst_compressed, double(u.held_bytes()) / double(src->bytes_read()));
    };
    while (u.run()) sample();
    sample();
    const std::uint64_t size = decompressed_size(path), on_disk = ByteSource::open(path)->bytes_total();
    std::printf(
        "%s: %llu bytes on disk, %llu pickle bytes, peak held %llu bytes: %.1f per pickle byte, %.1f per "
        "byte on disk; worst point %.1f per pickle byte, %.1f per compressed byte read\n",
        path.c_str(), static_cast<unsigned long long>(on_disk), static_cast<unsigned long long>(size),
        static_cast<unsigned long long>(u.peak_held_bytes()), double(u.peak_held_bytes()) / double(size),
        double(u.peak_held_bytes()) / double(on_disk), worst, worst_compressed);
  }
}

TEST_CASE("pickle memory budget: what is counted is at least what is built", "[pickle]") {
  // Every value's cost is its footprint, and the count covers every value reachable from the result.
  auto src = ByteSource::open(test::data_path("pickle/no_history.snapshot.pickle"));
  pickle::Unpickler u(*src, "no_history.snapshot.pickle");
  REQUIRE_FALSE(u.run());
  std::vector<const pickle::Value*> todo{u.result().get()};
  std::set<const pickle::Value*> seen{u.result().get()};
  std::uint64_t total = 0;
  while (!todo.empty()) {
    const pickle::Value* v = todo.back();
    todo.pop_back();
    CHECK(v->cost == pickle::footprint(*v));
    total += pickle::footprint(*v);
    auto visit = [&](const pickle::ValuePtr& c) {
      if (seen.insert(c.get()).second) todo.push_back(c.get());
    };
    for (const auto& c : v->items) visit(c);
    for (const auto& [k, x] : v->entries) {
      visit(k);
      visit(x);
    }
  }
  CHECK(total > 10000);
  CHECK(u.held_bytes() >= total);
  CHECK(u.peak_held_bytes() >= u.held_bytes());
}
