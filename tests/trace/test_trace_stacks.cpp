// Call stacks in the trace (format 1.2): the lock-free stack table, the writer's module, string
// and stack records (Note [records before use]), and the reader's frames, notes and tolerance of
// damaged records.
#include <dlfcn.h>
#include <elf.h>
#include <fmt/format.h>
#include <link.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>
#include <tuple>

#include "trace_test_util.h"
#include "vramtrace/trace/modules.h"
#include "vramtrace/trace/stack_interner.h"

using namespace vramtrace;
using namespace vramtrace::trace;
using vramtrace::test::ScratchDir;

namespace {

__attribute__((noinline)) int marker_function_a(int x) { return x * 3 + 1; }
__attribute__((noinline)) int marker_function_b(int x) { return x * 5 + 2; }

std::uint64_t address_of(int (*f)(int)) { return reinterpret_cast<std::uint64_t>(f); }

// This executable's load bias and path, as the writer's module map should find them.
struct Self {
  std::uint64_t bias = 0;
  std::string path;
};
Self self_module() {
  Dl_info info{};
  link_map* map = nullptr;
  REQUIRE(dladdr1(reinterpret_cast<void*>(&marker_function_a), &info, reinterpret_cast<void**>(&map),
                  RTLD_DL_LINKMAP) != 0);
  return {map->l_addr, std::filesystem::canonical("/proc/self/exe").string()};
}

TraceWriterOptions options_for(const std::string& path) {
  TraceWriterOptions o;
  o.output_pattern = path;
  o.header.tool_version = "test";
  o.header.entry_points = {"", "cudaMalloc"};
  return o;
}

std::vector<nlohmann::json> json_lines(const std::string& path) {
  std::vector<nlohmann::json> out;
  std::istringstream in(test::read_file(path));
  for (std::string line; std::getline(in, line);) out.push_back(nlohmann::json::parse(line));
  return out;
}

struct Read {
  std::vector<TraceRecord> records;
  std::shared_ptr<const StackTable> stacks;
  std::vector<std::string> notes;
};
Read read_back(const std::string& path) {
  Read r;
  auto reader = open_vramtrace_trace(path);
  for (TraceRecord rec; reader->next(rec);) r.records.push_back(rec);
  r.stacks = reader->stacks();
  r.notes = reader->notes();
  return r;
}

std::string write_lines(const ScratchDir& dir, const std::string& name, const std::vector<std::string>& lines) {
  const std::string path = dir.file(name);
  std::ofstream out(path);
  for (const auto& l : lines) out << l << "\n";
  return path;
}

const std::string kHeader =
    R"({"a":"header","format":"vramtrace","version":"1.2","pid":1,"command_line":["t"],"start_unix_ns":0,)"
    R"("origin_monotonic_ns":0,"devices":[{"id":0,"name":"GPU","total_bytes":1073741824}],"entry_points":[""]})";

}  // namespace

TEST_CASE("stack table: equal frames share an id, any difference gets another", "[trace][stacks]") {
  StackInterner t;
  const FrameWord a[] = {0x1000, 0x2000, 0x3000};
  const FrameWord b[] = {0x1000, 0x2000, 0x3001};
  const std::uint32_t ia = t.intern_stack(a, 3);
  CHECK(ia != 0);
  CHECK(t.intern_stack(a, 3) == ia);
  CHECK(t.intern_stack(b, 3) != ia);
  CHECK(t.intern_stack(a, 2) != ia);  // a prefix is another stack
  CHECK(t.intern_stack(a, 0) == 0);
  const StackInterner::Stack* s = t.stack(ia);
  REQUIRE(s != nullptr);
  CHECK(s->size == 3);
  CHECK(std::memcmp(s->frames(), a, sizeof a) == 0);
  CHECK(t.stack(0) == nullptr);
  CHECK(t.stack(12345) == nullptr);

  const std::uint32_t c1 = t.intern_code("train.py", "main");
  CHECK(c1 != 0);
  CHECK(t.intern_code("train.py", "main") == c1);
  CHECK(t.intern_code("train.pym", "ain") != c1);  // the split between file and name counts
  CHECK(t.code(c1)->file() == "train.py");
  CHECK(t.code(c1)->name() == "main");
  const FrameWord py = python_frame(c1, 42);
  CHECK(is_python_frame(py));
  CHECK(python_code(py) == c1);
  CHECK(python_line(py) == 42);
  CHECK(python_line(python_frame(c1, kMaxPythonLine + 1)) == 0);  // beyond the field: unknown
  CHECK(!t.full());
}

TEST_CASE("stack table: threads interning the same stacks at once agree on every id", "[trace][stacks][threads]") {
  StackInterner t;
  constexpr int kThreads = 8, kStacks = 2000;
  std::vector<std::vector<std::uint32_t>> ids(kThreads, std::vector<std::uint32_t>(kStacks));
  std::atomic<int> go{0};
  std::vector<std::thread> ts;
  for (int k = 0; k < kThreads; ++k) {
    ts.emplace_back([&, k] {
      go.fetch_add(1);
      while (go.load() < kThreads) {
      }
      for (int i = 0; i < kStacks; ++i) {
        const int j = (i * 7 + k * 131) % kStacks;  // each thread in its own order
        const FrameWord f[] = {0x400000u + static_cast<FrameWord>(j), 0x500000, python_frame(1 + j % 5, j % 100)};
        ids[k][j] = t.intern_stack(f, 3);
      }
    });
  }
  for (auto& th : ts) th.join();
  std::set<std::uint32_t> distinct;
  for (int j = 0; j < kStacks; ++j) {
    for (int k = 1; k < kThreads; ++k) CHECK(ids[k][j] == ids[0][j]);
    distinct.insert(ids[0][j]);
    const StackInterner::Stack* s = t.stack(ids[0][j]);
    REQUIRE(s != nullptr);
    CHECK(s->frames()[0] == 0x400000u + static_cast<FrameWord>(j));
  }
  CHECK(distinct.size() == kStacks);
  CHECK(distinct.count(0) == 0);
}

TEST_CASE("stack table: a full table says so and gives no id", "[trace][stacks]") {
  StackInterner t;
  std::uint32_t last = 0;
  for (std::uint32_t i = 0; i < StackInterner::kMaxStacks; ++i) {
    const FrameWord f[] = {0x10000u + i};
    last = t.intern_stack(f, 1);
    if (last == 0) break;
  }
  CHECK(last != 0);  // every one of kMaxStacks fits
  CHECK(!t.full());
  const FrameWord more[] = {0x1};
  CHECK(t.intern_stack(more, 1) == 0);
  CHECK(t.full());
  const FrameWord old[] = {0x10000u};
  CHECK(t.intern_stack(old, 1) == 1);  // known stacks keep their ids
}

TEST_CASE("build-id: the GNU note of a module, whatever notes come before it", "[trace][stacks]") {
  // Two notes, 4-byte aligned: a GNU property-like note of another type, then the build-id.
  std::vector<unsigned char> notes;
  auto put32 = [&](std::uint32_t v) {
    for (int i = 0; i < 4; ++i) notes.push_back(static_cast<unsigned char>(v >> (8 * i)));
  };
  put32(4), put32(8), put32(NT_GNU_ABI_TAG);
  for (char c : std::string("GNU\0", 4)) notes.push_back(static_cast<unsigned char>(c));
  for (int i = 0; i < 8; ++i) notes.push_back(0);
  put32(4), put32(5), put32(NT_GNU_BUILD_ID);
  for (char c : std::string("GNU\0", 4)) notes.push_back(static_cast<unsigned char>(c));
  for (unsigned char c : {0xde, 0xad, 0xbe, 0xef, 0x01}) notes.push_back(c);
  notes.resize(notes.size() + 3);  // padding to 4
  CHECK(read_build_id({{notes.data(), notes.size()}}, 4) == "deadbeef01");
  CHECK(read_build_id({{notes.data(), 20}}, 4).empty());                // cut inside the first note
  CHECK(read_build_id({{notes.data(), notes.size() - 5}}, 4).empty());  // the build-id's bytes cut
  // This executable's own note, as the module map reads it, is what readelf would print.
  ModuleMap map;
  ModuleInfo* m = map.find(address_of(&marker_function_a));
  REQUIRE(m != nullptr);
  CHECK(m->path == self_module().path);
  CHECK(m->bias == self_module().bias);
  CHECK(!m->build_id.empty());
  CHECK(map.find(0x10) == nullptr);  // no module there, and no second walk of the loader's list
}

TEST_CASE("stacks round trip: records before first use, frames read back as module + address or file:line",
          "[trace][stacks][roundtrip]") {
  auto compression = GENERATE(Compression::none, Compression::zstd);
  ScratchDir dir;
  const std::string name = compression == Compression::zstd ? "s.jsonl.zst" : "s.jsonl";
  auto opts = options_for(dir.file(name));
  opts.buffer_events = 64;  // a small ring: the threads wait for the writer
  TraceWriter w(opts);
  REQUIRE(w.start());
  StackInterner& t = w.stacks();
  const std::uint32_t main_py = t.intern_code("/home/me/train.py", "main");
  const std::uint32_t step_py = t.intern_code("/home/me/train.py", "step");
  const std::uint64_t pc_a = address_of(&marker_function_a) + 1, pc_b = address_of(&marker_function_b) + 1;
  // Stack 1: native frames of this executable, and one in no module; stack k > 1: Python frames
  // at line k on top of native frames.
  constexpr int kThreads = 4, kPerThread = 300, kStacks = 40;
  std::vector<std::uint32_t> ids(kStacks + 1);
  {
    const FrameWord f[] = {pc_a, pc_b, 0x10};
    ids[1] = t.intern_stack(f, 3);
  }
  for (int k = 2; k <= kStacks; ++k) {
    const FrameWord f[] = {pc_b, python_frame(step_py, static_cast<std::uint32_t>(k)), python_frame(main_py, 7)};
    ids[k] = t.intern_stack(f, 3);
  }
  std::vector<std::thread> ts;
  for (int th = 0; th < kThreads; ++th) {
    ts.emplace_back([&, th] {
      for (int i = 0; i < kPerThread; ++i) {
        Event e{};
        e.action = i % 3 == 2 ? Action::free_completed : Action::alloc;
        e.time_ns = TraceWriter::now_ns();
        e.addr = 0x7f0000000000ull + (static_cast<std::uint64_t>(th) << 32) + static_cast<std::uint64_t>(i) * 4096;
        e.size_bytes = e.block_bytes = 4096;
        e.thread_id = static_cast<std::uint32_t>(th + 1);
        e.stack_id = ids[1 + (i * 7 + th) % kStacks];  // frees keep a stack id: it must not be written
        w.record(e);
      }
    });
  }
  for (auto& th : ts) th.join();
  Event oom{};
  oom.action = Action::oom;
  oom.time_ns = TraceWriter::now_ns();
  oom.size_bytes = 1 << 30;
  oom.stack_id = ids[2];
  w.record_oom(oom, Snapshot{});
  Event unknown{};
  unknown.action = Action::segment_alloc;
  unknown.time_ns = TraceWriter::now_ns();
  unknown.size_bytes = unknown.block_bytes = 2 << 20;
  unknown.stack_id = 99999;  // never interned: written without a stack
  w.record(unknown);
  w.close();

  Read r = read_back(w.path());
  CHECK(r.notes.empty());
  REQUIRE(r.stacks);
  CHECK(r.stacks->size() == kStacks);
  const Self self = self_module();
  int allocs = 0;
  for (const TraceRecord& rec : r.records) {
    if (rec.action == Action::free_completed || rec.action == Action::segment_alloc) {
      CHECK(rec.stack_id == 0);
      continue;
    }
    REQUIRE(rec.stack_id != 0);
    const std::vector<Frame>* f = r.stacks->get(rec.stack_id);
    REQUIRE(f != nullptr);
    REQUIRE(f->size() == 3);
    if (rec.action == Action::oom) {
      CHECK((*f)[1].line == 2);
      continue;
    }
    ++allocs;
    if ((*f)[1].module.empty()) {  // a Python stack
      CHECK((*f)[0].module == self.path);
      CHECK((*f)[0].address == pc_b - self.bias);
      CHECK((*f)[1].filename == "/home/me/train.py");
      CHECK((*f)[1].name == "step");
      CHECK((*f)[1].line >= 2);
      CHECK((*f)[2].name == "main");
      CHECK((*f)[2].line == 7);
    } else {
      CHECK((*f)[0].module == self.path);
      CHECK((*f)[0].address == pc_a - self.bias);
      CHECK(!(*f)[0].build_id.empty());
      CHECK((*f)[0].name ==
            std::filesystem::path(self.path).filename().string() + fmt::format("+0x{:x}", pc_a - self.bias));
      CHECK((*f)[2].module.empty());  // 0x10 lay in no module
      CHECK((*f)[2].name == "0x10");
    }
  }
  CHECK(allocs == kThreads * (kPerThread - kPerThread / 3));

  if (compression == Compression::none) {
    // In the file: each module, string and stack once, before the first line that uses it.
    std::set<std::uint64_t> stacks, modules, strings;
    for (const auto& j : json_lines(w.path())) {
      const std::string a = j.value("a", "");
      if (a == "module") CHECK(modules.insert(j["id"].get<std::uint64_t>()).second);
      if (a == "string") CHECK(strings.insert(j["id"].get<std::uint64_t>()).second);
      if (a == "stack") {
        CHECK(stacks.insert(j["id"].get<std::uint64_t>()).second);
        for (const auto& f : j["frames"]) {
          if (f.contains("m")) CHECK(modules.count(f["m"].get<std::uint64_t>()) == 1);
          if (f.contains("f")) CHECK(strings.count(f["f"].get<std::uint64_t>()) == 1);
        }
      }
      if (j.contains("st")) CHECK(stacks.count(j["st"].get<std::uint64_t>()) == 1);
      if (a == "free_completed" || a == "segment_alloc") CHECK(!j.contains("st"));
    }
    CHECK(strings.size() == 3);  // the file and the two functions, once each
    CHECK(modules.size() == 1);  // this executable; 0x10 is in none
  }
}

TEST_CASE("stacks: the reader notes what a trace names but never defines, and skips damaged records",
          "[trace][stacks][reader]") {
  ScratchDir dir;
  const std::string path = write_lines(
      dir, "d.jsonl",
      {kHeader, R"({"a":"module","id":1,"path":"/usr/lib/libfoo.so.1","bias":4096,"start":4096,"size":8192})",
       R"({"a":"string","id":1,"text":"app.py"})",
       R"({"a":"stack","id":5,"frames":[{"m":1,"pc":4660},{"m":9,"pc":77},{"f":1,"l":3,"n":2}]})",
       R"({"a":"stack","id":6,"frames":"oops"})", R"({"a":"stack","frames":[]})",
       R"({"a":"stack","id":7,"frames":[{"x":1}]})",
       R"({"frames":[{"pc":1}],"id":8,"a":"stack"})",  // "a" last: still a stack record
       R"({"a":"stack","id":5,"frames":[{"pc":1}]})",  // a second definition: the first stays
       R"({"a":"alloc","t":1,"p":4096,"r":512,"st":5})", R"({"a":"alloc","t":2,"p":8192,"r":512,"st":6})",
       R"({"a":"alloc","t":3,"p":12288,"r":512,"st":8})",
       R"({"a":"free_requested","t":4,"p":4096,"r":512,"st":5})",  // not an allocation: ignored
       R"({"a":"trailer","t":5,"events":4,"dropped":0,"counts":{},"devices":[]})"});
  Read r = read_back(path);
  REQUIRE(r.records.size() == 4);
  const std::vector<Frame>* f = r.stacks->get(r.records[0].stack_id);
  REQUIRE(f != nullptr);
  REQUIRE(f->size() == 3);
  CHECK((*f)[0].module == "/usr/lib/libfoo.so.1");
  CHECK((*f)[0].address == 4660 - 4096);
  CHECK((*f)[0].name == "libfoo.so.1+0x234");
  CHECK((*f)[1].module.empty());  // module 9 never defined
  CHECK((*f)[1].name == "0x4d");
  CHECK((*f)[2].filename == "app.py");
  CHECK((*f)[2].name == "??");  // string 2 never defined
  CHECK((*f)[2].line == 3);
  CHECK(r.records[1].stack_id == 0);  // stack 6 was damaged
  CHECK(r.records[2].stack_id != 0);
  CHECK(r.records[3].stack_id == 0);
  std::string all;
  for (const auto& n : r.notes) all += n + "\n";
  INFO(all);
  CHECK(all.find("1 events name a call stack that the trace never defined (first at line 11)") != std::string::npos);
  CHECK(all.find("3 damaged call-stack records were skipped (line 5: a stack record without its \"frames\")") !=
        std::string::npos);
  CHECK(all.find("1 native frames name a module the trace never defined (line 4: module 9)") != std::string::npos);
  CHECK(all.find("1 Python frames name a string the trace never defined (line 4: string 2)") != std::string::npos);
  CHECK(all.find("line 9: stack 5 is defined a second time; the first is kept") != std::string::npos);
}

TEST_CASE("stacks: a trace of format 1.1 reads as before, without stacks", "[trace][stacks][reader]") {
  ScratchDir dir;
  std::string header = kHeader;
  header.replace(header.find("1.2"), 3, "1.1");
  const std::string path = write_lines(dir, "old.jsonl",
                                       {header, R"({"a":"alloc","t":1,"p":4096,"r":512})",
                                        R"({"a":"trailer","t":5,"events":1,"dropped":0,"counts":{},"devices":[]})"});
  Read r = read_back(path);
  REQUIRE(r.records.size() == 1);
  CHECK(r.records[0].stack_id == 0);
  CHECK(r.stacks->size() == 0);
  CHECK(r.notes.empty());
}

TEST_CASE("stacks: a frame namer names each native frame once, when the stacks are asked for",
          "[trace][stacks][reader]") {
  struct Namer : FrameNamer {
    std::vector<std::tuple<std::string, std::string, std::uint64_t>> asked;
    std::optional<Name> name(std::string_view module, std::string_view build_id, std::uint64_t address) override {
      asked.emplace_back(std::string(module), std::string(build_id), address);
      if (address == 0x234) return Name{"foo::bar(int)", "/src/foo.cpp", 12};
      if (address == 0x300) return Name{"only_a_name", "", 0};
      return std::nullopt;
    }
    std::vector<std::string> notes() const override { return {"namer note"}; }
  };
  ScratchDir dir;
  const std::string path = write_lines(
      dir, "n.jsonl",
      {kHeader,
       R"({"a":"module","id":1,"path":"/usr/lib/libfoo.so.1","bias":4096,"start":4096,"size":8192,"build_id":"ab12"})",
       R"({"a":"string","id":1,"text":"app.py"})",
       R"({"a":"stack","id":1,"frames":[{"m":1,"pc":4660},{"m":1,"pc":4864},{"m":1,"pc":5000},{"f":1,"l":3,"n":1}]})",
       R"({"a":"alloc","t":1,"p":4096,"r":512,"st":1})",
       R"({"a":"trailer","t":5,"events":1,"dropped":0,"counts":{},"devices":[]})"});
  auto reader = open_vramtrace_trace(path);
  auto namer = std::make_shared<Namer>();
  reader->set_frame_namer(namer);
  for (TraceRecord rec; reader->next(rec);) {
  }
  const auto stacks = reader->stacks();
  const std::vector<Frame>& f = *stacks->get(1);
  CHECK(f[0].filename == "/src/foo.cpp");
  CHECK(f[0].line == 12);
  CHECK(f[0].name == "foo::bar(int)");
  CHECK(f[0].module == "/usr/lib/libfoo.so.1");  // still a native frame of its module
  CHECK(f[0].address == 0x234);
  CHECK(f[1].filename.empty());  // a function name alone
  CHECK(f[1].name == "only_a_name");
  CHECK(f[2].name == "libfoo.so.1+0x388");  // unknown to the namer: as read
  CHECK(f[3].filename == "app.py");         // Python frames are not the namer's
  REQUIRE(namer->asked.size() == 3);
  CHECK(std::get<1>(namer->asked[0]) == "ab12");
  (void)reader->stacks();
  CHECK(namer->asked.size() == 3);  // each frame once
  const auto notes = reader->notes();
  CHECK(std::find(notes.begin(), notes.end(), "namer note") != notes.end());
}
