// The native symboliser (reporter/symbols): function names from .symtab and .dynsym, source lines
// from DWARF, separate debug files, build-id checks, and files that cannot be used.
//
// The ELF inputs are built with the test: this executable, libvt_symfix.so (symbols_fixture.cpp,
// -g -O0, loaded here) and, made by CMake from it, a stripped copy (.dynsym only), its debug file
// and a stripped copy with a .gnu_debuglink. Addresses come from the loaded library, turned into
// link-time addresses with the load bias the dynamic loader reports, as the shim records them.
#include <dlfcn.h>
#include <elf.h>
#include <link.h>
#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cctype>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "symbols/dwarf_lines.h"
#include "symbols/elf_image.h"
#include "symbols/interval_index.h"
#include "symbols/symbolizer.h"
#include "test_util.h"

extern "C" {
int vt_fixture_plain(int x);
void* vt_fixture_hidden_address();
void* vt_fixture_call_site(int* line);
void* vt_fixture_inlined_call_site(int* line, int* body_line);
}

namespace fs = std::filesystem;
using vramtrace::NativeSymbol;
using vramtrace::Symbolizer;
using vramtrace::SymbolizerOptions;

namespace symbols_test {

__attribute__((noinline)) void* return_address() { return __builtin_return_address(0); }
__attribute__((noinline)) int marker(int x) { return x * 7; }
__attribute__((noinline)) void* call_site(int* line) {
  *line = __LINE__ + 1;
  return return_address();
}

}  // namespace symbols_test

namespace {

const std::string kFixtureDir = VT_SYMFIX_DIR;
const std::string kLib = kFixtureDir + "/libvt_symfix.so";
const std::string kStripped = kFixtureDir + "/libvt_symfix.stripped.so";
const std::string kDebug = kFixtureDir + "/libvt_symfix.debug";
const std::string kLinked = kFixtureDir + "/libvt_symfix.linked.so";

// A loaded module as the shim records it: path, build-id, load bias.
struct Module {
  std::string path;
  std::string build_id;
  std::uintptr_t bias = 0;
};

// The GNU build-id of the loaded object with load bias `bias`, read from its PT_NOTE segments in
// memory (not with the symboliser's own reader).
std::string loaded_build_id(std::uintptr_t bias) {
  struct Search {
    std::uintptr_t bias;
    std::string hex;
  } search{bias, {}};
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* data) {
        auto* s = static_cast<Search*>(data);
        if (info->dlpi_addr != s->bias) return 0;
        for (int i = 0; i < info->dlpi_phnum; ++i) {
          const ElfW(Phdr)& ph = info->dlpi_phdr[i];
          if (ph.p_type != PT_NOTE) continue;
          const auto* p = reinterpret_cast<const std::uint8_t*>(info->dlpi_addr + ph.p_vaddr);
          const std::uint64_t align = ph.p_align == 8 ? 8 : 4;
          for (std::uint64_t pos = 0; pos + 12 <= ph.p_memsz;) {
            std::uint32_t namesz, descsz, type;
            std::memcpy(&namesz, p + pos, 4);
            std::memcpy(&descsz, p + pos + 4, 4);
            std::memcpy(&type, p + pos + 8, 4);
            const std::uint64_t desc = (pos + 12 + namesz + align - 1) / align * align;
            if (type == NT_GNU_BUILD_ID && namesz == 4 && std::memcmp(p + pos + 12, "GNU", 4) == 0) {
              s->hex = vramtrace::symbols::to_hex({p + desc, descsz});
              return 1;
            }
            pos = (desc + descsz + align - 1) / align * align;
          }
        }
        return 1;
      },
      &search);
  return search.hex;
}

Module module_of(const void* p) {
  Dl_info info{};
  link_map* map = nullptr;
  REQUIRE(dladdr1(p, &info, reinterpret_cast<void**>(&map), RTLD_DL_LINKMAP) != 0);
  REQUIRE(map != nullptr);
  Module m;
  m.bias = map->l_addr;
  m.path = map->l_name;
  if (m.path.empty()) m.path = fs::read_symlink("/proc/self/exe").string();  // the main program
  m.build_id = loaded_build_id(m.bias);
  return m;
}

std::uint64_t link_address(const Module& m, const void* p) { return reinterpret_cast<std::uintptr_t>(p) - m.bias; }

void* fixture_symbol(const char* name) {
  void* p = dlsym(RTLD_DEFAULT, name);
  REQUIRE(p != nullptr);
  return p;
}

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// The symboliser's notes, less the fact that a build without libdw adds to every usable module,
// so that the same checks hold in both builds.
std::vector<std::string> notes_of(const Symbolizer& s) {
  std::string why;
  vramtrace::symbols::DwarfLines::open("", why);
  const std::string fact = "no line numbers: " + why;
  std::vector<std::string> out;
  for (std::string n : s.notes()) {
    if (!vramtrace::symbols::DwarfLines::available()) {
      for (const std::string& cut : {"; " + fact, fact + "; ", fact}) {
        const auto at = n.find(cut);
        if (at != std::string::npos) n.erase(at, cut.size());
      }
      if (n.size() >= 2 && n.compare(n.size() - 2, 2, ": ") == 0) continue;  // nothing else to say
    }
    out.push_back(n);
  }
  return out;
}

std::string notes_text(const Symbolizer& s) {
  std::string all;
  for (const auto& n : notes_of(s)) all += n + "\n";
  return all;
}

// A fresh empty directory.
std::string temp_dir(const std::string& name) {
  const std::string dir = vramtrace::test::temp_path(name);
  fs::create_directories(dir);
  return dir;
}

std::string copy_to(const std::string& from, const std::string& to) {
  fs::create_directories(fs::path(to).parent_path());
  fs::copy_file(from, to, fs::copy_options::overwrite_existing);
  return to;
}

void run(const std::string& command) {
  INFO(command);
  REQUIRE(std::system(command.c_str()) == 0);
}

// Every address the fixture tests look up, with what a full symbolisation says.
struct Expected {
  std::uint64_t address;
  std::string function;
  int line = 0;  // 0: not checked
};

struct FixtureFrames {
  Module lib;
  std::vector<Expected> exported;  // named in .dynsym
  Expected hidden;                 // a local function: .symtab only
  Expected call;                   // a return address, with the call's line
  Expected inlined;                // a return address in inlined code, with the caller's line
  int inlined_body_line = 0;
};

FixtureFrames fixture_frames() {
  FixtureFrames f;
  f.lib = module_of(reinterpret_cast<void*>(&vt_fixture_plain));
  REQUIRE(fs::equivalent(f.lib.path, kLib));
  REQUIRE(f.lib.build_id.size() == 40);
  auto at = [&](const void* p, std::uint64_t plus) { return link_address(f.lib, p) + plus; };
  f.exported = {
      {at(reinterpret_cast<void*>(&vt_fixture_plain), 0), "vt_fixture_plain"},
      {at(reinterpret_cast<void*>(&vt_fixture_plain), 5), "vt_fixture_plain"},
      {at(fixture_symbol("_ZN10vt_fixture6Widget4growEi"), 3), "vt_fixture::Widget::grow(int)"},
      {at(fixture_symbol("_ZN10vt_fixture5twiceIlEET_S1_"), 1), "long vt_fixture::twice<long>(long)"},
  };
  f.hidden = {at(vt_fixture_hidden_address(), 2), "(anonymous namespace)::hidden_helper(int)"};
  int line = 0;
  void* ret = vt_fixture_call_site(&line);
  f.call = {at(ret, 0) - 1, "vt_fixture_call_site", line};
  ret = vt_fixture_inlined_call_site(&line, &f.inlined_body_line);
  f.inlined = {at(ret, 0) - 1, "vt_fixture_inlined_call_site", line};
  return f;
}

void check_full(Symbolizer& s, const std::string& path, const FixtureFrames& f) {
  for (const auto& e : f.exported) {
    auto sym = s.lookup(path, f.lib.build_id, e.address);
    REQUIRE(sym);
    CHECK(sym->function == e.function);
  }
  auto hidden = s.lookup(path, f.lib.build_id, f.hidden.address);
  REQUIRE(hidden);
  CHECK(hidden->function == f.hidden.function);
  for (const Expected* e : {&f.call, &f.inlined}) {
    auto sym = s.lookup(path, f.lib.build_id, e->address);
    REQUIRE(sym);
    CHECK(sym->function == e->function);
    if (vramtrace::symbols::DwarfLines::available()) {
      CHECK(ends_with(sym->file, "tests/reporter/symbols_fixture.cpp"));
      CHECK(sym->line == static_cast<std::uint32_t>(e->line));
    }
  }
}

}  // namespace

TEST_CASE("a shared library with .symtab and DWARF: exact names, demangled, and lines") {
  const FixtureFrames f = fixture_frames();
  Symbolizer s;
  check_full(s, f.lib.path, f);
  INFO(notes_text(s));
  CHECK(notes_of(s).empty());
  // Note [the line of the named function]: the inlined code's own line is another one.
  CHECK(f.inlined_body_line != f.inlined.line);
  // A second lookup is answered from the cache, identically.
  auto again = s.lookup(f.lib.path, f.lib.build_id, f.call.address);
  REQUIRE(again);
  CHECK(again->function == f.call.function);
  // An address in no executable section of the module.
  CHECK_FALSE(s.lookup(f.lib.path, f.lib.build_id, 0x7fff'ffff'0000ull));
  CHECK_FALSE(s.lookup(f.lib.path, f.lib.build_id, 0));
}

TEST_CASE("the test's own executable") {
  const Module exe = module_of(reinterpret_cast<void*>(&symbols_test::marker));
  Symbolizer s;
  auto sym = s.lookup(exe.path, exe.build_id, link_address(exe, reinterpret_cast<void*>(&symbols_test::marker)) + 1);
  REQUIRE(sym);
  CHECK(sym->function == "symbols_test::marker(int)");
  int line = 0;
  void* ret = symbols_test::call_site(&line);
  sym = s.lookup(exe.path, exe.build_id, link_address(exe, ret) - 1);
  REQUIRE(sym);
  CHECK(sym->function == "symbols_test::call_site(int*)");
  if (vramtrace::symbols::DwarfLines::available()) {
    CHECK(ends_with(sym->file, "tests/reporter/test_symbols.cpp"));
    CHECK(sym->line == static_cast<std::uint32_t>(line));
  }
  INFO(notes_text(s));
  CHECK(notes_of(s).empty());
}

TEST_CASE("a stripped copy: names from .dynsym, the nearest exported one with an offset otherwise") {
  const FixtureFrames f = fixture_frames();
  Symbolizer s;
  for (const auto& e : f.exported) {
    auto sym = s.lookup(kStripped, f.lib.build_id, e.address);
    REQUIRE(sym);
    CHECK(sym->function == e.function);
    CHECK(sym->file.empty());
    CHECK(sym->line == 0);
  }
  // hidden_helper has no exported symbol: it lies past the end of an exported function in .text.
  auto hidden = s.lookup(kStripped, f.lib.build_id, f.hidden.address);
  REQUIRE(hidden);
  CHECK(hidden->function != f.hidden.function);
  CHECK(contains(hidden->function, "+0x"));
  const auto notes = notes_of(s);
  REQUIRE(notes.size() == 1);
  CHECK(notes[0].rfind(kStripped + ": ", 0) == 0);
  CHECK(contains(notes[0], "function names from .dynsym only"));
  CHECK(contains(s.notes()[0], "no line numbers"));
}

TEST_CASE("a stripped copy with .gnu_debuglink: the debug file beside it, or in .debug/") {
  const FixtureFrames f = fixture_frames();
  SECTION("beside it") {
    const std::string dir = temp_dir("debuglink-beside");
    const std::string lib = copy_to(kLinked, dir + "/libvt_symfix.linked.so");
    copy_to(kDebug, dir + "/libvt_symfix.debug");
    Symbolizer s(SymbolizerOptions{{}, {}, true});
    check_full(s, lib, f);
    INFO(notes_text(s));
    CHECK(notes_of(s).empty());
  }
  SECTION("in .debug/") {
    const std::string dir = temp_dir("debuglink-subdir");
    const std::string lib = copy_to(kLinked, dir + "/libvt_symfix.linked.so");
    copy_to(kDebug, dir + "/.debug/libvt_symfix.debug");
    Symbolizer s(SymbolizerOptions{{}, {}, true});
    check_full(s, lib, f);
    CHECK(notes_of(s).empty());
  }
  SECTION("under a debug root, by the module's directory") {
    const std::string dir = temp_dir("debuglink-root");
    const std::string lib = copy_to(kLinked, dir + "/lib/libvt_symfix.linked.so");
    copy_to(kDebug, dir + "/debug" + dir + "/lib/libvt_symfix.debug");
    Symbolizer s(SymbolizerOptions{{}, {dir + "/debug"}, true});
    check_full(s, lib, f);
    CHECK(notes_of(s).empty());
  }
  SECTION("a module with a partial .symtab: the debug file's fuller one names the local function") {
    const std::string dir = temp_dir("debuglink-partial");
    const std::string debug = copy_to(kDebug, dir + "/libvt_symfix.debug");
    const std::string lib = dir + "/libvt_symfix.partial.so";
    run(std::string(VT_OBJCOPY) + " --discard-all --add-gnu-debuglink=" + debug + " " + kLib + " " + lib);
    std::string error;
    const auto partial = vramtrace::symbols::ElfImage::open(lib, error);
    REQUIRE(partial);
    REQUIRE(partial->symbol_table(SHT_SYMTAB));  // kept, without the local symbols
    Symbolizer s(SymbolizerOptions{{}, {}, true});
    check_full(s, lib, f);
    CHECK(notes_of(s).empty());
  }
  SECTION("no debug file there: .dynsym names only") {
    const std::string dir = temp_dir("debuglink-none");
    const std::string lib = copy_to(kLinked, dir + "/libvt_symfix.linked.so");
    Symbolizer s(SymbolizerOptions{{}, {}, true});
    auto hidden = s.lookup(lib, f.lib.build_id, f.hidden.address);
    REQUIRE(hidden);
    CHECK(hidden->function != f.hidden.function);
    CHECK(contains(notes_text(s), ".dynsym only"));
  }
}

TEST_CASE("debug files without a build-id are checked by the debuglink's CRC-32") {
  const FixtureFrames f = fixture_frames();
  const std::string dir = temp_dir("debuglink-crc");
  const std::string debug = dir + "/libvt_symfix.debug";
  const std::string lib = dir + "/libvt_symfix.so";
  run(std::string(VT_OBJCOPY) + " --remove-section .note.gnu.build-id " + kDebug + " " + debug);
  run(std::string(VT_OBJCOPY) + " --strip-all --remove-section .note.gnu.build-id --add-gnu-debuglink=" + debug + " " +
      kLib + " " + lib);
  SECTION("matching CRC: used") {
    Symbolizer s;
    auto hidden = s.lookup(lib, "", f.hidden.address);
    REQUIRE(hidden);
    CHECK(hidden->function == f.hidden.function);
    // The trace has no build-id for it (it has none): used, and said so.
    CHECK(contains(notes_text(s), "the trace has no build-id for it"));
    CHECK_FALSE(contains(notes_text(s), "refused"));
  }
  SECTION("changed since: refused") {
    std::ofstream(debug, std::ios::binary | std::ios::app) << "changed";
    Symbolizer s;
    auto hidden = s.lookup(lib, "", f.hidden.address);
    REQUIRE(hidden);
    CHECK(hidden->function != f.hidden.function);
    const std::string notes = notes_text(s);
    CHECK(contains(notes, debug + ": its CRC-32 does not match the .gnu_debuglink of " + lib));
  }
}

TEST_CASE("a debug file by build-id under a debug root") {
  const FixtureFrames f = fixture_frames();
  const std::string root = temp_dir("build-id-root");
  const std::string& id = f.lib.build_id;
  const std::string by_id = root + "/.build-id/" + id.substr(0, 2) + "/" + id.substr(2) + ".debug";
  SECTION("found: names and lines for a fully stripped module") {
    copy_to(kDebug, by_id);
    Symbolizer s(SymbolizerOptions{{}, {root}, true});
    check_full(s, kStripped, f);
    CHECK(notes_of(s).empty());
  }
  SECTION("the module file is gone: the debug file alone names the frames") {
    copy_to(kDebug, by_id);
    Symbolizer s(SymbolizerOptions{{}, {root}, true});
    check_full(s, "/nonexistent/libvt_symfix.so", f);
    const auto notes = notes_of(s);
    REQUIRE(notes.size() == 1);
    CHECK(contains(notes[0], "symbols from its debug file " + by_id + " (cannot open (No such file or directory))"));
  }
  SECTION("another build's file at that path: refused, with the reason") {
    copy_to(fs::read_symlink("/proc/self/exe").string(), by_id);
    Symbolizer s(SymbolizerOptions{{}, {root}, true});
    auto hidden = s.lookup(kStripped, id, f.hidden.address);
    REQUIRE(hidden);
    CHECK(hidden->function != f.hidden.function);
    const std::string notes = notes_text(s);
    CHECK(contains(notes, "refused " + by_id + ": its build-id "));
    CHECK(contains(notes, " is not the trace's " + id));
  }
}

TEST_CASE("a build-id mismatch: the file's symbols are not used") {
  const FixtureFrames f = fixture_frames();
  const std::string wrong(40, '0');
  Symbolizer s;
  CHECK_FALSE(s.lookup(kLib, wrong, f.exported[0].address));
  CHECK_FALSE(s.lookup(kLib, wrong, f.hidden.address));
  const auto notes = notes_of(s);
  REQUIRE(notes.size() == 1);
  CHECK(notes[0] == kLib + ": not symbolised: its build-id " + f.lib.build_id + " is not the trace's " + wrong);
  SECTION("a search directory with the right build") {
    const std::string elsewhere = temp_dir("search-dir");
    const std::string other = temp_dir("other-build");
    // The recorded path holds another build (this executable, renamed); the right one is elsewhere.
    const std::string recorded = copy_to(fs::read_symlink("/proc/self/exe").string(), other + "/libvt_symfix.so");
    copy_to(kLib, elsewhere + "/libvt_symfix.so");
    Symbolizer found(SymbolizerOptions{{elsewhere}, {}, true});
    check_full(found, recorded, f);
    CHECK(notes_of(found).empty());
  }
}

TEST_CASE("files that cannot be used give a note, never a crash") {
  const FixtureFrames f = fixture_frames();
  const std::string lib_bytes = vramtrace::test::read_file(kLib);
  REQUIRE(lib_bytes.size() > 4096);
  std::mt19937 rng(7);
  std::string garbage(8192, '\0');
  for (char& c : garbage) c = static_cast<char>(rng());
  std::string elf32 = lib_bytes;
  elf32[EI_CLASS] = ELFCLASS32;
  std::string big_endian = lib_bytes;
  big_endian[EI_DATA] = ELFDATA2MSB;
  std::string bad_section = lib_bytes;
  {  // move the last section's contents far past the end of the file
    Elf64_Ehdr eh;
    std::memcpy(&eh, bad_section.data(), sizeof eh);
    Elf64_Shdr sh;
    const std::size_t at = eh.e_shoff + (eh.e_shnum - 1) * sizeof(Elf64_Shdr);
    std::memcpy(&sh, bad_section.data() + at, sizeof sh);
    sh.sh_type = SHT_PROGBITS;
    sh.sh_offset = 1ull << 40;
    sh.sh_size = 16;
    std::memcpy(bad_section.data() + at, &sh, sizeof sh);
  }
  struct Case {
    std::string path;
    std::string why;
  };
  const std::string dir = temp_dir("unusable");
  const std::string fifo = dir + "/fifo.so";
  REQUIRE(mkfifo(fifo.c_str(), 0600) == 0);
  const std::vector<Case> cases = {
      {"/nonexistent/libmissing.so", "cannot open (No such file or directory)"},
      {vramtrace::test::write_file("garbage.so", garbage), "not an ELF file"},
      {vramtrace::test::write_file("empty.so", ""), "not an ELF file (empty)"},
      {vramtrace::test::write_file("header.so", lib_bytes.substr(0, 40)), "not an ELF file (truncated header)"},
      {vramtrace::test::write_file("half.so", lib_bytes.substr(0, lib_bytes.size() / 2)),
       "the section table lies past the end of the file (truncated?)"},
      {vramtrace::test::write_file("elf32.so", elf32), "32-bit ELF is not supported"},
      {vramtrace::test::write_file("msb.so", big_endian), "big-endian ELF is not supported"},
      {vramtrace::test::write_file("section.so", bad_section), "lies past the end of the file (truncated?)"},
      {dir, "not a regular file"},
      {fifo, "not a regular file"},  // and the open does not wait for a writer
  };
  Symbolizer s;
  for (const auto& c : cases) {
    INFO(c.path);
    CHECK_FALSE(s.lookup(c.path, f.lib.build_id, f.exported[0].address));
    CHECK_FALSE(s.lookup(c.path, "", f.exported[0].address));
  }
  const auto notes = notes_of(s);
  REQUIRE(notes.size() == 2 * cases.size());  // one per (path, build-id)
  for (std::size_t i = 0; i < cases.size(); ++i) {
    INFO(notes[2 * i]);
    CHECK(notes[2 * i].rfind(cases[i].path + ": not symbolised: ", 0) == 0);
    CHECK(contains(notes[2 * i], cases[i].why));
  }
}

TEST_CASE("options and build-id forms") {
  const FixtureFrames f = fixture_frames();
  SECTION("lines off: names only, and no note about lines") {
    Symbolizer s(SymbolizerOptions{{}, {}, false});
    auto sym = s.lookup(f.lib.path, f.lib.build_id, f.call.address);
    REQUIRE(sym);
    CHECK(sym->function == f.call.function);
    CHECK(sym->file.empty());
    CHECK(sym->line == 0);
    CHECK(notes_of(s).empty());
  }
  SECTION("uppercase build-id") {
    std::string upper = f.lib.build_id;
    for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    Symbolizer s;
    auto sym = s.lookup(f.lib.path, upper, f.hidden.address);
    REQUIRE(sym);
    CHECK(sym->function == f.hidden.function);
    CHECK(notes_of(s).empty());
  }
  SECTION("no build-id recorded: the file is used, unverified") {
    Symbolizer s;
    auto sym = s.lookup(f.lib.path, "", f.hidden.address);
    REQUIRE(sym);
    CHECK(sym->function == f.hidden.function);
    const auto notes = notes_of(s);
    REQUIRE(notes.size() == 1);
    CHECK(notes[0] == f.lib.path + ": the trace has no build-id for it, so the file was not verified");
  }
  SECTION("a build-id that is not hex") {
    Symbolizer s;
    CHECK_FALSE(s.lookup(f.lib.path, "xyz", f.hidden.address));
    CHECK(notes_text(s) == f.lib.path + ": not symbolised: the trace's build-id 'xyz' is not hex\n");
  }
  SECTION("a module with no path") {
    Symbolizer s;
    CHECK_FALSE(s.lookup("", "", 0x1000));
    CHECK(notes_text(s) == ": not symbolised: no path recorded\n");
  }
}

TEST_CASE("many lookups over several modules agree with single lookups") {
  const FixtureFrames f = fixture_frames();
  const Module exe = module_of(reinterpret_cast<void*>(&symbols_test::marker));
  std::vector<std::pair<std::string, std::uint64_t>> frames;
  for (int i = 0; i < 2000; ++i) {
    frames.emplace_back(kLib, f.call.address);
    frames.emplace_back(kStripped, f.exported[static_cast<std::size_t>(i) % f.exported.size()].address);
    frames.emplace_back(exe.path, link_address(exe, reinterpret_cast<void*>(&symbols_test::marker)) + (i % 8));
  }
  // What a fresh symboliser says about each distinct frame.
  std::vector<std::optional<NativeSymbol>> alone;
  for (std::size_t i = 0; i < 3 * 8; ++i) {
    const auto& [path, addr] = frames[i];
    Symbolizer one;
    alone.push_back(one.lookup(path, path == exe.path ? exe.build_id : f.lib.build_id, addr));
    REQUIRE(alone.back());
  }
  // One symboliser, every frame (modules interleaved, addresses repeated): the same answers.
  Symbolizer many;
  for (std::size_t i = 0; i < frames.size(); ++i) {
    const auto& [path, addr] = frames[i];
    const auto got = many.lookup(path, path == exe.path ? exe.build_id : f.lib.build_id, addr);
    const auto& want = alone[i % alone.size()];
    REQUIRE(got);
    CHECK(got->function == want->function);
    CHECK(got->file == want->file);
    CHECK(got->line == want->line);
  }
}

TEST_CASE("interval index: the innermost interval holding an address") {
  vramtrace::symbols::IntervalIndex index;
  index.add(100, 200, 1);  // outer
  index.add(120, 140, 2);  // nested
  index.add(150, 150, 3);  // empty (a symbol of size 0)
  index.add(190, 260, 4);  // overlaps the end of the outer one
  index.add(300, 310, 5);
  index.build();
  auto find = [&](std::uint64_t a) {
    const auto* iv = index.find(a);
    return iv ? iv->payload : 0u;
  };
  CHECK(find(99) == 0);
  CHECK(find(100) == 1);
  CHECK(find(125) == 2);
  CHECK(find(140) == 1);
  CHECK(find(150) == 1);
  CHECK(find(195) == 4);
  CHECK(find(200) == 4);
  CHECK(find(260) == 0);
  CHECK(find(305) == 5);
  CHECK(find(310) == 0);
  REQUIRE(index.preceding(155));
  CHECK(index.preceding(155)->payload == 3);
  CHECK(index.preceding(99) == nullptr);
}
