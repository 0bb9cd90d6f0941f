// The loaded modules of the process, for the stack records (vramtrace/trace/modules.h).
#include "vramtrace/trace/modules.h"

#include <elf.h>
#include <link.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstring>

namespace vramtrace::trace {

namespace {

std::string executable_path() {
  char buf[4096];
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  return n > 0 ? std::string(buf, static_cast<std::size_t>(n)) : std::string();
}

std::uint64_t loader_changes() noexcept {
  std::uint64_t changes = 0;
  dl_iterate_phdr(
      [](dl_phdr_info* info, std::size_t size, void* out) -> int {
        if (size >= offsetof(dl_phdr_info, dlpi_subs) + sizeof(info->dlpi_subs))
          *static_cast<std::uint64_t*>(out) = info->dlpi_adds + info->dlpi_subs;
        return 1;  // the counters are the same in every entry: the first is enough
      },
      &changes);
  return changes;
}

struct Collect {
  std::vector<ModuleInfo> found;
  std::uint64_t changes = 0;
  bool first = true;
};

int collect(dl_phdr_info* info, std::size_t size, void* arg) {
  auto* c = static_cast<Collect*>(arg);
  if (size >= offsetof(dl_phdr_info, dlpi_subs) + sizeof(info->dlpi_subs))
    c->changes = info->dlpi_adds + info->dlpi_subs;
  ModuleInfo m;
  m.bias = info->dlpi_addr;
  std::uint64_t lo = ~std::uint64_t{0}, hi = 0;
  struct Note {
    const unsigned char* data;
    std::size_t size;
    std::size_t alignment;
  };
  std::vector<Note> notes;
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)& ph = info->dlpi_phdr[i];
    if (ph.p_type == PT_LOAD) {
      lo = std::min<std::uint64_t>(lo, info->dlpi_addr + ph.p_vaddr);
      hi = std::max<std::uint64_t>(hi, info->dlpi_addr + ph.p_vaddr + ph.p_memsz);
    } else if (ph.p_type == PT_NOTE) {
      notes.push_back({reinterpret_cast<const unsigned char*>(info->dlpi_addr + ph.p_vaddr),
                       static_cast<std::size_t>(ph.p_memsz), ph.p_align == 8 ? std::size_t{8} : std::size_t{4}});
    }
  }
  if (hi <= lo) {
    c->first = false;
    return 0;
  }
  m.start = lo;
  m.size = hi - lo;
  const bool unnamed = info->dlpi_name == nullptr || info->dlpi_name[0] == '\0';
  // The executable is the first entry and has no name; a later unnamed entry is not a file.
  m.path = unnamed ? (c->first ? executable_path() : std::string()) : std::string(info->dlpi_name);
  c->first = false;
  // The notes are read where the loader mapped them; each segment with its own alignment.
  for (const Note& n : notes) {
    m.build_id = read_build_id({{n.data, n.size}}, n.alignment);
    if (!m.build_id.empty()) break;
  }
  c->found.push_back(std::move(m));
  return 0;
}

bool same_module(const ModuleInfo& a, const ModuleInfo& b) noexcept {
  return a.start == b.start && a.size == b.size && a.bias == b.bias && a.path == b.path;
}

}  // namespace

std::string read_build_id(const std::vector<std::pair<const unsigned char*, std::size_t>>& notes,
                          std::size_t alignment) {
  static constexpr char kHex[] = "0123456789abcdef";
  const std::size_t a = alignment == 8 ? 8 : 4;
  auto pad = [a](std::size_t n) { return (n + a - 1) & ~(a - 1); };
  for (const auto& [data, size] : notes) {
    std::size_t off = 0;
    while (off + 12 <= size) {
      std::uint32_t namesz, descsz, type;
      std::memcpy(&namesz, data + off, 4);
      std::memcpy(&descsz, data + off + 4, 4);
      std::memcpy(&type, data + off + 8, 4);
      const std::size_t name_at = off + 12;
      const std::size_t desc_at = name_at + pad(namesz);
      if (desc_at > size || descsz > size - desc_at) break;  // a damaged note: stop
      if (type == NT_GNU_BUILD_ID && namesz == 4 && std::memcmp(data + name_at, "GNU", 4) == 0 && descsz > 0) {
        std::string hex;
        hex.reserve(2 * descsz);
        for (std::size_t i = 0; i < descsz; ++i) {
          hex.push_back(kHex[data[desc_at + i] >> 4]);
          hex.push_back(kHex[data[desc_at + i] & 15]);
        }
        return hex;
      }
      off = desc_at + pad(descsz);
    }
  }
  return {};
}

void ModuleMap::read_loader_list() {
  Collect c;
  dl_iterate_phdr(collect, &c);
  loads_seen_ = c.changes;
  std::sort(c.found.begin(), c.found.end(), [](const ModuleInfo& x, const ModuleInfo& y) { return x.start < y.start; });
  // Known modules keep their ids; a module that went away is forgotten (its record was written
  // already, and a pc can no longer lie in it).
  for (ModuleInfo& m : c.found) {
    auto it = std::lower_bound(modules_.begin(), modules_.end(), m.start,
                               [](const ModuleInfo& x, std::uint64_t start) { return x.start < start; });
    if (it != modules_.end() && same_module(*it, m)) m.id = it->id;
  }
  modules_ = std::move(c.found);
}

ModuleInfo* ModuleMap::find(std::uint64_t pc) {
  auto lookup = [&]() -> ModuleInfo* {
    auto it = std::upper_bound(modules_.begin(), modules_.end(), pc,
                               [](std::uint64_t v, const ModuleInfo& m) { return v < m.start; });
    if (it == modules_.begin()) return nullptr;
    --it;
    return pc - it->start < it->size ? &*it : nullptr;
  };
  if (ModuleInfo* m = lookup()) return m;
  if (loader_changes() == loads_seen_) return nullptr;
  read_loader_list();
  return lookup();
}

bool ModuleMap::assign_id(ModuleInfo& m) noexcept {
  if (m.id != 0) return false;
  m.id = next_id_++;
  return true;
}

void ModuleMap::reset_ids() noexcept {
  for (ModuleInfo& m : modules_) m.id = 0;
  next_id_ = 1;
}

}  // namespace vramtrace::trace
