// The safe pickle reader and the snapshot TraceReader (cases S1, S2, S3 of docs/cases.md).
#include <catch2/catch.hpp>

#include <map>
#include <nlohmann/json.hpp>

#include "readers/open_trace.h"
#include "readers/pickle.h"
#include "test_util.h"
#include "vramtrace/trace/byte_source.h"

using namespace vramtrace;
using vramtrace::test::write_file;

namespace {

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
  CHECK_THAT(e, Catch::Contains("neither a snapshot dict nor a list of segments"));
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
