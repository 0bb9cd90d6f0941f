// Helpers for the reporter tests: temporary files, gzip/zstd compression in memory.
#pragma once

#include <unistd.h>
#include <zlib.h>
#include <zstd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>

namespace vramtrace::test {

/// A fresh path in a per-process temporary directory.
inline std::string temp_path(const std::string& name) {
  static std::atomic<int> counter{0};
  auto dir = std::filesystem::temp_directory_path() / ("vramtrace-test-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  return (dir / (std::to_string(counter++) + "-" + name)).string();
}

inline std::string write_file(const std::string& name, const std::string& bytes) {
  std::string path = temp_path(name);
  std::ofstream f(path, std::ios::binary);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  return path;
}

inline std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

inline std::string gzip(const std::string& in) {
  z_stream zs{};
  if (deflateInit2(&zs, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK)
    throw std::runtime_error("deflateInit2");
  std::string out(deflateBound(&zs, in.size()) + 64, '\0');
  zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
  zs.avail_in = static_cast<uInt>(in.size());
  zs.next_out = reinterpret_cast<Bytef*>(out.data());
  zs.avail_out = static_cast<uInt>(out.size());
  if (deflate(&zs, Z_FINISH) != Z_STREAM_END) throw std::runtime_error("deflate");
  out.resize(zs.total_out);
  deflateEnd(&zs);
  return out;
}

inline std::string zstd(const std::string& in) {
  std::string out(ZSTD_compressBound(in.size()), '\0');
  std::size_t n = ZSTD_compress(out.data(), out.size(), in.data(), in.size(), 3);
  if (ZSTD_isError(n)) throw std::runtime_error("ZSTD_compress");
  out.resize(n);
  return out;
}

inline std::string data_path(const std::string& rel) { return std::string(VRAMTRACE_TEST_DATA_DIR) + "/" + rel; }

}  // namespace vramtrace::test
