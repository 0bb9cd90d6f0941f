// Source file and line of a link-time address, from the DWARF of one ELF file (elfutils' libdw).
//
// Why libdw (docs/design.md, "Native symbols"): it reads every DWARF version and compressed
// sections, adds about 220 KB to the command and nothing to its build time, and was the fastest
// of the options measured; the line-table parser is not ours to write.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

namespace vramtrace::symbols {

struct SourceLine {
  std::string file;        ///< as the DWARF names it, joined with its directory (absolute when the DWARF is)
  std::uint32_t line = 0;  ///< 1-based
};

/// The DWARF line information of one file (the module itself or its separate debug file).
///
/// Note [the line of the named function]: the symboliser names the function from the ELF symbol
/// table, which knows only the out-of-line function F holding the address. When the address lies
/// in code inlined into F (a vector's push_back inlined into the caller), the line table gives the
/// inlined callee's line, in another file; F with that line would be a pair that does not exist.
/// So for an address inside an inlined call, find() returns the line in F that the call was
/// inlined from (DW_AT_call_file and DW_AT_call_line of the outermost DW_TAG_inlined_subroutine),
/// and the line table's line only for F's own code. Function and line then always name the same
/// frame, the one the symbol table found.
///
/// Cost: open() reads the unit headers (and inflates compressed sections); each unit's line table
/// and inlined calls are read once, at the first address in it. Not thread-safe.
class DwarfLines {
 public:
  /// Opens `path`. nullptr and `why` (one line) when libdw cannot read its DWARF or no unit in it
  /// has an address range.
  static std::unique_ptr<DwarfLines> open(const std::string& path, std::string& why);

  DwarfLines(const DwarfLines&) = delete;
  DwarfLines& operator=(const DwarfLines&) = delete;
  ~DwarfLines();

  /// The source line of `link_address` (Note [the line of the named function]), or nullopt when no
  /// unit covers it or its line table has no row for it.
  std::optional<SourceLine> find(std::uint64_t link_address);

  /// false when this build has no DWARF reader (configured without libdw): open() always fails.
  static bool available();

 private:
  struct Impl;
  explicit DwarfLines(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace vramtrace::symbols
