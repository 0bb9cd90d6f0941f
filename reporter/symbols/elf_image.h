// One ELF file mapped read-only, with every offset and size in it checked before use.
//
// The symboliser reads files it did not make (the traced machine's libraries, whatever sits at a
// recorded path now), so this reader trusts nothing in them: the headers, the section table, each
// section's bytes, each string and note are bounds-checked, and a file that fails a check is
// refused with a one-line reason instead of being read past its end.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace vramtrace::symbols {

/// One section header (Elf64_Shdr), its name resolved. Addresses are link-time virtual addresses.
struct ElfSection {
  std::string_view name;    ///< points into the mapping; empty when the name is out of bounds
  std::uint32_t type = 0;   ///< SHT_*
  std::uint64_t flags = 0;  ///< SHF_*
  std::uint64_t addr = 0;
  std::uint64_t offset = 0;
  std::uint64_t size = 0;
  std::uint32_t link = 0;
  std::uint64_t entsize = 0;
  std::uint64_t addralign = 0;

  bool holds(std::uint64_t address) const { return address >= addr && address - addr < size; }
};

/// A 64-bit little-endian ELF file (x86-64, AArch64), mapped with mmap(PROT_READ).
///
/// open() refuses, with a reason: a missing or unreadable file, one that is not ELF, 32-bit or
/// big-endian ELF, a file type other than an executable or shared library (ET_EXEC, ET_DYN; a
/// separate debug file keeps the type of its program), and a section table or section that lies
/// outside the file (a truncated copy). Everything it returns afterwards lies inside the mapping. The file must not be
/// truncated by someone else while it is mapped (SIGBUS, as for any mapped file). Not thread-safe to create; const
/// methods are safe from several threads.
class ElfImage {
 public:
  /// Maps `path`. Returns nullptr and sets `error` (one line, no path in it) on failure.
  static std::unique_ptr<ElfImage> open(const std::string& path, std::string& error);

  ElfImage(const ElfImage&) = delete;
  ElfImage& operator=(const ElfImage&) = delete;
  ~ElfImage();

  const std::string& path() const { return path_; }
  /// ET_EXEC or ET_DYN.
  std::uint16_t file_type() const { return file_type_; }
  /// The whole file.
  std::span<const std::uint8_t> bytes() const { return {data_, size_}; }

  const std::vector<ElfSection>& sections() const { return sections_; }
  /// The first section named `name`, or nullptr.
  const ElfSection* find_section(std::string_view name) const;
  /// The bytes of a section of this file: empty for SHT_NOBITS (the sections a separate debug
  /// file keeps only as headers). open() checked that the rest lie inside the file.
  std::span<const std::uint8_t> contents(const ElfSection& s) const;

  /// The NT_GNU_BUILD_ID note's bytes in lowercase hex (from SHT_NOTE sections, else from the
  /// PT_NOTE segments); empty when the file has none.
  const std::string& build_id_hex() const { return build_id_hex_; }

  /// The .gnu_debuglink section: the separate debug file's name (no directory) and the CRC-32 of
  /// its contents. nullopt when absent or malformed (a name with a '/' counts as malformed).
  struct DebugLink {
    std::string name;
    std::uint32_t crc32 = 0;
  };
  const std::optional<DebugLink>& debug_link() const { return debug_link_; }

  /// Whether the file carries a DWARF line table and unit headers (.debug_line and .debug_info,
  /// or their .zdebug_ forms, with contents).
  bool has_dwarf_lines() const;

  /// SHT_SYMTAB or SHT_DYNSYM with contents, or nullptr.
  const ElfSection* symbol_table(std::uint32_t sh_type) const;

  /// The NUL-terminated string at `offset` of string-table section `strtab`, or an empty view when
  /// the offset or the terminator lies outside it.
  std::string_view string_at(const ElfSection& strtab, std::uint64_t offset) const;

 private:
  ElfImage() = default;
  bool parse(std::string& error);
  void read_notes();
  void read_debug_link();

  std::string path_;
  const std::uint8_t* data_ = nullptr;
  std::size_t size_ = 0;
  std::uint16_t file_type_ = 0;
  std::vector<ElfSection> sections_;
  std::string build_id_hex_;
  std::optional<DebugLink> debug_link_;
};

/// Lowercase hex of bytes.
std::string to_hex(std::span<const std::uint8_t> bytes);

}  // namespace vramtrace::symbols
