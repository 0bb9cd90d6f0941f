# The trace writer (issue 4): a static library of plain C++20 and pthreads, compiled with hidden
# visibility so that it can be linked into libvramtrace.so without exporting anything.
# Included from shim/CMakeLists.txt (and from tests/trace when the shim is not built).
# zstd is linked statically and its symbols are kept out of the shared object's dynamic symbol
# table (--exclude-libs), so the shim gets no new NEEDED entry and exports no ZSTD_* names.
if(TARGET vramtrace_trace_writer)
  return()
endif()
add_library(vramtrace_trace_writer STATIC
  ${CMAKE_CURRENT_LIST_DIR}/src/trace_format.cpp
  ${CMAKE_CURRENT_LIST_DIR}/src/trace_output.cpp
  ${CMAKE_CURRENT_LIST_DIR}/src/trace_writer.cpp
)
target_include_directories(vramtrace_trace_writer PUBLIC ${CMAKE_CURRENT_LIST_DIR}/src)
target_link_libraries(vramtrace_trace_writer PUBLIC vramtrace_allocator Threads::Threads
                                             PRIVATE zstd::libzstd_static)
target_link_options(vramtrace_trace_writer INTERFACE "LINKER:--exclude-libs,libzstd.a")
set_target_properties(vramtrace_trace_writer PROPERTIES CXX_VISIBILITY_PRESET hidden VISIBILITY_INLINES_HIDDEN ON
                                                        POSITION_INDEPENDENT_CODE ON)
target_compile_options(vramtrace_trace_writer PRIVATE -O2)
