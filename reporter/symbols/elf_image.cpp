#include "symbols/elf_image.h"

#include <elf.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace vramtrace::symbols {

namespace {

// Reads a T at `offset` of [data, data + size); false when it does not fit. memcpy, because a
// hostile file may put any structure at an unaligned offset.
template <class T>
bool read_at(const std::uint8_t* data, std::size_t size, std::uint64_t offset, T& out) {
  if (offset > size || size - offset < sizeof(T)) return false;
  std::memcpy(&out, data + offset, sizeof(T));
  return true;
}

// [offset, offset + length) lies inside a buffer of `size` bytes (no overflow).
bool fits(std::uint64_t offset, std::uint64_t length, std::uint64_t size) {
  return offset <= size && length <= size - offset;
}

std::uint64_t align_up(std::uint64_t v, std::uint64_t a) { return (v + a - 1) / a * a; }

// The NT_GNU_BUILD_ID descriptor of a run of notes, or empty. `align` is 4 or 8 (the note
// section's alignment: 8-byte aligned notes exist, e.g. NT_GNU_PROPERTY_TYPE_0 on x86-64).
std::span<const std::uint8_t> find_build_id(std::span<const std::uint8_t> notes, std::uint64_t align) {
  std::uint64_t pos = 0;
  while (fits(pos, 12, notes.size())) {
    std::uint32_t namesz = 0, descsz = 0, type = 0;
    std::memcpy(&namesz, notes.data() + pos, 4);
    std::memcpy(&descsz, notes.data() + pos + 4, 4);
    std::memcpy(&type, notes.data() + pos + 8, 4);
    const std::uint64_t name_at = pos + 12;
    const std::uint64_t desc_at = align_up(name_at + namesz, align);
    const std::uint64_t next = align_up(desc_at + descsz, align);
    if (!fits(name_at, namesz, notes.size()) || !fits(desc_at, descsz, notes.size())) return {};
    if (type == NT_GNU_BUILD_ID && namesz == 4 && std::memcmp(notes.data() + name_at, "GNU", 4) == 0 && descsz > 0 &&
        descsz <= 64)
      return notes.subspan(desc_at, descsz);
    if (next <= pos) return {};
    pos = next;
  }
  return {};
}

}  // namespace

std::string to_hex(std::span<const std::uint8_t> bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  out.reserve(bytes.size() * 2);
  for (const std::uint8_t b : bytes) {
    out.push_back(kDigits[b >> 4]);
    out.push_back(kDigits[b & 15]);
  }
  return out;
}

std::unique_ptr<ElfImage> ElfImage::open(const std::string& path, std::string& error) {
  // O_NONBLOCK: a FIFO at a candidate path (a hostile debuglink name) must not block the open;
  // fstat() then refuses it. It changes nothing for a regular file.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    error = std::string("cannot open (") + std::strerror(errno) + ")";
    return nullptr;
  }
  struct stat st {};
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    error = "not a regular file";
    ::close(fd);
    return nullptr;
  }
  if (st.st_size <= 0) {
    error = "not an ELF file (empty)";
    ::close(fd);
    return nullptr;
  }
  const auto size = static_cast<std::size_t>(st.st_size);
  void* map = mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  const int map_errno = errno;
  ::close(fd);
  if (map == MAP_FAILED) {
    error = std::string("cannot map (") + std::strerror(map_errno) + ")";
    return nullptr;
  }
  std::unique_ptr<ElfImage> image(new ElfImage());
  image->path_ = path;
  image->data_ = static_cast<const std::uint8_t*>(map);
  image->size_ = size;
  if (!image->parse(error)) return nullptr;
  return image;
}

ElfImage::~ElfImage() {
  if (data_) munmap(const_cast<std::uint8_t*>(data_), size_);
}

bool ElfImage::parse(std::string& error) {
  Elf64_Ehdr eh{};
  if (size_ < SELFMAG || std::memcmp(data_, ELFMAG, SELFMAG) != 0) {
    error = "not an ELF file";
    return false;
  }
  if (!read_at(data_, size_, 0, eh)) {
    error = "not an ELF file (truncated header)";
    return false;
  }
  if (eh.e_ident[EI_CLASS] != ELFCLASS64) {
    error = "32-bit ELF is not supported";
    return false;
  }
  if (eh.e_ident[EI_DATA] != ELFDATA2LSB) {
    error = "big-endian ELF is not supported";
    return false;
  }
  if (eh.e_type != ET_EXEC && eh.e_type != ET_DYN) {
    error = "ELF type " + std::to_string(eh.e_type) + " is not an executable or a shared library";
    return false;
  }
  file_type_ = eh.e_type;

  // Section headers. e_shnum 0 with a table means the count is in section 0's sh_size, and
  // SHN_XINDEX as e_shstrndx puts the index in its sh_link (gABI, "Sections").
  if (eh.e_shoff != 0) {
    if (eh.e_shentsize != sizeof(Elf64_Shdr)) {
      error = "section header size " + std::to_string(eh.e_shentsize) + " is not " + std::to_string(sizeof(Elf64_Shdr));
      return false;
    }
    Elf64_Shdr first{};
    if (!read_at(data_, size_, eh.e_shoff, first)) {
      error = "the section table lies past the end of the file (truncated?)";
      return false;
    }
    const std::uint64_t count = eh.e_shnum != 0 ? eh.e_shnum : first.sh_size;
    if (count > (size_ - eh.e_shoff) / sizeof(Elf64_Shdr)) {
      error = "the section table lies past the end of the file (truncated?)";
      return false;
    }
    const std::uint64_t strndx = eh.e_shstrndx != SHN_XINDEX ? eh.e_shstrndx : first.sh_link;
    std::vector<Elf64_Shdr> raw(count);
    for (std::uint64_t i = 0; i < count; ++i) read_at(data_, size_, eh.e_shoff + i * sizeof(Elf64_Shdr), raw[i]);
    sections_.resize(count);
    for (std::uint64_t i = 0; i < count; ++i) {
      const Elf64_Shdr& sh = raw[i];
      ElfSection& s = sections_[i];
      s.type = sh.sh_type;
      s.flags = sh.sh_flags;
      s.addr = sh.sh_addr;
      s.offset = sh.sh_offset;
      s.size = sh.sh_size;
      s.link = sh.sh_link;
      s.entsize = sh.sh_entsize;
      s.addralign = sh.sh_addralign;
      if (s.type != SHT_NOBITS && s.type != SHT_NULL && !fits(s.offset, s.size, size_)) {
        error = "section " + std::to_string(i) + " lies past the end of the file (truncated?)";
        sections_.clear();
        return false;
      }
    }
    if (strndx != SHN_UNDEF && strndx < count && sections_[strndx].type == SHT_STRTAB) {
      const ElfSection names = sections_[strndx];
      for (std::uint64_t i = 0; i < count; ++i) sections_[i].name = string_at(names, raw[i].sh_name);
    }
  }
  read_notes();
  read_debug_link();
  return true;
}

void ElfImage::read_notes() {
  for (const ElfSection& s : sections_) {
    if (s.type != SHT_NOTE) continue;
    const auto id = find_build_id(contents(s), s.addralign == 8 ? 8 : 4);
    if (!id.empty()) {
      build_id_hex_ = to_hex(id);
      return;
    }
  }
  // A file without section headers (or without note sections) may still have PT_NOTE segments.
  Elf64_Ehdr eh{};
  read_at(data_, size_, 0, eh);
  if (eh.e_phoff == 0 || eh.e_phentsize != sizeof(Elf64_Phdr)) return;
  std::uint64_t count = eh.e_phnum;
  if (count == PN_XNUM) {  // the real count is in section 0's sh_info (gABI)
    Elf64_Shdr first{};
    count = eh.e_shoff != 0 && read_at(data_, size_, eh.e_shoff, first) ? first.sh_info : 0;
  }
  for (std::uint64_t i = 0; i < count; ++i) {
    Elf64_Phdr ph{};
    if (!read_at(data_, size_, eh.e_phoff + i * sizeof(Elf64_Phdr), ph)) return;
    if (ph.p_type != PT_NOTE || !fits(ph.p_offset, ph.p_filesz, size_)) continue;
    const auto id = find_build_id({data_ + ph.p_offset, ph.p_filesz}, ph.p_align == 8 ? 8 : 4);
    if (!id.empty()) {
      build_id_hex_ = to_hex(id);
      return;
    }
  }
}

void ElfImage::read_debug_link() {
  const ElfSection* s = find_section(".gnu_debuglink");
  if (!s) return;
  const auto bytes = contents(*s);
  if (bytes.empty()) return;  // an empty section's data may be null, which memchr must not see
  const void* nul = std::memchr(bytes.data(), 0, bytes.size());
  if (!nul) return;
  const auto len = static_cast<std::size_t>(static_cast<const std::uint8_t*>(nul) - bytes.data());
  const std::uint64_t crc_at = align_up(len + 1, 4);
  if (len == 0 || !fits(crc_at, 4, bytes.size())) return;
  DebugLink link;
  link.name.assign(reinterpret_cast<const char*>(bytes.data()), len);
  if (link.name.find('/') != std::string::npos || link.name == "." || link.name == "..") return;
  std::memcpy(&link.crc32, bytes.data() + crc_at, 4);
  debug_link_ = std::move(link);
}

const ElfSection* ElfImage::find_section(std::string_view name) const {
  for (const ElfSection& s : sections_)
    if (s.name == name) return &s;
  return nullptr;
}

std::span<const std::uint8_t> ElfImage::contents(const ElfSection& s) const {
  if (s.type == SHT_NOBITS || s.type == SHT_NULL || !fits(s.offset, s.size, size_)) return {};
  return {data_ + s.offset, static_cast<std::size_t>(s.size)};
}

bool ElfImage::has_dwarf_lines() const {
  auto present = [&](std::string_view a, std::string_view b) {
    for (const ElfSection& s : sections_)
      if ((s.name == a || s.name == b) && !contents(s).empty()) return true;
    return false;
  };
  return present(".debug_line", ".zdebug_line") && present(".debug_info", ".zdebug_info");
}

const ElfSection* ElfImage::symbol_table(std::uint32_t sh_type) const {
  for (const ElfSection& s : sections_)
    if (s.type == sh_type && !contents(s).empty()) return &s;
  return nullptr;
}

std::string_view ElfImage::string_at(const ElfSection& strtab, std::uint64_t offset) const {
  const auto bytes = contents(strtab);
  if (offset >= bytes.size()) return {};
  const auto* start = bytes.data() + offset;
  const void* nul = std::memchr(start, 0, bytes.size() - offset);
  if (!nul) return {};
  return {reinterpret_cast<const char*>(start),
          static_cast<std::size_t>(static_cast<const std::uint8_t*>(nul) - start)};
}

}  // namespace vramtrace::symbols
