// Streaming line input over plain, gzip and zstd files, with bounded memory.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

namespace vramtrace {

/// Reads a file line by line, decompressing gzip (1f 8b) or zstd (28 b5 2f fd) by magic bytes.
/// Memory: one decompression buffer plus the longest line. Not thread-safe.
class LineSource {
 public:
  virtual ~LineSource() = default;
  /// Opens `path` ("-" = standard input). Throws TraceError naming the file on failure.
  static std::unique_ptr<LineSource> open(const std::string& path);
  /// Next line without its '\n' (and without a trailing '\r'); the view stays valid until the
  /// next call. False at the end of input. Throws TraceError on a decompression error (with the
  /// line number and compressed offset) or a line longer than 64 MiB.
  virtual bool next_line(std::string_view& line) = 0;
  /// 1-based number of the line last returned.
  virtual std::uint64_t line_number() const = 0;
  /// True if the last line returned had no terminating '\n' (a cut last line), or the
  /// compressed stream ended early.
  virtual bool truncated() const = 0;
  /// Bytes of (compressed) input consumed so far, for progress lines.
  virtual std::uint64_t bytes_read() const = 0;
  /// Total (compressed) input size in bytes, 0 when unknown (pipes).
  virtual std::uint64_t bytes_total() const = 0;
  virtual const std::string& path() const = 0;
};

}  // namespace vramtrace
