// Replays files through a fuzz target without libFuzzer, so that the committed corpus and every
// past finding (tests/fuzz/regressions/<target>/) run in every build, gcc and sanitizer builds
// included (ctest "fuzz-regressions: <target>").
//
// Usage: fuzz_replay_<target> PATH...   (files, or directories whose files are all replayed)
// Exit code 0 when every input ran; a finding aborts (FUZZ_CHECK) or trips a sanitizer; 2 when a
// path cannot be read or no input was found.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size);

namespace fs = std::filesystem;

#ifdef VRAMTRACE_FUZZ_LEAKS_OK
// Targets that unpickle: reference cycles made through the pickle memo are not freed (documented
// in reporter/readers/pickle.h, bounded by the input's size); LeakSanitizer would report them.
extern "C" const char* __lsan_default_options() { return "detect_leaks=0"; }
#endif

int main(int argc, char** argv) {
  std::vector<fs::path> files;
  for (int i = 1; i < argc; ++i) {
    const fs::path p(argv[i]);
    std::error_code ec;
    if (fs::is_directory(p, ec)) {
      for (const auto& entry : fs::recursive_directory_iterator(p))
        if (entry.is_regular_file() && entry.path().filename().string()[0] != '.') files.push_back(entry.path());
    } else if (fs::is_regular_file(p, ec)) {
      files.push_back(p);
    } else {
      std::fprintf(stderr, "fuzz replay: cannot read '%s'\n", argv[i]);
      return 2;
    }
  }
  if (files.empty()) {
    std::fprintf(stderr, "fuzz replay: no input files\n");
    return 2;
  }
  std::sort(files.begin(), files.end());
  for (const auto& f : files) {
    std::ifstream in(f, std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (!in.good() && !in.eof()) {
      std::fprintf(stderr, "fuzz replay: cannot read '%s'\n", f.c_str());
      return 2;
    }
    std::fprintf(stderr, "fuzz replay: %s (%zu bytes)\n", f.c_str(), bytes.size());
    // A copy in its own heap block, so that ASan sees reads past the end.
    std::vector<std::uint8_t> buf(bytes.begin(), bytes.end());
    LLVMFuzzerTestOneInput(buf.data(), buf.size());
  }
  std::printf("fuzz replay: %zu inputs ran\n", files.size());
  return 0;
}
