// Where the trace goes: the output name (VRAMTRACE_OUTPUT placeholders) and the file itself
// (created exclusively, written with whole write(2) calls, optionally zstd-compressed).
#pragma once

#include <cstdint>
#include <ctime>
#include <string>
#include <string_view>

struct ZSTD_CCtx_s;

namespace vramtrace::trace {

/// Values for the placeholders of an output name.
struct PathFields {
  std::int64_t pid = 0;
  std::string host;
  std::string rank;            ///< "" when no launcher variable is set (then %r expands to "0")
  std::time_t start_time = 0;  ///< seconds since the Unix epoch; %t is its UTC "YYYYMMDD-HHMMSS"
};

/// Expands an output name: %p pid, %h host name, %r rank, %R "rank<N>." when a launcher set a
/// rank and nothing otherwise (the default name of `vramtrace run` uses it, so that the processes
/// of a torchrun/mpirun job get names that sort by rank), %t start time (UTC, YYYYMMDD-HHMMSS),
/// %% a literal '%'. Any other '%x' is kept as written. Pure; thread-safe.
std::string expand_output_path(std::string_view pattern, const PathFields& fields);

/// The rank from the usual launcher variables, first one set of: RANK, LOCAL_RANK (torchrun),
/// OMPI_COMM_WORLD_RANK (Open MPI), PMI_RANK (MPICH, Intel MPI), SLURM_PROCID (srun). "" if none.
std::string rank_from_environment();

/// The rank within the host from the usual launcher variables, first one set of: LOCAL_RANK
/// (torchrun, accelerate), OMPI_COMM_WORLD_LOCAL_RANK (Open MPI), MPI_LOCALRANKID (MPICH, Intel
/// MPI), SLURM_LOCALID (srun). "" if none. Reports take it as the process's own device.
std::string local_rank_from_environment();

/// `path` with "-<pid>" inserted before the first '.' of its file name ("t.jsonl.zst" ->
/// "t-42.jsonl.zst"), or appended when the name has none: the name a fork child uses when the
/// output pattern has no %p.
std::string path_with_pid(const std::string& path, std::int64_t pid);

/// The host name (gethostname), "" on failure.
std::string host_name();

/// One trace file. Not thread-safe: the writer's background thread owns it (the creating thread
/// hands it over before the thread starts).
class TraceFile {
 public:
  TraceFile() = default;
  TraceFile(const TraceFile&) = delete;
  TraceFile& operator=(const TraceFile&) = delete;
  ~TraceFile();

  /// Creates `path` for writing with O_CREAT|O_EXCL|O_NOFOLLOW|O_CLOEXEC and mode 0600: it never
  /// overwrites an existing file and never follows a symbolic link at the final component (an
  /// existing link, even a dangling one, fails with EEXIST). With `zstd`, the data is one zstd
  /// frame at `level` (1..19). Returns false and sets `error` to "cannot create ...: <reason>".
  bool create(const std::string& path, bool zstd, int level, std::string& error);

  /// Writes `data` (whole lines) to the file and makes it decodable up to here: plain data is
  /// written with write(2) straight away; with zstd the compressor is flushed (ZSTD_e_flush), so
  /// a reader can decode every byte written even if the process is killed afterwards. Retries
  /// short writes and EINTR. Returns false and sets `error` on any failure (ENOSPC, EFBIG, EIO...).
  bool write(std::string_view data, std::string& error);

  /// Ends the zstd frame (if any) and closes the file. Returns false and sets `error` on failure.
  bool finish(std::string& error);

  /// Closes the descriptor and drops compressor state without writing anything: used after a
  /// failure and in a fork child (the parent still owns what it has buffered).
  void abandon() noexcept;

  bool is_open() const noexcept { return fd_ >= 0; }
  const std::string& path() const noexcept { return path_; }
  /// Bytes written to the file so far (compressed bytes with zstd).
  std::uint64_t bytes_written() const noexcept { return bytes_written_; }

 private:
  bool write_raw(const char* data, std::size_t size, std::string& error);

  int fd_ = -1;
  std::string path_;
  ZSTD_CCtx_s* zstd_ = nullptr;
  std::string zbuf_;  // compressor output, reused
  std::uint64_t bytes_written_ = 0;
};

}  // namespace vramtrace::trace
