// Finding a traced module's ELF file and its separate debug file on this machine, the ways GDB
// and the distributions lay them out (GDB manual, "Debugging Information in Separate Files").
// Never over the network: no debuginfod.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "symbols/elf_image.h"

namespace vramtrace::symbols {

struct SearchPaths {
  /// Extra places for module files, tried after the recorded path: each directory as a root
  /// (dir + recorded absolute path, a copy of the traced machine's tree) and as a folder
  /// (dir + "/" + file name).
  std::vector<std::string> module_dirs;
  /// Roots of separate debug files: <root>/.build-id/<xx>/<rest>.debug, and
  /// <root>/<module's directory>/<debuglink name>; <root>/.build-id/<xx>/<rest> is also tried for
  /// the module file itself (Fedora's link to the installed binary).
  std::vector<std::string> debug_dirs;
};

/// A module's files, each checked against the build-id the trace recorded.
struct ModuleFiles {
  /// The module's own file, or nullptr when none matches (missing, another build, not ELF).
  std::unique_ptr<ElfImage> image;
  /// Its separate debug file, or nullptr.
  std::unique_ptr<ElfImage> debug;
  /// Why the recorded path could not be used, when it could not (one phrase, e.g.
  /// "cannot open (No such file or directory)"); empty when `image` is the file at that path.
  std::string path_problem;
  /// Files that were found but refused ("<path>: <why>"), in the order they were tried; a missing
  /// candidate in a search directory is not listed.
  std::vector<std::string> refused;
};

/// Looks for the files of the module the traced process loaded from `module_path`, whose GNU
/// build-id was `build_id_hex` (lowercase hex; empty: unknown, the file at the recorded path is
/// taken as it is).
///
/// Module file: the recorded path, then each of paths.module_dirs, then the build-id link; the
/// first ELF file whose build-id equals the recorded one wins. Debug file: the build-id path in
/// each debug root (its build-id must match), then the module file's .gnu_debuglink name in the
/// module's directory, its .debug/ subdirectory and under each debug root (a build-id, when both
/// files have one, must match; otherwise the CRC-32 of the debuglink must). Touches only the
/// file system. Thread-safe (no shared state).
ModuleFiles find_module_files(const std::string& module_path, std::string_view build_id_hex, const SearchPaths& paths);

/// Whether `hex` is a plausible build-id: an even number (2 to 128) of hex digits.
bool valid_build_id(std::string_view hex);

}  // namespace vramtrace::symbols
