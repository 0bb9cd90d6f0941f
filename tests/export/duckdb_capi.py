"""DuckDB's C API from libduckdb.so through ctypes: enough to run SQL and read its answers as text.

The tests use it rather than DuckDB's Python package so that they need only the library that
`vramtrace export --format parquet` loads itself (scripts/setup-deps.sh installs it)."""
import ctypes
import os


class DuckDbResult(ctypes.Structure):
    # duckdb.h's duckdb_result: passed by address, its layout fixed by DuckDB's stable C API.
    _fields_ = [("column_count", ctypes.c_uint64), ("row_count", ctypes.c_uint64),
                ("rows_changed", ctypes.c_uint64), ("columns", ctypes.c_void_p),
                ("error_message", ctypes.c_char_p), ("internal_data", ctypes.c_void_p)]


def default_library():
    """The library the command loads: $VRAMTRACE_DUCKDB, else the one setup-deps.sh installs."""
    if os.environ.get("VRAMTRACE_DUCKDB"):
        return os.environ["VRAMTRACE_DUCKDB"]
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(cache, "vramtrace", "duckdb", "1.5.6", "libduckdb.so")


class DuckDb:
    """An in-memory database and one connection. query() returns rows of strings (None for NULL)."""

    def __init__(self, library=None):
        lib = ctypes.CDLL(library or default_library())
        p = ctypes.c_void_p
        lib.duckdb_open.argtypes = [ctypes.c_char_p, ctypes.POINTER(p)]
        lib.duckdb_connect.argtypes = [p, ctypes.POINTER(p)]
        lib.duckdb_query.argtypes = [p, ctypes.c_char_p, ctypes.POINTER(DuckDbResult)]
        lib.duckdb_result_error.argtypes = [ctypes.POINTER(DuckDbResult)]
        lib.duckdb_result_error.restype = ctypes.c_char_p
        lib.duckdb_destroy_result.argtypes = [ctypes.POINTER(DuckDbResult)]
        lib.duckdb_column_count.argtypes = [ctypes.POINTER(DuckDbResult)]
        lib.duckdb_column_count.restype = ctypes.c_uint64
        lib.duckdb_row_count.argtypes = [ctypes.POINTER(DuckDbResult)]
        lib.duckdb_row_count.restype = ctypes.c_uint64
        lib.duckdb_column_name.argtypes = [ctypes.POINTER(DuckDbResult), ctypes.c_uint64]
        lib.duckdb_column_name.restype = ctypes.c_char_p
        lib.duckdb_value_is_null.argtypes = [ctypes.POINTER(DuckDbResult), ctypes.c_uint64, ctypes.c_uint64]
        lib.duckdb_value_is_null.restype = ctypes.c_bool
        lib.duckdb_value_varchar.argtypes = [ctypes.POINTER(DuckDbResult), ctypes.c_uint64, ctypes.c_uint64]
        lib.duckdb_value_varchar.restype = p
        lib.duckdb_free.argtypes = [p]
        self.lib = lib
        self.db = p()
        self.conn = p()
        if lib.duckdb_open(None, ctypes.byref(self.db)) != 0:
            raise RuntimeError("duckdb_open failed")
        if lib.duckdb_connect(self.db, ctypes.byref(self.conn)) != 0:
            raise RuntimeError("duckdb_connect failed")

    def query(self, sql):
        """(column names, rows): every value as DuckDB casts it to VARCHAR, None for NULL.
        Raises RuntimeError with DuckDB's message when the statement fails."""
        lib = self.lib
        res = DuckDbResult()
        state = lib.duckdb_query(self.conn, sql.encode(), ctypes.byref(res))
        try:
            if state != 0:
                raise RuntimeError((lib.duckdb_result_error(ctypes.byref(res)) or b"?").decode())
            cols = lib.duckdb_column_count(ctypes.byref(res))
            names = [lib.duckdb_column_name(ctypes.byref(res), c).decode() for c in range(cols)]
            rows = []
            for r in range(lib.duckdb_row_count(ctypes.byref(res))):
                row = []
                for c in range(cols):
                    if lib.duckdb_value_is_null(ctypes.byref(res), c, r):
                        row.append(None)
                        continue
                    v = lib.duckdb_value_varchar(ctypes.byref(res), c, r)
                    row.append(ctypes.string_at(v).decode())
                    lib.duckdb_free(v)
                rows.append(tuple(row))
            return names, rows
        finally:
            lib.duckdb_destroy_result(ctypes.byref(res))
