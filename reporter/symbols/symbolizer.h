// Native symbols for the return addresses of a trace's call stacks, in the reporter's process.
//
// The shim records each native frame as a return address and each loaded module once, with its
// path, load bias and GNU build-id; nothing is symbolised in the traced process. Here, a frame's
// link-time address (pc minus the module's load bias) is turned into a function name from the
// module's ELF symbol table (.symtab, else .dynsym, demangled) and, where the module or its
// separate debug file has DWARF, a source file and line. A module file that is missing, of another
// build (build-id), not ELF or without symbols is not used, and notes() says why.
//
// Use: one Symbolizer per report; lookup() every frame (repeated addresses are cached); print
// notes() among the report's notes. docs/design.md, "Native symbols", has the rules and the
// measurements behind them.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace vramtrace {

/// One symbolised frame.
struct NativeSymbol {
  /// Demangled function name; "name+0x1f" when the address lies past the end of the nearest
  /// preceding function symbol (a function without a symbol of its own: only a module's exported
  /// names in .dynsym, an assembly routine). Empty only when DWARF has a line for an address no
  /// symbol covers.
  std::string function;
  /// Source file as the DWARF names it; empty when the module has no line information for it.
  std::string file;
  /// 1-based line in `file` (for an address in inlined code, the line of `function` that the code
  /// was inlined from); 0 when `file` is empty.
  std::uint32_t line = 0;
};

/// Where to look for files, and how much to read.
struct SymbolizerOptions {
  /// Extra places for module files whose recorded path is missing or holds another build: each
  /// is tried as a root (dir + recorded absolute path: a copy of the traced machine's files) and as
  /// a folder (dir + file name).
  std::vector<std::string> search_dirs;
  /// Roots of separate debug files: <root>/.build-id/xx/rest.debug and <root>/<module dir>/<the
  /// module's .gnu_debuglink name> (besides the module's own directory and its .debug/).
  std::vector<std::string> debug_dirs{"/usr/lib/debug"};
  /// Read source files and lines from DWARF; false: function names only (opens no DWARF).
  bool lines = true;
};

/// Symbolises link-time addresses of modules, caching per module and per address.
///
/// Each module (path and build-id) is looked up on first use: its files are found and checked
/// (symbols/module_files.h), its symbol table is sorted once, its DWARF units listed once; each
/// address is resolved once and then answered from a cache. Files are read with mmap and every
/// offset in them is bounds-checked: a truncated, hostile or non-ELF file gives a note, never a
/// crash. Never touches the network (no debuginfod). Not thread-safe: use one per thread.
class Symbolizer {
 public:
  Symbolizer();
  explicit Symbolizer(SymbolizerOptions options);
  Symbolizer(const Symbolizer&) = delete;
  Symbolizer& operator=(const Symbolizer&) = delete;
  Symbolizer(Symbolizer&&) noexcept;
  Symbolizer& operator=(Symbolizer&&) noexcept;
  ~Symbolizer();

  /// module_path as the traced process saw it, its GNU build-id in lowercase hex (may be empty),
  /// and the link-time virtual address (pc minus the module's load bias; callers subtract 1 from
  /// return addresses first). nullopt when unknown. Not thread-safe.
  ///
  /// A build-id that is not hex is treated as a mismatch (the module is not used). An empty one
  /// means "unknown": the file at the path is used as it is, and a note says it was not verified.
  std::optional<NativeSymbol> lookup(const std::string& module_path, std::string_view build_id_hex,
                                     std::uint64_t link_address);

  /// Why modules could not be used (missing file, build-id mismatch, no symbols, ...), one line
  /// each, for a report's notes: one line per module looked up so far that is unusable or only
  /// partly usable (names from .dynsym only, no line numbers, unverified), in the order the
  /// modules were first looked up. Each line starts with the module's recorded path.
  std::vector<std::string> notes() const;

 private:
  struct Module;
  Module& module(const std::string& module_path, std::string_view build_id_hex);

  // Heterogeneous lookup by path (a string_view), so that a lookup allocates nothing.
  struct PathHash {
    using is_transparent = void;
    std::size_t operator()(std::string_view s) const noexcept { return std::hash<std::string_view>{}(s); }
  };
  SymbolizerOptions options_;
  /// By recorded path; one entry per build-id seen with that path (normally one).
  std::unordered_map<std::string, std::vector<std::unique_ptr<Module>>, PathHash, std::equal_to<>> modules_;
  std::vector<const Module*> order_;  ///< modules in first-lookup order, for notes()
  Module* last_ = nullptr;            ///< the module of the previous lookup (frames come in runs)
};

}  // namespace vramtrace
