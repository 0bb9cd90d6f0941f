// `vramtrace export --format parquet`: traces of a job as Parquet tables partitioned by job and
// rank, for DuckDB, Spark and pandas (docs/export.md, "parquet"; queries in docs/fleet.md).
#pragma once

#include <cstdint>
#include <string>

#include "readers/open_trace.h"
#include "render/duckdb_library.h"

namespace vramtrace {

/// The tables, each a folder of `dir` holding `job=<job>/rank=<rank>/<uuid>.parquet` (Hive
/// partitioning; a trace without a numeric rank goes to rank=__HIVE_DEFAULT_PARTITION__, rank
/// NULL): events, segments, sites, summaries, ooms. Columns and units: docs/export.md.
inline constexpr const char* kParquetTables[] = {"events", "segments", "sites", "summaries", "ooms"};

/// Writes the tables of one job's traces into a folder through DuckDB. Feed the traces with
/// add_trace, then finish(). Rows are buffered in DuckDB's in-memory tables and copied out to
/// Parquet once `flush_events` event rows are buffered and at finish(), so memory is bounded by
/// that and by one trace's model, whatever the number of traces. Not thread-safe.
class ParquetJobWriter {
 public:
  /// `dir` must exist (the tables' folders are made in it); `job` is the job's partition value
  /// (letters, digits, '.', '_' and '-'; the caller checks). Throws DuckDbError.
  ParquetJobWriter(DuckDb& db, std::string dir, std::string job, std::uint64_t flush_events = 4u << 20);

  /// Reads the trace at `path` through `reader` (one pass) and adds its rows. Throws TraceError on
  /// malformed input (naming the file and position), DuckDbError.
  void add_trace(const std::string& path, TraceReader& reader);
  /// Copies the rows still buffered out. Throws DuckDbError (a full disk, an unwritable folder).
  void finish();

  struct Counts {
    std::uint64_t traces = 0, events = 0, segments = 0, sites = 0, summaries = 0, ooms = 0;
    std::uint64_t traces_without_rank = 0;
  };
  const Counts& counts() const noexcept { return counts_; }

 private:
  void copy_out();
  DuckDb& db_;
  std::string dir_;
  std::string job_;
  std::uint64_t flush_events_;
  std::uint64_t buffered_events_ = 0;
  Counts counts_;
};

}  // namespace vramtrace
