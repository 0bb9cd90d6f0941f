// `vramtrace export TRACE... --format memory-viz|perfetto|parquet -o OUT`: a trace in a format
// other tools open (docs/export.md): PyTorch's memory snapshot pickle, the Chrome/Perfetto JSON
// trace, or a job's traces as Parquet tables (through DuckDB, loaded at run time).
#include <fcntl.h>
#include <unistd.h>

#include <sys/stat.h>

#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <stdexcept>

#include <fmt/format.h>

#include "commands/commands.h"
#include "commands/log.h"
#include "commands/progress.h"
#include "commands/usage.h"
#include "model/parallel_map.h"
#include "readers/open_trace.h"
#include "readers/trace_paths.h"
#include "render/duckdb_library.h"
#include "render/memory_viz.h"
#include "render/parquet_export.h"
#include "render/perfetto_trace.h"

namespace vramtrace::cli {
namespace {

/// Where an export goes: stdout for "-"; a device or FIFO as it is; any other path through a
/// temporary file in the same directory, renamed over the path by commit(), so that a failed
/// export leaves no partial file and a reader never sees half of one. The temporary is removed
/// when the object dies uncommitted. Write errors throw std::runtime_error with the system's
/// reason.
class ExportOutput {
 public:
  explicit ExportOutput(std::string path) : path_(std::move(path)) {
    if (path_ == "-") {
      file_ = stdout;
      return;
    }
    std::error_code ec;
    const auto st = std::filesystem::status(path_, ec);
    if (!ec && std::filesystem::exists(st) && !std::filesystem::is_regular_file(st)) {
      file_ = std::fopen(path_.c_str(), "wb");  // /dev/null, a FIFO: written to, never replaced
      if (!file_) fail("cannot open");
      return;
    }
    const std::filesystem::path target(path_);
    const std::filesystem::path dir = target.has_parent_path() ? target.parent_path() : ".";
    for (int n = 0; n < 100 && !file_; ++n) {
      temp_ = (dir / fmt::format(".{}.tmp-{}-{}", target.filename().string(), ::getpid(), n)).string();
      const int fd = ::open(temp_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
      if (fd < 0 && errno == EEXIST) continue;
      if (fd < 0) {
        temp_.clear();
        fail("cannot create a file beside");
      }
      file_ = ::fdopen(fd, "wb");
      if (!file_) {
        ::close(fd);
        fail("cannot open");
      }
    }
    if (!file_) fail("cannot create a file beside");
  }
  ExportOutput(const ExportOutput&) = delete;
  ExportOutput& operator=(const ExportOutput&) = delete;
  ~ExportOutput() {
    if (file_ && file_ != stdout) std::fclose(file_);
    if (!temp_.empty()) ::unlink(temp_.c_str());
  }

  void write(std::string_view bytes) {
    if (std::fwrite(bytes.data(), 1, bytes.size(), file_) != bytes.size()) fail("cannot write");
    written_ += bytes.size();
  }

  /// Flushes and closes (checked: a full disk may show only then) and renames the temporary
  /// over the path; refuses when the path appeared meanwhile and `force` is off.
  void commit(bool force) {
    if (file_ == stdout) {
      if (std::fflush(stdout) != 0) fail("cannot write");
      return;
    }
    std::FILE* f = file_;
    file_ = nullptr;
    if (std::fclose(f) != 0) fail("cannot write");
    if (temp_.empty()) return;
    if (const std::string refusal = existing_output_error(path_, force); !refusal.empty())
      throw std::runtime_error(refusal);
    if (std::rename(temp_.c_str(), path_.c_str()) != 0) fail("cannot rename the finished file to");
    temp_.clear();
  }
  std::uint64_t written() const noexcept { return written_; }

 private:
  [[noreturn]] void fail(const char* what) const {
    const int e = errno;
    throw std::runtime_error(fmt::format("{} {}: {}", what, path_, e != 0 ? std::strerror(e) : "unknown error"));
  }

  std::string path_;
  std::string temp_;
  std::FILE* file_ = nullptr;
  std::uint64_t written_ = 0;
};

/// One trace read for the export: its model, and the reader that built it (a snapshot's recorded
/// end state is known once that reader reached its end).
struct LoadedTrace {
  std::string path;
  std::unique_ptr<TraceReader> reader;
  TraceModel model;
};

LoadedTrace load_trace(const std::string& path) {
  LoadedTrace t;
  t.path = path;
  t.reader = open_trace(path);
  ModelOptions options;
  options.timeline_buckets = 16384;  // finer counters than the HTML report's 4096
  options.ledger = false;
  try {
    t.model = build_trace_model(*t.reader, options);
  } catch (const TraceError&) {
    throw;
  } catch (const std::exception& e) {
    throw TraceError(path + ": " + t.reader->position() + ": " + e.what());
  }
  if (t.model.header.path.empty()) t.model.header.path = path;
  return t;
}

/// Why the Parquet export must not write its folder `out`, or "": a path that exists is refused
/// without `force`, and with it unless it is a folder holding nothing but a previous export's
/// tables (an empty folder included): --force never deletes a folder of anything else.
std::string parquet_output_error(const std::string& out, bool force) {
  namespace fs = std::filesystem;
  if (out.empty() || out == "-") return "--format parquet writes a folder: give its path with -o";
  std::error_code ec;
  const auto st = fs::symlink_status(out, ec);
  if (ec || st.type() == fs::file_type::not_found) return {};
  if (!force) return "output folder " + out + " already exists (--force replaces a previous Parquet export)";
  if (st.type() != fs::file_type::directory)
    return "output " + out + " exists and is not a folder; --force replaces only a previous Parquet export";
  for (const auto& e : fs::directory_iterator(out, ec)) {
    const std::string name = e.path().filename().string();
    bool ours = false;
    for (const char* t : kParquetTables) ours = ours || name == t;
    if (!ours || !e.is_directory())
      return "output folder " + out + " holds " + name +
             ", which is not a table of a Parquet export; --force replaces only a previous export (remove it "
             "yourself, or give another folder)";
  }
  if (ec) return "cannot read the output folder " + out + ": " + ec.message();
  return {};
}

/// The job's name as a partition value: letters, digits, '.', '_', '-' (a folder name on every
/// file system, the same text in every Hive reader), not starting with '.'.
bool valid_job_name(const std::string& job) {
  if (job.empty() || job.size() > 200 || job[0] == '.') return false;
  for (const unsigned char c : job)
    if (!std::isalnum(c) && c != '.' && c != '_' && c != '-') return false;
  return true;
}

/// A folder beside `out` that the export is written into and renamed over `out` by commit(), so
/// that a failed export leaves no partial folder; removed with what it holds when the object
/// dies uncommitted.
class ExportFolder {
 public:
  explicit ExportFolder(const std::string& out) : out_(out) {
    namespace fs = std::filesystem;
    const fs::path target = fs::path(out).lexically_normal();
    const fs::path name = target.has_filename() ? target.filename() : target.parent_path().filename();
    const fs::path dir = target.has_parent_path() ? target.parent_path() : fs::path(".");
    std::error_code ec;
    fs::create_directories(dir, ec);  // as mkdir -p: a job's export often goes to exports/<job>
    if (ec) throw std::runtime_error(fmt::format("cannot create the folder {}: {}", dir.string(), ec.message()));
    for (int n = 0; n < 100 && temp_.empty(); ++n) {
      const fs::path p = dir / fmt::format(".{}.tmp-{}-{}", name.string(), ::getpid(), n);
      if (::mkdir(p.c_str(), 0777) == 0)
        temp_ = p.string();
      else if (errno != EEXIST)
        throw std::runtime_error(fmt::format("cannot create a folder beside {}: {}", out, std::strerror(errno)));
    }
    if (temp_.empty()) throw std::runtime_error("cannot create a folder beside " + out);
  }
  ExportFolder(const ExportFolder&) = delete;
  ExportFolder& operator=(const ExportFolder&) = delete;
  ~ExportFolder() {
    std::error_code ec;
    if (!temp_.empty()) std::filesystem::remove_all(temp_, ec);
  }
  const std::string& path() const noexcept { return temp_; }

  /// Puts the finished folder at `out`; a previous export there (parquet_output_error checked
  /// it, and checks again now) is moved aside first and removed after.
  void commit(bool force) {
    namespace fs = std::filesystem;
    if (const std::string refusal = parquet_output_error(out_, force); !refusal.empty())
      throw std::runtime_error(refusal);
    std::error_code ec;
    std::string old;
    if (fs::exists(fs::symlink_status(out_, ec))) {
      old = temp_ + ".old";
      if (std::rename(out_.c_str(), old.c_str()) != 0)
        throw std::runtime_error(fmt::format("cannot move {} aside: {}", out_, std::strerror(errno)));
    }
    if (std::rename(temp_.c_str(), out_.c_str()) != 0)
      throw std::runtime_error(fmt::format("cannot rename the finished folder to {}: {}", out_, std::strerror(errno)));
    temp_.clear();
    if (!old.empty()) fs::remove_all(old, ec);
  }

 private:
  std::string out_;
  std::string temp_;
};

void export_parquet(const std::vector<std::string>& paths, const std::string& out, const std::string& job, bool force) {
  DuckDb db(duckdb_library_path());
  ExportFolder folder(out);
  ParquetJobWriter writer(db, folder.path(), job);
  {
    const ReadProgressScope progress("export");
    for (const std::string& p : paths) {
      std::unique_ptr<TraceReader> reader = open_trace(p);
      try {
        writer.add_trace(p, *reader);
      } catch (const TraceError&) {
        throw;
      } catch (const DuckDbError&) {
        throw;
      } catch (const std::exception& e) {
        throw TraceError(p + ": " + reader->position() + ": " + e.what());
      }
    }
  }
  writer.finish();
  folder.commit(force);
  const auto& c = writer.counts();
  if (c.traces_without_rank != 0)
    logger().warn(
        "vramtrace export: {} of {} traces record no numeric rank in their header; their rows have rank NULL "
        "(folder rank=__HIVE_DEFAULT_PARTITION__), told apart by pid",
        c.traces_without_rank, c.traces);
  logger().info(
      "vramtrace export: wrote {} (job {}: {} traces; rows: {} events, {} segments, {} sites, {} summaries, {} ooms)",
      out, job, c.traces, c.events, c.segments, c.sites, c.summaries, c.ooms);
}

}  // namespace

void register_export(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "export",
      "Write traces for other tools: PyTorch's memory snapshot (memory_viz), a Perfetto trace, or Parquet tables");
  struct Opts {
    std::vector<std::string> traces;
    std::string format;
    std::string output;
    std::string level = "auto";
    std::string job;
    bool force = false;
  };
  auto opts = std::make_shared<Opts>();
  cmd->add_option("traces", opts->traces,
                  "Trace files (PyTorch JSON lines, snapshot pickle, vramtrace trace), globs, or directories; "
                  "memory-viz takes one process")
      ->required();
  cmd->add_option("--format", opts->format,
                  "memory-viz (a PyTorch snapshot pickle for pytorch.org/memory_viz), perfetto (JSON for "
                  "ui.perfetto.dev) or parquet (a folder of Parquet tables partitioned by job and rank, for "
                  "DuckDB, Spark, pandas; needs DuckDB's libduckdb.so, docs/export.md)")
      ->required()
      ->check(CLI::IsMember({"memory-viz", "perfetto", "parquet"}));
  cmd->add_option("-o,--output", opts->output,
                  "Output file (- writes to standard output); for parquet, the folder to create")
      ->required();
  cmd->add_option("--job", opts->job,
                  "parquet: the job's name, its partition value (letters, digits, . _ -; default: the output "
                  "folder's name)");
  cmd->add_flag("--force", opts->force, "Overwrite the output file if it exists");
  add_level_option(cmd, opts->level);
  cmd->callback([opts]() {
    if (opts->format == "parquet") {
      namespace fs = std::filesystem;
      const std::string job =
          !opts->job.empty() ? opts->job : fs::path(opts->output).lexically_normal().filename().string();
      std::string refusal = parquet_output_error(opts->output, opts->force);
      if (refusal.empty() && !valid_job_name(job))
        refusal = fmt::format(
            "the job's name \"{}\" (--job, else the output folder's name) must be letters, digits, '.', '_' and "
            "'-', not starting with '.': give --job NAME",
            job);
      if (!refusal.empty()) {
        logger().error("vramtrace export: {}", refusal);
        set_exit_code(2);
        return;
      }
      try {
        export_parquet(traces_to_read(opts->traces, opts->level, "export"), opts->output, job, opts->force);
        set_exit_code(0);
      } catch (const DuckDbUnavailable& e) {
        logger().error("vramtrace export: {}", e.what());
        set_exit_code(2);
      } catch (const std::runtime_error& e) {  // TraceError, DuckDbError, file system errors
        logger().error("vramtrace export: {}", e.what());
        set_exit_code(2);
      }
      return;
    }
    // Before the traces are read: a long export must not end in this refusal.
    if (const std::string refusal = existing_output_error(opts->output, opts->force); !refusal.empty()) {
      logger().error("vramtrace export: {}", refusal);
      set_exit_code(2);
      return;
    }
    try {
      std::vector<LoadedTrace> traces;
      {
        const ReadProgressScope progress("export");
        // Several traces read at once (model/parallel_map.h), kept in the order given.
        const std::vector<std::string> paths = traces_to_read(opts->traces, opts->level, "export");
        traces = parallel_map<LoadedTrace>(paths.size(), [&paths](std::size_t i) { return load_trace(paths[i]); });
      }
      if (opts->format == "memory-viz" && traces.size() != 1) {
        logger().error(
            "vramtrace export: a memory snapshot holds one process, and {} traces were given (export them one "
            "at a time, or use --format perfetto for several)",
            traces.size());
        set_exit_code(2);
        return;
      }
      ExportOutput out(opts->output);
      const ByteSink sink = [&out](std::string_view bytes) { out.write(bytes); };
      if (opts->format == "memory-viz") {
        const LoadedTrace& t = traces.front();
        write_memory_viz(
            t.model, t.reader->final_state(), [&t]() { return open_trace(t.path); }, sink);
      } else {
        std::vector<PerfettoProcess> processes;
        for (const LoadedTrace& t : traces) processes.push_back({&t.model, [&t]() { return open_trace(t.path); }});
        write_perfetto_json(processes, sink);
      }
      out.commit(opts->force);
      if (opts->output != "-")
        logger().info("vramtrace export: wrote {} ({:.1f} KiB)", opts->output,
                      static_cast<double>(out.written()) / 1024.0);
      set_exit_code(0);
    } catch (const TraceError& e) {
      logger().error("vramtrace export: {}", e.what());
      set_exit_code(2);
    } catch (const std::runtime_error& e) {
      logger().error("vramtrace export: {}", e.what());
      set_exit_code(2);
    }
  });
}

}  // namespace vramtrace::cli
