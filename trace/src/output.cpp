// Output names and trace files (see vramtrace/trace/output.h).
#include "vramtrace/trace/output.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <unistd.h>
#include <zstd.h>

#include <cstdlib>

namespace vramtrace::trace {

namespace {

std::string errno_text(int err) {
  char buf[128];
  // GNU strerror_r returns the message (possibly not in buf).
  const char* msg = strerror_r(err, buf, sizeof(buf));
  return msg ? std::string(msg) : std::string("error ") + std::to_string(err);
}

}  // namespace

std::string expand_output_path(std::string_view pattern, const PathFields& f) {
  std::string out;
  out.reserve(pattern.size() + 32);
  for (std::size_t i = 0; i < pattern.size(); ++i) {
    char c = pattern[i];
    if (c != '%' || i + 1 == pattern.size()) {
      out.push_back(c);
      continue;
    }
    char k = pattern[++i];
    switch (k) {
      case 'p':
        out += std::to_string(f.pid);
        break;
      case 'h':
        out += f.host.empty() ? std::string("localhost") : f.host;
        break;
      case 'r':
        out += f.rank.empty() ? std::string("0") : f.rank;
        break;
      case 'R':
        if (!f.rank.empty()) out += "rank" + f.rank + ".";
        break;
      case 't': {
        std::tm tm{};
        gmtime_r(&f.start_time, &tm);
        char buf[32];
        std::size_t n = std::strftime(buf, sizeof(buf), "%Y%m%d-%H%M%S", &tm);
        out.append(buf, n);
        break;
      }
      case '%':
        out.push_back('%');
        break;
      default:
        out.push_back('%');
        out.push_back(k);
    }
  }
  return out;
}

std::string rank_from_environment() {
  for (const char* name : {"RANK", "LOCAL_RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID"}) {
    const char* v = std::getenv(name);
    if (v != nullptr && *v != '\0') return v;
  }
  return {};
}

std::string local_rank_from_environment() {
  for (const char* name : {"LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID"}) {
    const char* v = std::getenv(name);
    if (v != nullptr && *v != '\0') return v;
  }
  return {};
}

std::string path_with_pid(const std::string& path, std::int64_t pid) {
  const std::size_t slash = path.rfind('/');
  const std::size_t name_start = slash == std::string::npos ? 0 : slash + 1;
  // A leading dot belongs to the name (".trace"), not to an extension.
  const std::size_t dot = path.find('.', name_start + 1);
  const std::string tag = "-" + std::to_string(pid);
  if (dot == std::string::npos) return path + tag;
  return path.substr(0, dot) + tag + path.substr(dot);
}

std::string host_name() {
  char buf[256] = {};
  if (gethostname(buf, sizeof(buf) - 1) != 0) return {};
  return buf;
}

TraceFile::~TraceFile() { abandon(); }

bool TraceFile::create(const std::string& path, bool zstd, int level, std::string& error) {
  abandon();
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) {
    int err = errno;
    error = "cannot create the trace file '" + path + "': " + errno_text(err);
    if (err == EEXIST)
      error += " (vramtrace never overwrites a file or follows a link; remove it or choose another name, e.g. with %p)";
    return false;
  }
  if (zstd) {
    zstd_ = ZSTD_createCCtx();
    if (zstd_ == nullptr || ZSTD_isError(ZSTD_CCtx_setParameter(zstd_, ZSTD_c_compressionLevel, level))) {
      ::close(fd);
      ZSTD_freeCCtx(zstd_);
      zstd_ = nullptr;
      ::unlink(path.c_str());
      error = "cannot set up zstd compression for '" + path + "'";
      return false;
    }
    zbuf_.resize(ZSTD_CStreamOutSize());
  }
  fd_ = fd;
  path_ = path;
  bytes_written_ = 0;
  return true;
}

bool TraceFile::write_raw(const char* data, std::size_t size, std::string& error) {
  while (size > 0) {
    ssize_t n = ::write(fd_, data, size);
    if (n < 0) {
      if (errno == EINTR) continue;
      error = "writing the trace file '" + path_ + "' failed: " + errno_text(errno);
      return false;
    }
    if (n == 0) {
      error = "writing the trace file '" + path_ + "' failed: no progress";
      return false;
    }
    data += n;
    size -= static_cast<std::size_t>(n);
    bytes_written_ += static_cast<std::uint64_t>(n);
  }
  return true;
}

bool TraceFile::write(std::string_view data, std::string& error) {
  if (fd_ < 0) {
    error = "trace file is not open";
    return false;
  }
  if (zstd_ == nullptr) return write_raw(data.data(), data.size(), error);
  ZSTD_inBuffer in{data.data(), data.size(), 0};
  for (;;) {
    ZSTD_outBuffer out{zbuf_.data(), zbuf_.size(), 0};
    std::size_t left = ZSTD_compressStream2(zstd_, &out, &in, ZSTD_e_flush);
    if (ZSTD_isError(left)) {
      error = std::string("zstd compression failed: ") + ZSTD_getErrorName(left);
      return false;
    }
    if (out.pos != 0 && !write_raw(zbuf_.data(), out.pos, error)) return false;
    if (left == 0 && in.pos == in.size) return true;
  }
}

bool TraceFile::finish(std::string& error) {
  if (fd_ < 0) return true;
  bool ok = true;
  if (zstd_ != nullptr) {
    ZSTD_inBuffer in{nullptr, 0, 0};
    for (;;) {
      ZSTD_outBuffer out{zbuf_.data(), zbuf_.size(), 0};
      std::size_t left = ZSTD_compressStream2(zstd_, &out, &in, ZSTD_e_end);
      if (ZSTD_isError(left)) {
        error = std::string("zstd compression failed: ") + ZSTD_getErrorName(left);
        ok = false;
        break;
      }
      if (out.pos != 0 && !write_raw(zbuf_.data(), out.pos, error)) {
        ok = false;
        break;
      }
      if (left == 0) break;
    }
  }
  if (::close(fd_) != 0 && ok) {
    error = "closing the trace file '" + path_ + "' failed: " + errno_text(errno);
    ok = false;
  }
  fd_ = -1;
  ZSTD_freeCCtx(zstd_);
  zstd_ = nullptr;
  return ok;
}

void TraceFile::abandon() noexcept {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  ZSTD_freeCCtx(zstd_);
  zstd_ = nullptr;
}

}  // namespace vramtrace::trace
