// Streaming decompression and line splitting for trace files (see byte_source.h).
#include "vramtrace/trace/byte_source.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>
#include <zstd.h>
#ifdef VRAMTRACE_HAVE_ISAL
#include <isa-l/igzip_lib.h>
#endif

#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "vramtrace/trace/reader.h"

namespace vramtrace {

const char* compression_name(Compression c) noexcept {
  switch (c) {
    case Compression::none:
      return "none";
    case Compression::gzip:
      return "gzip";
    case Compression::zstd:
      return "zstd";
  }
  return "none";
}

namespace {

constexpr std::size_t kChunk = 256 * 1024;

// Note [a trace from a pipe]: the readers open a trace by its path more than once (the format is
// detected from its first bytes, the reader then reads it from the start, and a trace that set
// new peaks too often is read a second time), and a report names the path the user gave. A pipe
// (`zcat t.gz | vramtrace summary /dev/stdin`, or `-`), a FIFO, a socket or a terminal can be
// read only once. So the first open of such a path copies all of it into an unlinked temporary
// file (in $TMPDIR, else /tmp), and every open of that path in this process reads the copy from
// its start, through /proc/self/fd (an offset of its own). Copies are known by the device and
// inode of what was opened, so "-" and /dev/stdin of one pipe are one input, and a copy that
// failed (a full disk) fails again instead of reading what is left. Memory stays bounded; the
// copy costs the disk the trace takes. A character device that is not a terminal (/dev/zero) is
// read as a stream, never copied. A FIFO that no process has opened for writing is waited for:
// after one second a line on standard error says so, and after VRAMTRACE_FIFO_WAIT_S seconds
// (default 60) the open fails with a message, where a plain open(2) would block forever; a writer
// that has opened it is waited for as long as it takes.

// Seconds to wait for a writer on a FIFO (VRAMTRACE_FIFO_WAIT_S, 1 to 86400; default 60).
int fifo_wait_seconds() {
  const char* v = std::getenv("VRAMTRACE_FIFO_WAIT_S");
  if (v == nullptr || *v == '\0') return 60;
  char* end = nullptr;
  const long s = std::strtol(v, &end, 10);
  return end != v && *end == '\0' && s >= 1 && s <= 86400 ? static_cast<int>(s) : 60;
}

// Opens a FIFO by name for reading, waiting for a writer at most fifo_wait_seconds(): the
// blocking open(2) runs on a thread of its own, and when no writer comes in time, this process
// opens the FIFO for writing itself (O_NONBLOCK: the waiting reader makes it succeed) to release
// that open, and fails. Once a writer has opened it, a slow writer is waited for as long as it
// takes, as cat(1) does. An anonymous pipe (/dev/stdin, /dev/fd/N) has its writer: the open
// returns at once. Returns a blocking descriptor. Throws TraceError.
int open_fifo(const std::string& path) {
  std::mutex mu;
  std::condition_variable cv;
  int fd = -1, error = 0;
  bool done = false;
  std::thread opener([&] {
    const int f = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    const int e = errno;
    const std::lock_guard<std::mutex> lock(mu);
    fd = f;
    error = e;
    done = true;
    cv.notify_one();
  });
  const int limit = fifo_wait_seconds();
  std::unique_lock<std::mutex> lock(mu);
  if (!cv.wait_for(lock, std::chrono::seconds(1), [&] { return done; })) {
    std::fprintf(stderr, "vramtrace: %s: waiting for a process to open this FIFO for writing\n", path.c_str());
    cv.wait_for(lock, std::chrono::seconds(limit > 1 ? limit - 1 : 0), [&] { return done; });
  }
  const bool in_time = done;
  lock.unlock();
  int releaser = -1;
  if (!in_time) releaser = ::open(path.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);
  opener.join();
  if (releaser >= 0) ::close(releaser);
  if (!in_time) {
    if (fd >= 0) ::close(fd);
    throw TraceError(
        fmt::format("{}: a FIFO that no process opened for writing in {} s (VRAMTRACE_FIFO_WAIT_S)", path, limit));
  }
  if (fd < 0) throw TraceError(fmt::format("{}: cannot open: {}", path, std::strerror(error)));
  return fd;
}

// Copies `in` to its end into an unlinked temporary file; returns the copy's descriptor. An
// input left non-blocking by whoever passed it is waited on with poll(2). Throws TraceError
// naming `path` (a read error, a full disk).
int spool(int in, const std::string& path) {
  const char* dir = std::getenv("TMPDIR");
  const std::string where = dir != nullptr && *dir != '\0' ? dir : "/tmp";
  std::string tmpl = where + "/vramtrace-input.XXXXXX";
  const int out = ::mkostemp(tmpl.data(), O_CLOEXEC);
  if (out < 0)
    throw TraceError(
        fmt::format("{}: cannot make a temporary copy of the input ({}): {}", path, tmpl, std::strerror(errno)));
  ::unlink(tmpl.c_str());
  std::vector<char> buf(kChunk);
  for (;;) {
    const ssize_t r = ::read(in, buf.data(), buf.size());
    if (r == 0) break;
    if (r < 0 && errno == EINTR) continue;
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      pollfd p{in, POLLIN, 0};
      ::poll(&p, 1, -1);
      continue;
    }
    if (r < 0) {
      const int e = errno;
      ::close(out);
      throw TraceError(fmt::format("{}: read error: {}", path, std::strerror(e)));
    }
    for (ssize_t done = 0; done < r;) {
      const ssize_t w = ::write(out, buf.data() + done, static_cast<std::size_t>(r - done));
      if (w < 0 && errno == EINTR) continue;
      if (w < 0) {
        const int e = errno;
        ::close(out);
        throw TraceError(
            fmt::format("{}: cannot copy the input to a temporary file in {}: {}", path, where, std::strerror(e)));
      }
      done += w;
    }
  }
  return out;
}

// The copies of inputs that can be read only once, by the identity of what was opened (device
// and inode: "-" and /dev/stdin of one pipe are one input), kept open for the life of the process
// (their files are unlinked); and the errors of those that could not be copied, so that a second
// open says the same instead of reading what is left of the pipe.
struct Spools {
  std::mutex mu;
  std::map<std::string, int> copies;
  std::map<std::string, std::string> failures;
};
Spools& spools() {
  static Spools s;
  return s;
}

// A descriptor reading `path` from its start (Note [a trace from a pipe]), and the input's
// size when known. Throws TraceError.
int open_input(const std::string& path, std::uint64_t& total) {
  struct stat st {};
  const bool is_stdin = path == "-";
  const bool known = is_stdin ? ::fstat(0, &st) == 0 : ::stat(path.c_str(), &st) == 0;
  // A regular file (also one redirected to standard input), a block device, a character device
  // that is not a terminal (read as a stream, as before: it may never end, /dev/zero) and a
  // directory are opened directly; only what can be read just once is copied.
  bool tty = false;
  if (known && S_ISCHR(st.st_mode)) {
    if (is_stdin) {
      tty = ::isatty(0) != 0;
    } else {
      const int f = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
      tty = f >= 0 && ::isatty(f) != 0;
      if (f >= 0) ::close(f);
    }
  }
  const bool once = known && (S_ISFIFO(st.st_mode) || S_ISSOCK(st.st_mode) || tty);
  if (!once) {
    const std::string name = is_stdin ? "/proc/self/fd/0" : path;
    const int fd = ::open(name.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) throw TraceError(fmt::format("{}: cannot open: {}", path, std::strerror(errno)));
    if (::fstat(fd, &st) == 0) {
      if (S_ISDIR(st.st_mode)) {
        ::close(fd);
        throw TraceError(fmt::format("{}: is a directory", path));
      }
      if (S_ISREG(st.st_mode)) total = static_cast<std::uint64_t>(st.st_size);
    }
    return fd;
  }
  const std::string key = fmt::format("{}:{}", st.st_dev, st.st_ino);
  Spools& sp = spools();
  const std::lock_guard<std::mutex> lock(sp.mu);
  if (auto f = sp.failures.find(key); f != sp.failures.end()) throw TraceError(f->second);
  auto it = sp.copies.find(key);
  if (it == sp.copies.end()) {
    try {
      int fd = -1;
      if (is_stdin) {
        fd = ::dup(0);
        if (fd < 0) throw TraceError(fmt::format("-: cannot read standard input: {}", std::strerror(errno)));
      } else if (S_ISFIFO(st.st_mode)) {
        fd = open_fifo(path);
      } else {
        fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY);
        if (fd < 0) throw TraceError(fmt::format("{}: cannot open: {}", path, std::strerror(errno)));
      }
      int copy = -1;
      try {
        copy = spool(fd, path);
      } catch (...) {
        ::close(fd);
        throw;
      }
      ::close(fd);
      it = sp.copies.emplace(key, copy).first;
    } catch (const TraceError& e) {
      sp.failures.emplace(key, e.what());
      throw;
    }
  }
  const int fd = ::open(("/proc/self/fd/" + std::to_string(it->second)).c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    throw TraceError(fmt::format("{}: cannot reopen the temporary copy of the input: {}", path, std::strerror(errno)));
  if (::fstat(fd, &st) == 0) total = static_cast<std::uint64_t>(st.st_size);
  return fd;
}

/// A file descriptor with a read buffer and a few bytes of look-ahead for magic detection.
class RawFile {
 public:
  explicit RawFile(const std::string& path) : path_(path), fd_(open_input(path, total_)) {}
  ~RawFile() {
    if (fd_ >= 0) ::close(fd_);
  }
  RawFile(const RawFile&) = delete;
  RawFile& operator=(const RawFile&) = delete;

  /// Reads up to n bytes; 0 at end of file. Throws on a read error.
  std::size_t read(char* buf, std::size_t n) {
    for (;;) {
      ssize_t r = ::read(fd_, buf, n);
      if (r >= 0) {
        consumed_ += static_cast<std::uint64_t>(r);
        return static_cast<std::size_t>(r);
      }
      if (errno == EINTR) continue;
      throw TraceError(fmt::format("{}: read error at offset {}: {}", path_, consumed_, std::strerror(errno)));
    }
  }
  std::uint64_t consumed() const { return consumed_; }
  std::uint64_t total() const { return total_; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::uint64_t total_ = 0;  // before fd_: open_input sets it
  int fd_ = -1;
  std::uint64_t consumed_ = 0;
};

/// Common part: the compressed-input buffer, pre-filled with the bytes read for detection.
class SourceBase : public ByteSource {
 public:
  SourceBase(std::unique_ptr<RawFile> file, std::vector<char> in, std::size_t in_len, Compression c)
      : file_(std::move(file)), in_(std::move(in)), in_len_(in_len), compression_(c) {}
  bool truncated() const override { return truncated_; }
  std::uint64_t bytes_read() const override { return file_->consumed() - (in_len_ - in_pos_); }
  std::uint64_t bytes_total() const override { return file_->total(); }
  Compression compression() const override { return compression_; }
  const std::string& path() const override { return file_->path(); }

 protected:
  /// Refills the input buffer when empty; false at end of file.
  bool fill() {
    if (in_pos_ < in_len_) return true;
    if (eof_) return false;
    in_len_ = file_->read(in_.data(), in_.size());
    in_pos_ = 0;
    if (in_len_ == 0) eof_ = true;
    return in_len_ > 0;
  }

  std::unique_ptr<RawFile> file_;
  std::vector<char> in_;
  std::size_t in_len_ = 0;
  std::size_t in_pos_ = 0;
  bool eof_ = false;
  bool truncated_ = false;
  Compression compression_;
};

class PlainSource final : public SourceBase {
 public:
  using SourceBase::SourceBase;
  std::size_t read(char* buf, std::size_t n) override {
    if (in_pos_ < in_len_) {
      std::size_t k = std::min(n, in_len_ - in_pos_);
      std::memcpy(buf, in_.data() + in_pos_, k);
      in_pos_ += k;
      return k;
    }
    if (eof_) return 0;
    std::size_t k = file_->read(buf, n);
    if (k == 0) eof_ = true;
    return k;
  }
};

/// What the gzip decoders (zlib, ISA-L) share: a file of one or more gzip members.
class GzipMembersSource : public SourceBase {
 public:
  GzipMembersSource(std::unique_ptr<RawFile> file, std::vector<char> in, std::size_t in_len)
      : SourceBase(std::move(file), std::move(in), in_len, Compression::gzip) {}

 protected:
  /// Makes compressed input available for the decoder, in_[in_pos_, in_len_), and notes where
  /// a member starts. False at the end of the file: fine between members, `truncated_` inside
  /// one (then done_ is set and read() returns 0 from then on). Zero bytes after a member are
  /// skipped, as `gzip -d` does; any other byte starts a member (the decoder rejects a bad one).
  bool member_input() {
    for (;;) {
      if (!fill()) {
        if (in_member_) truncated_ = true;
        done_ = true;
        return false;
      }
      if (in_member_) return true;
      if (static_cast<unsigned char>(in_[in_pos_]) == 0) {
        ++in_pos_;
        continue;
      }
      in_member_ = true;
      return true;
    }
  }

  bool in_member_ = false;
  bool done_ = false;
};

class GzipSource final : public GzipMembersSource {
 public:
  GzipSource(std::unique_ptr<RawFile> file, std::vector<char> in, std::size_t in_len)
      : GzipMembersSource(std::move(file), std::move(in), in_len) {
    std::memset(&zs_, 0, sizeof zs_);
    if (inflateInit2(&zs_, 15 + 16) != Z_OK) throw TraceError(fmt::format("{}: cannot start gzip decoder", path()));
  }
  ~GzipSource() override { inflateEnd(&zs_); }

  std::size_t read(char* buf, std::size_t n) override {
    if (done_) return 0;
    zs_.next_out = reinterpret_cast<Bytef*>(buf);
    zs_.avail_out = static_cast<uInt>(std::min<std::size_t>(n, 1u << 30));
    while (zs_.avail_out > 0 && member_input()) {
      zs_.next_in = reinterpret_cast<Bytef*>(in_.data() + in_pos_);
      zs_.avail_in = static_cast<uInt>(in_len_ - in_pos_);
      int rc = inflate(&zs_, Z_NO_FLUSH);
      in_pos_ = in_len_ - zs_.avail_in;
      if (rc == Z_STREAM_END) {
        in_member_ = false;
        inflateReset(&zs_);
      } else if (rc == Z_BUF_ERROR) {
        // No progress possible: needs more input (loop refills) or more output (loop ends).
        if (zs_.avail_in != 0 && zs_.avail_out != 0)
          throw TraceError(fmt::format("{}: gzip data error at compressed offset {}", path(), bytes_read()));
      } else if (rc != Z_OK) {
        throw TraceError(fmt::format("{}: gzip data error at compressed offset {}: {}", path(), bytes_read(),
                                     zs_.msg ? zs_.msg : "corrupt data"));
      }
    }
    return n - zs_.avail_out;
  }

 private:
  z_stream zs_;
};

#ifdef VRAMTRACE_HAVE_ISAL
/// gzip through Intel's ISA-L (igzip), about three times faster than zlib's inflate; same
/// behaviour as GzipSource (several members, trailing zeros, truncation).
class IsalGzipSource final : public GzipMembersSource {
 public:
  IsalGzipSource(std::unique_ptr<RawFile> file, std::vector<char> in, std::size_t in_len)
      : GzipMembersSource(std::move(file), std::move(in), in_len) {
    isal_inflate_init(&st_);
    st_.crc_flag = ISAL_GZIP;
  }

  std::size_t read(char* buf, std::size_t n) override {
    if (done_) return 0;
    st_.next_out = reinterpret_cast<std::uint8_t*>(buf);
    st_.avail_out = static_cast<std::uint32_t>(std::min<std::size_t>(n, 1u << 30));
    while (st_.avail_out > 0 && member_input()) {
      st_.next_in = reinterpret_cast<std::uint8_t*>(in_.data() + in_pos_);
      st_.avail_in = static_cast<std::uint32_t>(in_len_ - in_pos_);
      int rc = isal_inflate(&st_);
      in_pos_ = in_len_ - st_.avail_in;
      if (rc < 0)
        throw TraceError(fmt::format("{}: gzip data error at compressed offset {}{}", path(), bytes_read(),
                                     rc == ISAL_INCORRECT_CHECKSUM ? ": checksum mismatch" : ""));
      if (st_.block_state == ISAL_BLOCK_FINISH) {
        in_member_ = false;
        isal_inflate_reset(&st_);
        st_.crc_flag = ISAL_GZIP;
      }
    }
    return n - st_.avail_out;
  }

 private:
  inflate_state st_;
};
#endif

class ZstdSource final : public SourceBase {
 public:
  ZstdSource(std::unique_ptr<RawFile> file, std::vector<char> in, std::size_t in_len)
      : SourceBase(std::move(file), std::move(in), in_len, Compression::zstd) {
    ds_ = ZSTD_createDStream();
    if (!ds_) throw TraceError(fmt::format("{}: cannot start zstd decoder", path()));
    ZSTD_initDStream(ds_);
  }
  ~ZstdSource() override { ZSTD_freeDStream(ds_); }

  std::size_t read(char* buf, std::size_t n) override {
    if (done_) return 0;
    ZSTD_outBuffer out{buf, n, 0};
    while (out.pos < out.size) {
      if (!fill()) {
        if (in_frame_) truncated_ = true;
        done_ = true;
        break;
      }
      ZSTD_inBuffer in{in_.data(), in_len_, in_pos_};
      std::size_t rc = ZSTD_decompressStream(ds_, &out, &in);
      in_pos_ = in.pos;
      if (ZSTD_isError(rc))
        throw TraceError(fmt::format("{}: zstd data error at compressed offset {}: {}", path(), bytes_read(),
                                     ZSTD_getErrorName(rc)));
      in_frame_ = rc != 0;
    }
    return out.pos;
  }

 private:
  ZSTD_DStream* ds_ = nullptr;
  bool in_frame_ = false;
  bool done_ = false;
};

class LineSourceImpl final : public LineSource {
 public:
  explicit LineSourceImpl(std::unique_ptr<ByteSource> bytes) : bytes_(std::move(bytes)) {
    buf_.resize(kInitial + kPadding);
  }

  bool next_line(std::string_view& line) override {
    for (;;) {
      const char* begin = buf_.data() + start_;
      const char* nl = static_cast<const char*>(std::memchr(begin, '\n', end_ - start_));
      if (nl) {
        std::size_t len = static_cast<std::size_t>(nl - begin);
        start_ += len + 1;
        ++line_;
        if (len > 0 && begin[len - 1] == '\r') --len;
        line = std::string_view(begin, len);
        return true;
      }
      if (eof_) {
        if (start_ == end_) return false;
        std::size_t len = end_ - start_;
        start_ = end_;
        ++line_;
        cut_ = true;
        if (len > 0 && begin[len - 1] == '\r') --len;
        line = std::string_view(begin, len);
        return true;
      }
      // Move the partial line to the front, grow if it fills the buffer, then read more.
      std::size_t have = end_ - start_;
      if (start_ > 0) {
        std::memmove(buf_.data(), buf_.data() + start_, have);
        start_ = 0;
        end_ = have;
      }
      std::size_t cap = buf_.size() - kPadding;
      if (end_ == cap) {
        if (cap >= kMaxLine)
          throw TraceError(fmt::format("{}: line {} is longer than {} MiB", path(), line_ + 1, kMaxLine >> 20));
        buf_.resize(std::min(cap * 2, kMaxLine) + kPadding);
        cap = buf_.size() - kPadding;
      }
      std::size_t got = bytes_->read(buf_.data() + end_, cap - end_);
      if (got == 0) eof_ = true;
      end_ += got;
    }
  }
  std::uint64_t line_number() const override { return line_; }
  bool truncated() const override { return cut_ || bytes_->truncated(); }
  bool stream_truncated() const override { return bytes_->truncated(); }
  std::uint64_t bytes_read() const override { return bytes_->bytes_read(); }
  std::uint64_t bytes_total() const override { return bytes_->bytes_total(); }
  const std::string& path() const override { return bytes_->path(); }
  Compression compression() const override { return bytes_->compression(); }
  std::string damage() override { return damage_after(*bytes_); }

 private:
  static constexpr std::size_t kInitial = 1u << 20;
  std::unique_ptr<ByteSource> bytes_;
  std::vector<char> buf_;
  std::size_t start_ = 0;
  std::size_t end_ = 0;
  std::uint64_t line_ = 0;
  bool eof_ = false;
  bool cut_ = false;
};

}  // namespace

std::string damage_after(ByteSource& src) {
  if (src.compression() == Compression::none) return {};
  std::vector<char> scratch(256 * 1024);
  try {
    while (src.read(scratch.data(), scratch.size()) > 0) {
    }
  } catch (const TraceError& e) {
    return e.what();
  }
  return {};
}

std::unique_ptr<ByteSource> ByteSource::open(const std::string& path) {
  auto file = std::make_unique<RawFile>(path);
  std::vector<char> in(kChunk);
  // Read at least 4 bytes (or to the end) for the magic.
  std::size_t len = 0;
  while (len < 4) {
    std::size_t r = file->read(in.data() + len, in.size() - len);
    if (r == 0) break;
    len += r;
  }
  const auto* m = reinterpret_cast<const unsigned char*>(in.data());
  if (len >= 2 && m[0] == 0x1f && m[1] == 0x8b) {
#ifdef VRAMTRACE_HAVE_ISAL
    if (!std::getenv("VRAMTRACE_USE_ZLIB"))
      return std::make_unique<IsalGzipSource>(std::move(file), std::move(in), len);
#endif
    return std::make_unique<GzipSource>(std::move(file), std::move(in), len);
  }
  if (len >= 4 && m[0] == 0x28 && m[1] == 0xb5 && m[2] == 0x2f && m[3] == 0xfd)
    return std::make_unique<ZstdSource>(std::move(file), std::move(in), len);
  return std::make_unique<PlainSource>(std::move(file), std::move(in), len, Compression::none);
}

std::unique_ptr<LineSource> LineSource::over(std::unique_ptr<ByteSource> bytes) {
  return std::make_unique<LineSourceImpl>(std::move(bytes));
}

std::unique_ptr<LineSource> LineSource::open(const std::string& path) { return over(ByteSource::open(path)); }

}  // namespace vramtrace
