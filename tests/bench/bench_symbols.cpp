// Speed of the native symboliser (reporter/symbols) on real modules. Figures: docs/benchmarks.md.
//
// Usage: bench_symbols [--no-lines] [--count N] [--repeat R] [--show K] [--from FILE] MODULE...
//
// For each module, N link-time addresses drawn (seed 1) uniformly from its executable sections
// (--from: the addresses of FILE instead, one hex number a line, for a single module: the input
// that llvm-symbolizer and addr2line are given in docs/benchmarks.md); then, with one Symbolizer:
//   first   each module's N addresses looked up once, module after module: the cost of opening the
//           module (files found and checked, symbol table sorted, DWARF units listed) plus N
//           first-time lookups (demangling, line tables);
//   cached  R rounds over every module's addresses, interleaved (frame after frame of different
//           modules, as call stacks come), all answered from the cache.
// --show K prints the first K symbols of each module; the notes are printed at the end.
// The build-id passed is the file's own (read with the symboliser's ELF reader), as the shim
// records it.
#include <elf.h>
#include <sys/resource.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "symbols/elf_image.h"
#include "symbols/symbolizer.h"

using vramtrace::Symbolizer;
using vramtrace::SymbolizerOptions;
using vramtrace::symbols::ElfImage;

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// User + system CPU seconds of this process so far: on a shared machine the honest figure.
double cpu_seconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) + (u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

struct Module {
  std::string path;
  std::string build_id;
  std::vector<std::uint64_t> addresses;
};

}  // namespace

int main(int argc, char** argv) {
  SymbolizerOptions options;
  std::size_t count = 10000, repeat = 10, show = 0;
  std::string from;
  std::vector<Module> modules;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--no-lines") {
      options.lines = false;
    } else if ((a == "--count" || a == "--repeat" || a == "--show") && i + 1 < argc) {
      const std::size_t v = std::strtoull(argv[++i], nullptr, 10);
      (a == "--count" ? count : a == "--repeat" ? repeat : show) = v;
    } else if (a == "--from" && i + 1 < argc) {
      from = argv[++i];
    } else if (!a.empty() && a[0] != '-') {
      modules.push_back({a, {}, {}});
    } else {
      std::fprintf(stderr,
                   "usage: bench_symbols [--no-lines] [--count N] [--repeat R] [--show K] [--from FILE] MODULE...\n");
      return 2;
    }
  }
  if (modules.empty() || (!from.empty() && modules.size() != 1)) {
    std::fprintf(stderr,
                 "usage: bench_symbols [--no-lines] [--count N] [--repeat R] [--show K] [--from FILE] MODULE...\n");
    return 2;
  }

  std::mt19937_64 rng(1);
  for (Module& m : modules) {
    std::string error;
    const auto image = ElfImage::open(m.path, error);
    if (!image) {
      std::fprintf(stderr, "bench_symbols: %s: %s\n", m.path.c_str(), error.c_str());
      return 1;
    }
    m.build_id = image->build_id_hex();
    std::vector<std::pair<std::uint64_t, std::uint64_t>> text;  // executable sections: start, size
    std::uint64_t total = 0;
    for (const auto& s : image->sections())
      if ((s.flags & SHF_EXECINSTR) && s.size > 0) {
        text.emplace_back(s.addr, s.size);
        total += s.size;
      }
    if (!from.empty()) {
      std::ifstream in(from);
      std::string line;
      while (std::getline(in, line))
        if (!line.empty()) m.addresses.push_back(std::strtoull(line.c_str(), nullptr, 16));
      count = m.addresses.size();
      continue;
    }
    if (total == 0) {
      std::fprintf(stderr, "bench_symbols: %s: no executable section\n", m.path.c_str());
      return 1;
    }
    for (std::size_t i = 0; i < count; ++i) {
      std::uint64_t at = rng() % total;
      for (const auto& [start, size] : text) {
        if (at < size) {
          m.addresses.push_back(start + at);
          break;
        }
        at -= size;
      }
    }
  }

  Symbolizer symbolizer(options);
  std::printf("%-50s %10s %10s %10s %10s %10s\n", "module", "addresses", "named", "with line", "wall s", "cpu s");
  std::size_t all_first = 0;
  const auto t_all = std::chrono::steady_clock::now();
  const double cpu_all = cpu_seconds();
  for (const Module& m : modules) {
    std::size_t named = 0, lines = 0;
    const auto t0 = std::chrono::steady_clock::now();
    const double cpu0 = cpu_seconds();
    for (const std::uint64_t a : m.addresses) {
      const auto s = symbolizer.lookup(m.path, m.build_id, a);
      if (s && !s->function.empty()) ++named;
      if (s && s->line) ++lines;
    }
    const double t = seconds_since(t0);
    const double cpu = cpu_seconds() - cpu0;
    all_first += m.addresses.size();
    std::printf("%-50s %10zu %10zu %10zu %10.3f %10.3f\n", m.path.c_str(), m.addresses.size(), named, lines, t, cpu);
    for (std::size_t i = 0; i < show && i < m.addresses.size(); ++i) {
      const auto s = symbolizer.lookup(m.path, m.build_id, m.addresses[i]);
      std::printf("    %#llx  %s", static_cast<unsigned long long>(m.addresses[i]), s ? s->function.c_str() : "?");
      if (s && s->line) std::printf("  (%s:%u)", s->file.c_str(), s->line);
      std::printf("\n");
    }
  }
  std::printf("first lookups: %zu in %.3f s wall, %.3f s cpu\n", all_first, seconds_since(t_all),
              cpu_seconds() - cpu_all);

  std::size_t lookups = 0, found = 0;
  const auto t1 = std::chrono::steady_clock::now();
  const double cpu1 = cpu_seconds();
  for (std::size_t r = 0; r < repeat; ++r)
    for (std::size_t i = 0; i < count; ++i)
      for (const Module& m : modules) {
        found += symbolizer.lookup(m.path, m.build_id, m.addresses[i]).has_value();
        ++lookups;
      }
  const double t = seconds_since(t1);
  const double cpu = cpu_seconds() - cpu1;
  std::printf("cached lookups: %zu in %.3f s wall, %.3f s cpu (%.0f ns cpu each), %zu found\n", lookups, t, cpu,
              cpu * 1e9 / static_cast<double>(lookups), found);
  for (const auto& n : symbolizer.notes()) std::printf("note: %s\n", n.c_str());
  return 0;
}
