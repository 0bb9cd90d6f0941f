// Helpers shared by the fuzz targets (tests/fuzz/*.cpp).
//
// A fuzz target checks properties, not only "does not crash": FUZZ_CHECK prints what broke and
// aborts, which libFuzzer (and the replay driver, replay_main.cpp) reports as a finding.
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#define FUZZ_CHECK(cond, ...)                                                              \
  do {                                                                                     \
    if (!(cond)) {                                                                         \
      std::fprintf(stderr, "FUZZ_CHECK failed at %s:%d: %s\n", __FILE__, __LINE__, #cond); \
      std::fprintf(stderr, "  " __VA_ARGS__);                                              \
      std::fprintf(stderr, "\n");                                                          \
      std::abort();                                                                        \
    }                                                                                      \
  } while (0)

namespace vramtrace::fuzz {

inline std::string_view as_text(const std::uint8_t* data, std::size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

}  // namespace vramtrace::fuzz

// --- inputs as files -------------------------------------------------------------------------
// The trace readers open paths. as_file() puts the input into one memory file (memfd) that lives
// for the whole process and returns a path to it ("/proc/self/fd/N"): no disk I/O per input.
#include <sys/mman.h>
#include <unistd.h>

namespace vramtrace::fuzz {

inline std::string as_file(const std::uint8_t* data, std::size_t size) {
  static const int fd = memfd_create("vramtrace-fuzz-input", MFD_CLOEXEC);
  if (fd < 0) {
    std::perror("memfd_create");
    std::abort();
  }
  if (ftruncate(fd, 0) != 0 || (size > 0 && pwrite(fd, data, size, 0) != static_cast<ssize_t>(size))) {
    std::perror("memfd write");
    std::abort();
  }
  return "/proc/self/fd/" + std::to_string(fd);
}

}  // namespace vramtrace::fuzz
