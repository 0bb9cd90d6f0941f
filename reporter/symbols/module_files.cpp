#include "symbols/module_files.h"

#include <sys/stat.h>
#include <zlib.h>

#include <cerrno>
#include <cstdlib>

namespace vramtrace::symbols {

namespace {

bool exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 || errno != ENOENT;
}

// `whose`: where the expected build-id comes from ("the trace's", "the module's").
std::string mismatch(const ElfImage& file, std::string_view expected, std::string_view whose) {
  const std::string& has = file.build_id_hex();
  return (has.empty() ? std::string("it has no build-id") : "its build-id " + has) + " is not " + std::string(whose) +
         " " + std::string(expected);
}

// CRC-32 of the whole file, the checksum .gnu_debuglink carries (binutils'
// bfd_calc_gnu_debuglink_crc32 is zlib's crc32).
std::uint32_t file_crc32(const ElfImage& file) {
  auto bytes = file.bytes();
  uLong crc = crc32(0L, Z_NULL, 0);
  while (!bytes.empty()) {
    const std::size_t n = std::min<std::size_t>(bytes.size(), 1u << 30);
    crc = crc32(crc, bytes.data(), static_cast<uInt>(n));
    bytes = bytes.subspan(n);
  }
  return static_cast<std::uint32_t>(crc);
}

std::string parent_dir(const std::string& path) {
  const auto slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

std::string base_name(const std::string& path) {
  const auto slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

std::string join(const std::string& dir, const std::string& rest) {
  if (dir.empty()) return rest;
  if (dir.back() == '/' || (!rest.empty() && rest.front() == '/')) return dir + rest;
  return dir + "/" + rest;
}

void add_unique(std::vector<std::string>& list, std::string item) {
  for (const auto& s : list)
    if (s == item) return;
  list.push_back(std::move(item));
}

}  // namespace

bool valid_build_id(std::string_view hex) {
  if (hex.size() < 2 || hex.size() > 128 || hex.size() % 2 != 0) return false;
  for (const char c : hex)
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  return true;
}

ModuleFiles find_module_files(const std::string& module_path, std::string_view build_id_hex, const SearchPaths& paths) {
  ModuleFiles out;
  const std::string build_id = valid_build_id(build_id_hex) ? std::string(build_id_hex) : std::string();

  // --- the module file
  std::vector<std::string> candidates;
  if (!module_path.empty()) candidates.push_back(module_path);
  for (const auto& dir : paths.module_dirs) {
    if (!module_path.empty() && module_path.front() == '/') add_unique(candidates, join(dir, module_path));
    if (!module_path.empty()) add_unique(candidates, join(dir, base_name(module_path)));
  }
  if (!build_id.empty())
    for (const auto& root : paths.debug_dirs)
      add_unique(candidates, join(root, ".build-id/" + build_id.substr(0, 2) + "/" + build_id.substr(2)));
  if (module_path.empty()) out.path_problem = "no path recorded";
  for (std::size_t i = 0; i < candidates.size() && !out.image; ++i) {
    const std::string& candidate = candidates[i];
    const bool recorded = i == 0 && candidate == module_path;
    if (!recorded && !exists(candidate)) continue;
    std::string why;
    auto image = ElfImage::open(candidate, why);
    if (image && !build_id.empty() && image->build_id_hex() != build_id) {
      why = mismatch(*image, build_id, "the trace's");
      image.reset();
    }
    if (image) {
      out.image = std::move(image);
    } else if (recorded) {
      out.path_problem = why;
    } else {
      out.refused.push_back(candidate + ": " + why);
    }
  }

  // --- its separate debug file
  const std::string key = !build_id.empty() ? build_id : (out.image ? out.image->build_id_hex() : std::string());
  const std::string_view whose = !build_id.empty() ? "the trace's" : "the module's";
  if (valid_build_id(key)) {
    for (const auto& root : paths.debug_dirs) {
      const std::string candidate = join(root, ".build-id/" + key.substr(0, 2) + "/" + key.substr(2) + ".debug");
      if (!exists(candidate)) continue;
      std::string why;
      auto debug = ElfImage::open(candidate, why);
      if (debug && debug->build_id_hex() != key) {
        why = mismatch(*debug, key, whose);
        debug.reset();
      }
      if (debug) {
        out.debug = std::move(debug);
        return out;
      }
      out.refused.push_back(candidate + ": " + why);
    }
  }
  if (!out.image || !out.image->debug_link()) return out;
  const ElfImage::DebugLink& link = *out.image->debug_link();
  std::vector<std::string> dirs{parent_dir(out.image->path())};
  if (char* real = realpath(out.image->path().c_str(), nullptr)) {
    add_unique(dirs, parent_dir(real));
    std::free(real);
  }
  std::vector<std::string> debug_candidates;
  for (const auto& dir : dirs) {
    add_unique(debug_candidates, join(dir, link.name));
    add_unique(debug_candidates, join(dir, ".debug/" + link.name));
    for (const auto& root : paths.debug_dirs) add_unique(debug_candidates, join(root, join(dir, link.name)));
  }
  for (const auto& candidate : debug_candidates) {
    if (candidate == out.image->path() || !exists(candidate)) continue;
    std::string why;
    auto debug = ElfImage::open(candidate, why);
    if (debug) {
      if (!key.empty() && !debug->build_id_hex().empty()) {
        if (debug->build_id_hex() != key) why = mismatch(*debug, key, whose);
      } else if (file_crc32(*debug) != link.crc32) {
        why = "its CRC-32 does not match the .gnu_debuglink of " + out.image->path();
      }
      if (why.empty()) {
        out.debug = std::move(debug);
        return out;
      }
    }
    out.refused.push_back(candidate + ": " + why);
  }
  return out;
}

}  // namespace vramtrace::symbols
