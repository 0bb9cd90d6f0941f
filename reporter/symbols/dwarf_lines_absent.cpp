// DwarfLines in a build without libdw (CMake found no static libdw): no DWARF reader, so the
// symboliser names functions only and says so in its notes.
#include "symbols/dwarf_lines.h"

namespace vramtrace::symbols {

struct DwarfLines::Impl {};

DwarfLines::DwarfLines(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
DwarfLines::~DwarfLines() = default;

bool DwarfLines::available() { return false; }

std::unique_ptr<DwarfLines> DwarfLines::open(const std::string&, std::string& why) {
  why = "this vramtrace was built without libdw, so it reads no DWARF";
  return nullptr;
}

std::optional<SourceLine> DwarfLines::find(std::uint64_t) { return std::nullopt; }

}  // namespace vramtrace::symbols
