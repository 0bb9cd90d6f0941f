// DuckDB's C API, loaded at run time from libduckdb.so for `vramtrace export --format parquet`
// (docs/export.md). The command is never linked with DuckDB: its NEEDED entries stay glibc's
// (scripts/check-glibc.py), and only this export needs the 70 MB library.
#pragma once

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>

namespace vramtrace {

/// The DuckDB release the export is tested with, and the one scripts/setup-deps.sh installs.
inline constexpr const char* kDuckDbVersion = "1.5.6";

/// The library could not be found or loaded, or lacks a function of the C API. what() is a
/// paragraph for the user: what was tried and how to get the library. A usage error: exit 2.
class DuckDbUnavailable : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// A statement or an append failed; what() is DuckDB's message.
class DuckDbError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// Where libduckdb.so is looked for: $VRAMTRACE_DUCKDB when set and not empty, else
/// $XDG_CACHE_HOME/vramtrace/duckdb/<kDuckDbVersion>/libduckdb.so ($HOME/.cache when
/// XDG_CACHE_HOME is unset), where scripts/setup-deps.sh puts it. Reads the environment only.
std::string duckdb_library_path();

struct DuckDbApi;  // the resolved functions (duckdb_library.cpp)

/// An in-memory DuckDB database and one connection to it, over a library loaded with dlopen.
/// Not thread-safe (one connection); DuckDB runs its own worker threads inside a statement.
class DuckDb {
 public:
  /// Loads the library at `library_path` (RTLD_NOW | RTLD_LOCAL: its symbols never resolve ours),
  /// checks that it has every function used here, and opens an in-memory database. Throws
  /// DuckDbUnavailable when the file is missing or not a loadable DuckDB, DuckDbError when the
  /// database cannot be opened. The library stays loaded for the life of the process (DuckDB's
  /// threads and static destructors must not outlive its code).
  explicit DuckDb(const std::string& library_path);
  ~DuckDb();
  DuckDb(const DuckDb&) = delete;
  DuckDb& operator=(const DuckDb&) = delete;

  /// DuckDB's own version string ("v1.5.6").
  std::string version() const;
  /// Runs one or more statements, discarding their results. Throws DuckDbError with DuckDB's
  /// message (and the start of the statement) on failure.
  void execute(const std::string& sql);

  /// Rows appended to one table through DuckDB's appender: values in column order, end_row()
  /// after each row, close() at the end (flushes; errors of a row may surface only then).
  /// Every call throws DuckDbError with DuckDB's message. Not thread-safe.
  class Appender {
   public:
    Appender(DuckDb& db, const std::string& table);
    ~Appender();
    Appender(const Appender&) = delete;
    Appender& operator=(const Appender&) = delete;
    Appender& i32(std::int32_t v);
    Appender& i64(std::int64_t v);
    Appender& u8(std::uint8_t v);
    Appender& u32(std::uint32_t v);
    Appender& u64(std::uint64_t v);
    Appender& boolean(bool v);
    Appender& text(std::string_view v);
    Appender& null();
    /// text(v), or null() when `v` is empty.
    Appender& text_or_null(std::string_view v) { return v.empty() ? null() : text(v); }
    void end_row();
    /// Writes the buffered rows into the table.
    void flush();
    void close();

   private:
    void check(int state, const char* what);
    const DuckDbApi& api_;
    void* appender_ = nullptr;
    std::string table_;
  };

 private:
  const DuckDbApi* api_ = nullptr;
  void* database_ = nullptr;
  void* connection_ = nullptr;
};

}  // namespace vramtrace
