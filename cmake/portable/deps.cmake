# Third-party code for the portable build (cmake/portable/toolchain.cmake): nothing shared beyond
# glibc. zlib and zstd are the root file system's static archives (built against its glibc);
# fmt, spdlog, CLI11, nlohmann-json and Catch2 are header-only and taken from the host's
# /usr/include through a directory that holds only them, because /usr/include as a whole would
# put the host's newer glibc headers before the root's; simdjson is compiled from its release
# source (VRAMTRACE_SIMDJSON_SOURCE, fetched and checked by scripts/portable.sh). ISA-L and
# libdw are left out: gzip is read with zlib, and native frames get names without source lines.

set(VRAMTRACE_SIMDJSON_SOURCE "$ENV{VRAMTRACE_SIMDJSON_SOURCE}" CACHE PATH "simdjson release source (has singleheader/)")
if(NOT EXISTS "${VRAMTRACE_SIMDJSON_SOURCE}/singleheader/simdjson.cpp")
  message(FATAL_ERROR "portable build: VRAMTRACE_SIMDJSON_SOURCE must name simdjson's release source "
                      "(scripts/portable.sh fetches it); got '${VRAMTRACE_SIMDJSON_SOURCE}'")
endif()

find_package(Threads REQUIRED)

set(_vt_root_lib "${CMAKE_SYSROOT}/usr/lib/x86_64-linux-gnu")
foreach(_vt_lib IN ITEMS libz.a libzstd.a)
  if(NOT EXISTS "${_vt_root_lib}/${_vt_lib}")
    message(FATAL_ERROR "portable build: ${_vt_root_lib}/${_vt_lib} is missing (zlib1g-dev, libzstd-dev in the root)")
  endif()
endforeach()
add_library(ZLIB::ZLIB STATIC IMPORTED)
set_target_properties(ZLIB::ZLIB PROPERTIES IMPORTED_LOCATION "${_vt_root_lib}/libz.a")
add_library(zstd::libzstd_static STATIC IMPORTED)
set_target_properties(zstd::libzstd_static PROPERTIES IMPORTED_LOCATION "${_vt_root_lib}/libzstd.a")

set(_vt_overlay "${CMAKE_BINARY_DIR}/portable-include")
file(MAKE_DIRECTORY "${_vt_overlay}")
foreach(_vt_dir IN ITEMS fmt spdlog CLI nlohmann catch2)
  if(NOT IS_DIRECTORY "/usr/include/${_vt_dir}")
    message(FATAL_ERROR "portable build: /usr/include/${_vt_dir} is missing (scripts/setup-deps.sh installs it)")
  endif()
  file(CREATE_LINK "/usr/include/${_vt_dir}" "${_vt_overlay}/${_vt_dir}" SYMBOLIC)
endforeach()

add_library(vt_portable_headers INTERFACE)
target_include_directories(vt_portable_headers SYSTEM INTERFACE "${_vt_overlay}")
add_library(nlohmann_json::nlohmann_json ALIAS vt_portable_headers)
add_library(CLI11::CLI11 ALIAS vt_portable_headers)
add_library(Catch2::Catch2 ALIAS vt_portable_headers)
add_library(fmt::fmt-header-only INTERFACE IMPORTED)
set_target_properties(fmt::fmt-header-only PROPERTIES INTERFACE_LINK_LIBRARIES vt_portable_headers
                                                      INTERFACE_COMPILE_DEFINITIONS FMT_HEADER_ONLY=1)
add_library(fmt::fmt ALIAS fmt::fmt-header-only)
add_library(spdlog::spdlog_header_only INTERFACE IMPORTED)
set_target_properties(spdlog::spdlog_header_only PROPERTIES
                      INTERFACE_INCLUDE_DIRECTORIES "${_vt_overlay}"
                      INTERFACE_LINK_LIBRARIES fmt::fmt-header-only
                      INTERFACE_COMPILE_DEFINITIONS "SPDLOG_HEADER_ONLY;SPDLOG_FMT_EXTERNAL")
add_library(spdlog::spdlog ALIAS spdlog::spdlog_header_only)

add_library(vt_simdjson STATIC "${VRAMTRACE_SIMDJSON_SOURCE}/singleheader/simdjson.cpp")
target_include_directories(vt_simdjson SYSTEM PUBLIC "${VRAMTRACE_SIMDJSON_SOURCE}/singleheader")
target_compile_options(vt_simdjson PRIVATE -O3 -w)
add_library(simdjson::simdjson ALIAS vt_simdjson)

# The three glibc symbols newer than the root's that GCC's static C++ runtime needs
# (glibc_compat.c says which and why), compiled now and linked into every binary after its own
# objects, with libdl for its dlvsym.
set(_vt_compat "${CMAKE_BINARY_DIR}/portable-glibc-compat.o")
execute_process(COMMAND ${CMAKE_C_COMPILER} --sysroot=${CMAKE_SYSROOT} -O2 -fPIC -Wall -Wextra -Werror
                        -c "${CMAKE_CURRENT_LIST_DIR}/glibc_compat.c" -o "${_vt_compat}"
                RESULT_VARIABLE _vt_rc ERROR_VARIABLE _vt_err)
if(NOT _vt_rc EQUAL 0)
  message(FATAL_ERROR "portable build: cmake/portable/glibc_compat.c did not compile: ${_vt_err}")
endif()
# Normal variables, not the cache: a reconfigure must not append them twice.
set(CMAKE_C_STANDARD_LIBRARIES "${CMAKE_C_STANDARD_LIBRARIES} ${_vt_compat} -ldl")
set(CMAKE_CXX_STANDARD_LIBRARIES "${CMAKE_CXX_STANDARD_LIBRARIES} ${_vt_compat} -ldl")

# catch_discover_tests() from the host's Catch2 package (CMake code, not linked into anything).
find_path(VRAMTRACE_CATCH_CMAKE_DIR Catch.cmake PATHS /usr/lib/cmake/Catch2 /usr/share/cmake/Catch2 /usr/lib/x86_64-linux-gnu/cmake/Catch2
          NO_DEFAULT_PATH NO_CMAKE_FIND_ROOT_PATH)
if(VRAMTRACE_CATCH_CMAKE_DIR)
  list(APPEND CMAKE_MODULE_PATH "${VRAMTRACE_CATCH_CMAKE_DIR}")
endif()
