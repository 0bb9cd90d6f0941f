#include "render/duckdb_library.h"

#include <dlfcn.h>

#include <cstdlib>
#include <mutex>

#include <fmt/format.h>

namespace vramtrace {

// The part of duckdb.h used here. DuckDB's C API is stable across releases: handles are pointers
// to opaque structs, and duckdb_result (passed by address only) has kept this layout since 0.8.
namespace {
using duckdb_state = int;  // DuckDBSuccess = 0, DuckDBError = 1
using idx_t = std::uint64_t;
struct duckdb_result {
  idx_t deprecated_column_count;
  idx_t deprecated_row_count;
  idx_t deprecated_rows_changed;
  void* deprecated_columns;
  char* deprecated_error_message;
  void* internal_data;
};
using handle = void*;
}  // namespace

// One list of the functions used, resolved together: a library that lacks one is refused whole.
#define VT_DUCKDB_FUNCTIONS(X)                                                         \
  X(duckdb_library_version, const char*, ())                                           \
  X(duckdb_open, duckdb_state, (const char*, handle*))                                 \
  X(duckdb_close, void, (handle*))                                                     \
  X(duckdb_connect, duckdb_state, (handle, handle*))                                   \
  X(duckdb_disconnect, void, (handle*))                                                \
  X(duckdb_query, duckdb_state, (handle, const char*, duckdb_result*))                 \
  X(duckdb_result_error, const char*, (duckdb_result*))                                \
  X(duckdb_destroy_result, void, (duckdb_result*))                                     \
  X(duckdb_appender_create, duckdb_state, (handle, const char*, const char*, handle*)) \
  X(duckdb_appender_error, const char*, (handle))                                      \
  X(duckdb_appender_flush, duckdb_state, (handle))                                     \
  X(duckdb_appender_close, duckdb_state, (handle))                                     \
  X(duckdb_appender_destroy, duckdb_state, (handle*))                                  \
  X(duckdb_appender_end_row, duckdb_state, (handle))                                   \
  X(duckdb_append_bool, duckdb_state, (handle, bool))                                  \
  X(duckdb_append_int32, duckdb_state, (handle, std::int32_t))                         \
  X(duckdb_append_int64, duckdb_state, (handle, std::int64_t))                         \
  X(duckdb_append_uint8, duckdb_state, (handle, std::uint8_t))                         \
  X(duckdb_append_uint32, duckdb_state, (handle, std::uint32_t))                       \
  X(duckdb_append_uint64, duckdb_state, (handle, std::uint64_t))                       \
  X(duckdb_append_varchar_length, duckdb_state, (handle, const char*, idx_t))          \
  X(duckdb_append_null, duckdb_state, (handle))

struct DuckDbApi {
#define VT_MEMBER(name, ret, args) ret(*name) args = nullptr;
  VT_DUCKDB_FUNCTIONS(VT_MEMBER)
#undef VT_MEMBER
};

namespace {

std::string how_to_get_it(const std::string& path, const std::string& why) {
  return fmt::format(
      "--format parquet writes through DuckDB's library, libduckdb.so (DuckDB {0}), which vramtrace loads only "
      "for this format, and it could not load {1}: {2}. Install it with scripts/setup-deps.sh (it fetches npm's "
      "@duckdb/node-bindings-linux-x64 package, checks its sha512, and puts libduckdb.so in "
      "~/.cache/vramtrace/duckdb/{0}/), or set VRAMTRACE_DUCKDB to the path of a libduckdb.so of DuckDB {0} "
      "(the C API library of DuckDB's release downloads). The other export formats need nothing.",
      kDuckDbVersion, path, why);
}

// Loaded once per process and never unloaded (DuckDB's threads and static destructors).
const DuckDbApi& load_api(const std::string& path) {
  static std::mutex mutex;
  static std::string loaded_path;
  static DuckDbApi api;
  const std::lock_guard<std::mutex> lock(mutex);
  if (!loaded_path.empty()) {
    if (loaded_path != path) throw DuckDbUnavailable(how_to_get_it(path, "another libduckdb.so is already loaded"));
    return api;
  }
  void* lib = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    const char* e = ::dlerror();
    throw DuckDbUnavailable(how_to_get_it(path, e ? e : "dlopen failed"));
  }
  DuckDbApi found;
#define VT_RESOLVE(name, ret, args)                                                                           \
  found.name = reinterpret_cast<ret(*) args>(::dlsym(lib, #name));                                            \
  if (!found.name) {                                                                                          \
    ::dlclose(lib);                                                                                           \
    throw DuckDbUnavailable(how_to_get_it(path, "it has no function " #name ": not a DuckDB C API library")); \
  }
  VT_DUCKDB_FUNCTIONS(VT_RESOLVE)
#undef VT_RESOLVE
  api = found;
  loaded_path = path;
  return api;
}

}  // namespace

std::string duckdb_library_path() {
  if (const char* p = std::getenv("VRAMTRACE_DUCKDB"); p && *p) return p;
  std::string cache;
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x)
    cache = x;
  else if (const char* h = std::getenv("HOME"); h && *h)
    cache = std::string(h) + "/.cache";
  else
    cache = ".cache";
  return fmt::format("{}/vramtrace/duckdb/{}/libduckdb.so", cache, kDuckDbVersion);
}

DuckDb::DuckDb(const std::string& library_path) : api_(&load_api(library_path)) {
  if (api_->duckdb_open(nullptr, &database_) != 0) throw DuckDbError("DuckDB could not open an in-memory database");
  if (api_->duckdb_connect(database_, &connection_) != 0) {
    api_->duckdb_close(&database_);
    throw DuckDbError("DuckDB could not connect to its in-memory database");
  }
}

DuckDb::~DuckDb() {
  if (connection_) api_->duckdb_disconnect(&connection_);
  if (database_) api_->duckdb_close(&database_);
}

std::string DuckDb::version() const {
  const char* v = api_->duckdb_library_version();
  return v ? v : "";
}

void DuckDb::execute(const std::string& sql) {
  duckdb_result result{};
  const duckdb_state state = api_->duckdb_query(connection_, sql.c_str(), &result);
  std::string error;
  if (state != 0) {
    const char* e = api_->duckdb_result_error(&result);
    error = e ? e : "unknown error";
  }
  api_->duckdb_destroy_result(&result);
  if (state != 0) throw DuckDbError(fmt::format("DuckDB: {} (in: {})", error, sql.substr(0, 200)));
}

DuckDb::Appender::Appender(DuckDb& db, const std::string& table) : api_(*db.api_), table_(table) {
  if (api_.duckdb_appender_create(db.connection_, nullptr, table.c_str(), &appender_) != 0) {
    const char* e = appender_ ? api_.duckdb_appender_error(appender_) : nullptr;
    const std::string why = e ? e : "unknown error";
    if (appender_) api_.duckdb_appender_destroy(&appender_);
    throw DuckDbError(fmt::format("DuckDB: cannot append to {}: {}", table, why));
  }
}

DuckDb::Appender::~Appender() {
  if (appender_) api_.duckdb_appender_destroy(&appender_);  // flushes; an error here is lost, close() reports it
}

void DuckDb::Appender::check(int state, const char* what) {
  if (state == 0) return;
  const char* e = api_.duckdb_appender_error(appender_);
  throw DuckDbError(fmt::format("DuckDB: {} of table {} failed: {}", what, table_, e ? e : "unknown error"));
}

DuckDb::Appender& DuckDb::Appender::i32(std::int32_t v) {
  check(api_.duckdb_append_int32(appender_, v), "append");
  return *this;
}
DuckDb::Appender& DuckDb::Appender::i64(std::int64_t v) {
  check(api_.duckdb_append_int64(appender_, v), "append");
  return *this;
}
DuckDb::Appender& DuckDb::Appender::u8(std::uint8_t v) {
  check(api_.duckdb_append_uint8(appender_, v), "append");
  return *this;
}
DuckDb::Appender& DuckDb::Appender::u32(std::uint32_t v) {
  check(api_.duckdb_append_uint32(appender_, v), "append");
  return *this;
}
DuckDb::Appender& DuckDb::Appender::u64(std::uint64_t v) {
  check(api_.duckdb_append_uint64(appender_, v), "append");
  return *this;
}
DuckDb::Appender& DuckDb::Appender::boolean(bool v) {
  check(api_.duckdb_append_bool(appender_, v), "append");
  return *this;
}
DuckDb::Appender& DuckDb::Appender::text(std::string_view v) {
  check(api_.duckdb_append_varchar_length(appender_, v.data(), v.size()), "append");
  return *this;
}
DuckDb::Appender& DuckDb::Appender::null() {
  check(api_.duckdb_append_null(appender_), "append");
  return *this;
}
void DuckDb::Appender::end_row() { check(api_.duckdb_appender_end_row(appender_), "a row"); }
void DuckDb::Appender::flush() { check(api_.duckdb_appender_flush(appender_), "the flush"); }
void DuckDb::Appender::close() { check(api_.duckdb_appender_close(appender_), "the close"); }

}  // namespace vramtrace
