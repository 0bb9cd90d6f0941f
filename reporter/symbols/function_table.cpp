#include "symbols/function_table.h"

#include <cxxabi.h>
#include <elf.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <tuple>

namespace vramtrace::symbols {

namespace {

constexpr std::uint32_t kNoSection = UINT32_MAX;

int binding_rank(unsigned char info) {
  switch (ELF64_ST_BIND(info)) {
    case STB_GLOBAL:
    case STB_GNU_UNIQUE:
      return 0;
    case STB_WEAK:
      return 1;
    default:
      return 2;
  }
}

std::size_t leading_underscores(std::string_view s) {
  const auto n = s.find_first_not_of('_');
  return n == std::string_view::npos ? s.size() : n;
}

struct Candidate {
  std::uint64_t value;
  std::uint64_t size;
  std::string_view name;
  std::uint32_t section;
  int rank;
};

// Which of several symbols at one value names it (the order of FunctionTable's comment).
bool better(const Candidate& a, const Candidate& b) {
  const auto key = [](const Candidate& c) {
    return std::make_tuple(c.size == 0, c.rank, leading_underscores(c.name), c.name.size(), c.name);
  };
  return key(a) < key(b);
}

}  // namespace

std::string demangle(std::string_view name) {
  // Only names that look mangled ("_Z...", with GCC's clone suffixes such as ".cold" after) go
  // to the demangler: it would also "demangle" plain C names that happen to spell a type.
  if (name.size() < 2 || name[0] != '_' || name[1] != 'Z') return std::string(name);
  std::string z(name);
  int status = 0;
  char* out = abi::__cxa_demangle(z.c_str(), nullptr, nullptr, &status);
  if (status != 0 || !out) {
    std::free(out);
    return z;
  }
  std::string result(out);
  std::free(out);
  return result;
}

FunctionTable::FunctionTable(const ElfImage& image, const ElfSection& table) : image_(&image) {
  const auto& sections = image.sections();
  if (table.entsize != 0 && table.entsize != sizeof(Elf64_Sym)) return;
  if (table.link >= sections.size() || sections[table.link].type != SHT_STRTAB) return;
  const ElfSection& strtab = sections[table.link];
  const auto bytes = image.contents(table);
  const std::size_t count = bytes.size() / sizeof(Elf64_Sym);

  // The executable section that holds a symbol's value, found by address rather than by its
  // st_shndx: a tool that removes an allocated section (objcopy --remove-section) renumbers the
  // sections without rewriting .dynsym, so st_shndx may name the wrong one.
  std::vector<std::uint32_t> exec;
  for (std::uint32_t i = 0; i < sections.size(); ++i)
    if ((sections[i].flags & SHF_EXECINSTR) && (sections[i].flags & SHF_ALLOC) && sections[i].size > 0)
      exec.push_back(i);
  std::sort(exec.begin(), exec.end(),
            [&](std::uint32_t a, std::uint32_t b) { return sections[a].addr < sections[b].addr; });
  auto executable_section = [&](std::uint64_t value) {
    auto it = std::upper_bound(exec.begin(), exec.end(), value,
                               [&](std::uint64_t v, std::uint32_t i) { return v < sections[i].addr; });
    if (it == exec.begin() || !sections[*(it - 1)].holds(value)) return kNoSection;
    return *(it - 1);
  };

  std::vector<Candidate> candidates;
  for (std::size_t i = 1; i < count; ++i) {  // entry 0 is the null symbol
    Elf64_Sym sym{};
    std::memcpy(&sym, bytes.data() + i * sizeof(Elf64_Sym), sizeof sym);
    const unsigned type = ELF64_ST_TYPE(sym.st_info);
    if ((type != STT_FUNC && type != STT_GNU_IFUNC) || sym.st_shndx == SHN_UNDEF) continue;
    const std::string_view name = image.string_at(strtab, sym.st_name);
    if (name.empty()) continue;
    candidates.push_back(
        {sym.st_value, sym.st_size, name, executable_section(sym.st_value), binding_rank(sym.st_info)});
  }
  std::sort(candidates.begin(), candidates.end(), [](const Candidate& a, const Candidate& b) {
    return a.value != b.value ? a.value < b.value : better(a, b);
  });

  functions_.reserve(candidates.size());
  index_.reserve(candidates.size());
  for (std::size_t i = 0; i < candidates.size(); ++i) {
    const Candidate& c = candidates[i];
    if (i > 0 && candidates[i - 1].value == c.value) continue;  // an alias of the one kept
    const std::uint64_t end = c.value + c.size < c.value ? UINT64_MAX : c.value + c.size;
    index_.add(c.value, end, static_cast<std::uint32_t>(functions_.size()));
    functions_.push_back({c.name, c.section});
  }
  index_.build();
}

std::optional<FunctionMatch> FunctionTable::find(std::uint64_t link_address) const {
  if (const auto* iv = index_.find(link_address)) return FunctionMatch{iv->payload, link_address - iv->lo, true};
  const auto* iv = index_.preceding(link_address);
  if (!iv) return std::nullopt;
  const Function& f = functions_[iv->payload];
  if (f.section == kNoSection) return std::nullopt;
  const ElfSection& s = image_->sections()[f.section];
  if ((s.flags & SHF_EXECINSTR) == 0 || !s.holds(link_address)) return std::nullopt;
  return FunctionMatch{iv->payload, link_address - iv->lo, false};
}

std::string FunctionTable::name(const FunctionMatch& match) {
  auto it = demangled_.find(match.function);
  if (it == demangled_.end()) it = demangled_.emplace(match.function, demangle(functions_[match.function].name)).first;
  if (match.inside || match.offset == 0) return it->second;
  char offset[24];
  std::snprintf(offset, sizeof offset, "+0x%llx", static_cast<unsigned long long>(match.offset));
  return it->second + offset;
}

}  // namespace vramtrace::symbols
