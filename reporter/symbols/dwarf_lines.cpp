// DwarfLines over elfutils' libdw (built when CMake found a static libdw; else
// dwarf_lines_absent.cpp).
#include <dwarf.h>
#include <elfutils/libdw.h>
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string_view>
#include <vector>

#include "symbols/dwarf_lines.h"
#include "symbols/interval_index.h"

namespace vramtrace::symbols {

namespace {

// Ranges that start at 0 (or at the -1 and -2 tombstones of newer linkers) are code the linker
// dropped (--gc-sections, COMDAT folding); they would shadow the real owner of low addresses.
bool live_range(Dwarf_Addr lo, Dwarf_Addr hi) { return lo < hi && lo != 0 && lo < UINT64_MAX - 1; }

const char* dwarf_error() {
  const char* msg = dwarf_errmsg(-1);
  return msg && *msg ? msg : "unknown error";
}

// One inlined call directly inside an out-of-line function: where in that function it was made.
struct CallSite {
  Dwarf_Word file = 0;
  std::uint32_t line = 0;
};

struct Unit {
  Dwarf_Die die{};
  bool indexed = false;
  IntervalIndex calls;  // first-level inlined calls, payload: index into call_sites
  std::vector<CallSite> call_sites;
};

}  // namespace

struct DwarfLines::Impl {
  int fd = -1;
  Dwarf* dwarf = nullptr;
  std::vector<Unit> units;
  IntervalIndex unit_ranges;  // payload: index into units

  ~Impl() {
    if (dwarf) dwarf_end(dwarf);
    if (fd >= 0) ::close(fd);
  }

  // Records every DW_TAG_inlined_subroutine of the unit that is not itself inside another one,
  // with its ranges and call site: one walk of the unit's DIEs, at its first lookup. The walk only
  // ever moves to a DIE at a higher offset, so a hostile DW_AT_sibling cannot make it loop.
  void index(Unit& u) {
    u.indexed = true;
    struct Step {
      Dwarf_Die die;
      bool in_function;
    };
    std::vector<Step> todo;
    Dwarf_Die child;
    if (dwarf_child(&u.die, &child) == 0) todo.push_back({child, false});
    while (!todo.empty()) {
      Step step = todo.back();
      todo.pop_back();
      const Dwarf_Off here = dwarf_dieoffset(&step.die);
      Dwarf_Die next;
      if (dwarf_siblingof(&step.die, &next) == 0 && dwarf_dieoffset(&next) > here)
        todo.push_back({next, step.in_function});
      const int tag = dwarf_tag(&step.die);
      if (tag == DW_TAG_inlined_subroutine && step.in_function) {
        add_call(u, step.die);
        continue;  // calls inlined into the inlined code belong to it, not to the function
      }
      if (!may_hold_code(tag, step.die)) continue;
      const bool in_function = step.in_function || tag == DW_TAG_subprogram;
      if (dwarf_haschildren(&step.die) > 0 && dwarf_child(&step.die, &child) == 0 && dwarf_dieoffset(&child) > here)
        todo.push_back({child, in_function});
    }
    u.calls.build();
  }

  // Whether the children of a DIE can hold code with addresses: namespaces and modules hold
  // functions, functions with code and their lexical blocks hold inlined calls. Types, variables
  // and the abstract (code-less) functions of inline definitions do not; skipping them is most of
  // a C++ unit's DIEs.
  static bool may_hold_code(int tag, Dwarf_Die& die) {
    switch (tag) {
      case DW_TAG_namespace:
      case DW_TAG_module:
        return true;
      case DW_TAG_subprogram:
      case DW_TAG_lexical_block:
        return dwarf_hasattr(&die, DW_AT_low_pc) || dwarf_hasattr(&die, DW_AT_ranges);
      default:
        return false;
    }
  }

  static void add_call(Unit& u, Dwarf_Die& die) {
    CallSite site;
    Dwarf_Attribute attr;
    Dwarf_Word v = 0;
    if (dwarf_formudata(dwarf_attr(&die, DW_AT_call_file, &attr), &v) == 0) site.file = v;
    if (dwarf_formudata(dwarf_attr(&die, DW_AT_call_line, &attr), &v) == 0 && v <= UINT32_MAX)
      site.line = static_cast<std::uint32_t>(v);
    if (site.line == 0) return;  // no call site: the line table's row is all there is
    const auto id = static_cast<std::uint32_t>(u.call_sites.size());
    Dwarf_Addr base = 0, lo = 0, hi = 0;
    ptrdiff_t off = 0;
    bool any = false;
    while ((off = dwarf_ranges(&die, off, &base, &lo, &hi)) > 0) {
      if (!live_range(lo, hi)) continue;
      u.calls.add(lo, hi, id);
      any = true;
    }
    if (any) u.call_sites.push_back(site);
  }

  // The name of file `index` of the unit's line table, as dwarf_decl_file resolves DW_AT_decl_file.
  static std::string file_name(Unit& u, Dwarf_Word index) {
    Dwarf_Files* files = nullptr;
    size_t count = 0;
    if (dwarf_getsrcfiles(&u.die, &files, &count) != 0 || index >= count) return {};
    const char* name = dwarf_filesrc(files, index, nullptr, nullptr);
    // libdw puts "???" in the slot DWARF 4 leaves unused (file 0).
    if (!name || std::string_view(name) == "???") return {};
    return name;
  }
};

DwarfLines::DwarfLines(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
DwarfLines::~DwarfLines() = default;

bool DwarfLines::available() { return true; }

std::unique_ptr<DwarfLines> DwarfLines::open(const std::string& path, std::string& why) {
  auto impl = std::make_unique<Impl>();
  impl->fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (impl->fd < 0) {
    why = std::string("cannot open (") + std::strerror(errno) + ")";
    return nullptr;
  }
  impl->dwarf = dwarf_begin(impl->fd, DWARF_C_READ);
  if (!impl->dwarf) {
    why = std::string("its DWARF cannot be read (") + dwarf_error() + ")";
    return nullptr;
  }
  Dwarf_CU* cu = nullptr;
  Dwarf_CU* next = nullptr;
  Dwarf_Half version = 0;
  std::uint8_t unit_type = 0;
  Dwarf_Die cudie;
  while (dwarf_get_units(impl->dwarf, cu, &next, &version, &unit_type, &cudie, nullptr) == 0) {
    cu = next;
    if (unit_type != DW_UT_compile && unit_type != DW_UT_partial && unit_type != DW_UT_skeleton) continue;
    const auto id = static_cast<std::uint32_t>(impl->units.size());
    Dwarf_Addr base = 0, lo = 0, hi = 0;
    ptrdiff_t off = 0;
    bool any = false;
    while ((off = dwarf_ranges(&cudie, off, &base, &lo, &hi)) > 0) {
      if (!live_range(lo, hi)) continue;
      impl->unit_ranges.add(lo, hi, id);
      any = true;
    }
    if (any) impl->units.push_back(Unit{cudie, false, {}, {}});
  }
  if (impl->units.empty()) {
    why = "no DWARF unit in it has an address range";
    return nullptr;
  }
  impl->unit_ranges.build();
  return std::unique_ptr<DwarfLines>(new DwarfLines(std::move(impl)));
}

std::optional<SourceLine> DwarfLines::find(std::uint64_t link_address) {
  const auto* range = impl_->unit_ranges.find(link_address);
  if (!range) return std::nullopt;
  Unit& u = impl_->units[range->payload];
  if (!u.indexed) impl_->index(u);
  if (const auto* call = u.calls.find(link_address)) {
    const CallSite& site = u.call_sites[call->payload];
    std::string file = Impl::file_name(u, site.file);
    if (!file.empty()) return SourceLine{std::move(file), site.line};
  }
  Dwarf_Line* row = dwarf_getsrc_die(&u.die, link_address);
  if (!row) return std::nullopt;
  int line = 0;
  const char* file = dwarf_linesrc(row, nullptr, nullptr);
  if (dwarf_lineno(row, &line) != 0 || line <= 0 || !file || !*file) return std::nullopt;
  return SourceLine{file, static_cast<std::uint32_t>(line)};
}

}  // namespace vramtrace::symbols
