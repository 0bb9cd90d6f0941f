// Streaming line input over plain, gzip and zstd files, with bounded memory.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

namespace vramtrace {

/// Compression of an input, detected from its first bytes.
enum class Compression : std::uint8_t { none, gzip, zstd };
/// "none", "gzip" or "zstd".
const char* compression_name(Compression c) noexcept;

/// Reads a file as a stream of decompressed bytes, detecting gzip (1f 8b, also several
/// concatenated members) or zstd (28 b5 2f fd, also several frames) by magic bytes.
/// Memory: one compressed and one decompression buffer (256 KiB each). Not thread-safe.
class ByteSource {
 public:
  virtual ~ByteSource() = default;
  /// Opens `path` ("-" = standard input). An input that can be read only once (a pipe, a FIFO,
  /// a socket, a terminal, "-") is copied to an unlinked temporary file on its first open, and
  /// every open of the same path in the process reads that copy from the start; a FIFO without
  /// a writer is waited for at most VRAMTRACE_FIFO_WAIT_S seconds (Note [a trace from a pipe] in
  /// byte_source.cpp). Thread-safe. Throws TraceError naming the file on failure (cannot open,
  /// a directory, no writer in time, the temporary copy cannot be written).
  static std::unique_ptr<ByteSource> open(const std::string& path);
  /// Copies up to `n` decompressed bytes into `buf`; returns how many, 0 only at the end of
  /// input. Throws TraceError (file, compressed offset) on a decompression or read error.
  virtual std::size_t read(char* buf, std::size_t n) = 0;
  /// True once the end was reached inside a compressed stream (a cut gzip/zstd file).
  virtual bool truncated() const = 0;
  /// Bytes of (compressed) input consumed so far.
  virtual std::uint64_t bytes_read() const = 0;
  /// Total (compressed) input size in bytes, 0 when unknown (pipes).
  virtual std::uint64_t bytes_total() const = 0;
  virtual Compression compression() const = 0;
  virtual const std::string& path() const = 0;
};

/// After content that does not parse: reads the rest of a compressed `src` and returns the
/// decompression error it meets ("gzip data error at compressed offset N: ..."), or "" when the
/// rest decodes cleanly or `src` is not compressed. A damaged gzip stream can decode to wrong bytes
/// long before its CRC, checked at the member's end, says so; this tells a reader that the
/// content it refused is the damage, not what was written. Reads to the end of the input (time
/// grows with its size); throws nothing but std::bad_alloc. Not thread-safe (as `src`).
std::string damage_after(ByteSource& src);

/// Reads a file line by line, decompressing gzip (1f 8b) or zstd (28 b5 2f fd) by magic bytes.
/// Memory: one decompression buffer plus the longest line. Not thread-safe.
class LineSource {
 public:
  virtual ~LineSource() = default;
  /// Opens `path` ("-" = standard input). Throws TraceError naming the file on failure.
  static std::unique_ptr<LineSource> open(const std::string& path);
  /// Wraps an opened byte source.
  static std::unique_ptr<LineSource> over(std::unique_ptr<ByteSource> bytes);
  /// Longest line accepted, in bytes.
  static constexpr std::size_t kMaxLine = 64u << 20;
  /// Bytes readable after the end of every returned line (for simdjson's padded parsing);
  /// their content is unspecified.
  static constexpr std::size_t kPadding = 64;
  /// Next line without its '\n' (and without a trailing '\r'); the view stays valid until the
  /// next call. False at the end of input. Throws TraceError on a decompression error (with the
  /// line number and compressed offset) or a line longer than 64 MiB.
  virtual bool next_line(std::string_view& line) = 0;
  /// 1-based number of the line last returned.
  virtual std::uint64_t line_number() const = 0;
  /// True if the last line returned had no terminating '\n' (a cut last line), or the
  /// compressed stream ended early.
  virtual bool truncated() const = 0;
  /// True if the compressed stream ended early (a cut gzip/zstd file); known at the end.
  virtual bool stream_truncated() const = 0;
  /// Bytes of (compressed) input consumed so far, for progress lines.
  virtual std::uint64_t bytes_read() const = 0;
  /// Total (compressed) input size in bytes, 0 when unknown (pipes).
  virtual std::uint64_t bytes_total() const = 0;
  virtual const std::string& path() const = 0;
  virtual Compression compression() const = 0;
  /// damage_after() of the underlying bytes: after a line that does not parse, the
  /// decompression error in the rest of the input, or "". Reads to the end of the input.
  virtual std::string damage() = 0;
};

}  // namespace vramtrace
