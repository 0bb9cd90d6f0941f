#include "symbols/symbolizer.h"

#include <elf.h>

#include "symbols/dwarf_lines.h"
#include "symbols/function_table.h"
#include "symbols/module_files.h"

namespace vramtrace {

using symbols::DwarfLines;
using symbols::ElfImage;
using symbols::ElfSection;
using symbols::FunctionTable;

struct Symbolizer::Module {
  std::string path;
  std::string build_id_given;  ///< as lookup() got it, for the quick same-module check
  symbols::ModuleFiles files;
  FunctionTable functions;
  std::unique_ptr<DwarfLines> lines;
  bool usable = false;
  std::string note;  ///< empty when the module is fully usable
  std::unordered_map<std::uint64_t, std::optional<NativeSymbol>> cache;
};

namespace {

std::string lowercase(std::string_view s) {
  std::string out(s);
  for (char& c : out)
    if (c >= 'A' && c <= 'F') c = static_cast<char>(c - 'A' + 'a');
  return out;
}

std::string joined(const std::vector<std::string>& parts) {
  std::string out;
  for (const auto& p : parts) {
    if (!out.empty()) out += "; ";
    out += p;
  }
  return out;
}

}  // namespace

Symbolizer::Symbolizer() : Symbolizer(SymbolizerOptions{}) {}
Symbolizer::Symbolizer(SymbolizerOptions options) : options_(std::move(options)) {}
Symbolizer::Symbolizer(Symbolizer&&) noexcept = default;
Symbolizer& Symbolizer::operator=(Symbolizer&&) noexcept = default;
Symbolizer::~Symbolizer() = default;

Symbolizer::Module& Symbolizer::module(const std::string& module_path, std::string_view build_id_hex) {
  if (last_ && last_->path == module_path && last_->build_id_given == build_id_hex) return *last_;
  auto it = modules_.find(std::string_view(module_path));
  if (it == modules_.end()) it = modules_.try_emplace(module_path).first;
  for (const auto& known : it->second)
    if (known->build_id_given == build_id_hex) return *(last_ = known.get());

  Module& m = *it->second.emplace_back(std::make_unique<Module>());
  last_ = &m;
  order_.push_back(&m);
  m.path = module_path;
  m.build_id_given = std::string(build_id_hex);
  const std::string build_id = lowercase(build_id_hex);
  if (!build_id.empty() && !symbols::valid_build_id(build_id)) {
    m.note = module_path + ": not symbolised: the trace's build-id '" + std::string(build_id_hex) + "' is not hex";
    return m;
  }

  m.files = symbols::find_module_files(module_path, build_id, {options_.search_dirs, options_.debug_dirs});
  const ElfImage* image = m.files.image.get();
  const ElfImage* debug = m.files.debug.get();
  // Function names: .symtab of the module or of its debug file (the one with more functions,
  // should both have one: a partly stripped module keeps fewer), else the module's .dynsym.
  bool dynsym_only = false;
  for (const ElfImage* file : {image, debug}) {
    const ElfSection* table = file ? file->symbol_table(SHT_SYMTAB) : nullptr;
    if (!table) continue;
    FunctionTable functions(*file, *table);
    if (functions.size() > m.functions.size()) m.functions = std::move(functions);
  }
  if (m.functions.empty() && image && image->symbol_table(SHT_DYNSYM)) {
    m.functions = FunctionTable(*image, *image->symbol_table(SHT_DYNSYM));
    dynsym_only = !m.functions.empty();
  }

  std::vector<std::string> facts;
  if (!image && !debug) {
    facts.push_back(m.files.path_problem.empty() ? "no file found" : m.files.path_problem);
  } else if (m.functions.empty()) {
    facts.push_back(std::string("no function symbols (no .symtab or .dynsym") + (debug ? "" : ", and no debug file") +
                    ")");
  } else {
    m.usable = true;
    if (!image) facts.push_back("symbols from its debug file " + debug->path() + " (" + m.files.path_problem + ")");
    if (dynsym_only)
      facts.push_back(
          "function names from .dynsym only (no .symtab, no debug file): code without an exported name is named after "
          "the nearest exported function, with an offset");
    if (options_.lines) {
      const ElfImage* dwarf =
          image && image->has_dwarf_lines() ? image : (debug && debug->has_dwarf_lines() ? debug : nullptr);
      std::string why;
      if (!DwarfLines::available())
        DwarfLines::open({}, why);
      else if (!dwarf)
        why = std::string("no DWARF line table in it") + (debug ? " or in its debug file" : " and no debug file");
      else
        m.lines = DwarfLines::open(dwarf->path(), why);
      if (!m.lines) facts.push_back("no line numbers: " + why);
    }
    if (build_id.empty()) facts.push_back("the trace has no build-id for it, so the file was not verified");
  }
  if (!facts.empty() && !m.files.refused.empty()) facts.push_back("refused " + joined(m.files.refused));
  if (!facts.empty()) m.note = module_path + ": " + (m.usable ? "" : "not symbolised: ") + joined(facts);
  return m;
}

std::optional<NativeSymbol> Symbolizer::lookup(const std::string& module_path, std::string_view build_id_hex,
                                               std::uint64_t link_address) {
  Module& m = module(module_path, build_id_hex);
  if (!m.usable) return std::nullopt;
  auto [it, inserted] = m.cache.try_emplace(link_address);
  if (!inserted) return it->second;
  const auto match = m.functions.find(link_address);
  const auto source = m.lines ? m.lines->find(link_address) : std::nullopt;
  if (match || source) {
    NativeSymbol s;
    if (match) s.function = m.functions.name(*match);
    if (source) {
      s.file = source->file;
      s.line = source->line;
    }
    it->second = std::move(s);
  }
  return it->second;
}

std::vector<std::string> Symbolizer::notes() const {
  std::vector<std::string> out;
  for (const Module* m : order_)
    if (!m->note.empty()) out.push_back(m->note);
  return out;
}

}  // namespace vramtrace
