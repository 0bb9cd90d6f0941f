// The functions of one ELF symbol table, sorted once and found by link-time address.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "symbols/elf_image.h"
#include "symbols/interval_index.h"

namespace vramtrace::symbols {

/// What the symbol table says about one address.
struct FunctionMatch {
  std::uint32_t function = 0;  ///< index for FunctionTable::name()
  std::uint64_t offset = 0;    ///< address minus the symbol's value, bytes
  /// true: the address lies in [value, value + size) of the symbol. false: it lies past the end
  /// of the nearest preceding function symbol, in the same executable section (a function
  /// without a symbol of its own, an assembly routine with size 0).
  bool inside = false;
};

/// STT_FUNC and STT_GNU_IFUNC symbols of one SHT_SYMTAB or SHT_DYNSYM section.
///
/// Rule: the symbol whose [value, value + size) holds the address (the innermost, should symbols
/// nest); else the nearest preceding function symbol, with an offset, but only when the address
/// lies in the same executable section (SHF_EXECINSTR, found by address) as the symbol's value,
/// so that an address in the PLT or past the end of .text is not given the last function's name. When
/// several symbols share a value (aliases such as malloc and __libc_malloc), one is kept: a sized
/// one, then global before weak before local, then the fewest leading underscores, then the
/// shorter name, then the first in byte order. Entries with an out-of-bounds name, an undefined
/// section or a wrong entry size are skipped, never read past.
///
/// The table keeps views into the image's mapping: the image must outlive it. Not thread-safe
/// (name() caches demangled names).
class FunctionTable {
 public:
  FunctionTable() = default;
  /// Reads section `table` of `image` (an SHT_SYMTAB or SHT_DYNSYM section of it).
  FunctionTable(const ElfImage& image, const ElfSection& table);

  /// Number of function symbols kept.
  std::size_t size() const { return functions_.size(); }
  bool empty() const { return functions_.empty(); }

  std::optional<FunctionMatch> find(std::uint64_t link_address) const;

  /// The symbol's name demangled (abi::__cxa_demangle; the name as stored when it is not a
  /// mangled C++ name), followed by "+0x<offset>" when the match is not inside the symbol.
  std::string name(const FunctionMatch& match);

  /// The stored (mangled) name of function `index`.
  std::string_view mangled_name(std::uint32_t index) const { return functions_[index].name; }

 private:
  struct Function {
    std::string_view name;
    std::uint32_t section = 0;  ///< the executable section holding the symbol's value, or UINT32_MAX
  };
  const ElfImage* image_ = nullptr;
  std::vector<Function> functions_;
  IntervalIndex index_;
  std::unordered_map<std::uint32_t, std::string> demangled_;
};

/// abi::__cxa_demangle of `name`, or `name` itself when it is not a mangled C++ name.
std::string demangle(std::string_view name);

}  // namespace vramtrace::symbols
