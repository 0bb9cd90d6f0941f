// Fuzz target: the native symboliser (reporter/symbols) over the bytes of one module file.
//
// The input becomes a memory file that is symbolised as a module, with and without a build-id and
// with and without DWARF lines, at addresses taken from the input's own executable sections and
// function symbols (so that mutations reach the symbol-table and DWARF code) and at a few fixed
// ones.
//
// Properties checked on every input:
//  - no crash and no read outside the file (ASan in the fuzz build);
//  - a symbol returned has a function name or a source line, and a line only with a file;
//  - lookups are stable: the same address gives the same answer twice (the cache);
//  - every note is one non-empty line that starts with the module's path;
//  - with a build-id the input does not have, nothing is named.
#include <elf.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "fuzz_check.h"
#include "symbols/elf_image.h"
#include "symbols/symbolizer.h"

using namespace vramtrace;

namespace {

// Addresses worth asking about: the starts, middles and ends of the input's executable sections and
// its symbols' values, at most 64 of them, plus fixed ones.
std::vector<std::uint64_t> probe_addresses(const std::string& path) {
  std::vector<std::uint64_t> out{0, 1, 0x1000, 0x401000, UINT64_MAX};
  std::string error;
  const auto image = symbols::ElfImage::open(path, error);
  if (!image) return out;
  for (const auto& s : image->sections()) {
    if (out.size() >= 64) break;
    if (s.flags & SHF_EXECINSTR) {
      out.push_back(s.addr);
      out.push_back(s.addr + s.size / 2);
      out.push_back(s.addr + s.size - 1);
    }
  }
  for (const std::uint32_t type : {SHT_SYMTAB, SHT_DYNSYM}) {
    const auto* table = image->symbol_table(type);
    if (!table) continue;
    const auto bytes = image->contents(*table);
    for (std::size_t off = sizeof(Elf64_Sym); off + sizeof(Elf64_Sym) <= bytes.size() && out.size() < 64;
         off += sizeof(Elf64_Sym)) {
      Elf64_Sym sym;
      std::memcpy(&sym, bytes.data() + off, sizeof sym);
      out.push_back(sym.st_value);
      out.push_back(sym.st_value + 1);
    }
  }
  return out;
}

void run(const std::string& path, const std::vector<std::uint64_t>& addresses, const std::string& build_id,
         bool lines) {
  SymbolizerOptions options;
  options.debug_dirs.clear();  // this machine's debug files are not part of the input
  options.lines = lines;
  Symbolizer s(options);
  for (const std::uint64_t a : addresses) {
    const auto first = s.lookup(path, build_id, a);
    const auto again = s.lookup(path, build_id, a);
    FUZZ_CHECK(first.has_value() == again.has_value(), "unstable answer at %#llx", static_cast<unsigned long long>(a));
    if (!first) continue;
    FUZZ_CHECK(!first->function.empty() || first->line > 0, "empty symbol at %#llx",
               static_cast<unsigned long long>(a));
    FUZZ_CHECK(first->line == 0 || !first->file.empty(), "a line without a file");
    FUZZ_CHECK(first->function == again->function && first->file == again->file && first->line == again->line,
               "unstable answer at %#llx", static_cast<unsigned long long>(a));
    FUZZ_CHECK(lines || first->file.empty(), "a file although lines are off");
  }
  for (const auto& note : s.notes()) {
    FUZZ_CHECK(note.rfind(path + ": ", 0) == 0 && note.size() > path.size() + 2, "note '%s'", note.c_str());
    FUZZ_CHECK(note.find('\n') == std::string::npos, "note with a newline '%s'", note.c_str());
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string path = fuzz::as_file(data, size);
  const auto addresses = probe_addresses(path);
  std::string error;
  const auto image = symbols::ElfImage::open(path, error);
  const std::string own_id = image ? image->build_id_hex() : std::string();
  run(path, addresses, own_id, true);
  run(path, addresses, "", false);
  run(path, addresses, std::string(40, 'a'), true);  // another build's id: nothing may be named
  {
    SymbolizerOptions options;
    options.debug_dirs.clear();
    Symbolizer s(options);
    if (own_id != std::string(40, 'a'))
      for (const std::uint64_t a : addresses) FUZZ_CHECK(!s.lookup(path, std::string(40, 'a'), a), "mismatch used");
  }
  return 0;
}
