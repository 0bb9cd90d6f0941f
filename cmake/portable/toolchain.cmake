# Portable build: this machine's GCC with the C library of an older root file system, so that
# libvramtrace.so and the vramtrace command load on any glibc from that root's version up
# (docs/install.md, "Portable binaries"). VRAMTRACE_SYSROOT names the root (scripts/portable.sh
# makes a Debian 11 one, glibc 2.31). GCC's own C++ headers and static runtime stay the
# compiler's; glibc's headers, crt files and libraries come from the root.
if(NOT DEFINED VRAMTRACE_SYSROOT OR VRAMTRACE_SYSROOT STREQUAL "")
  set(VRAMTRACE_SYSROOT "$ENV{VRAMTRACE_SYSROOT}")
endif()
if(VRAMTRACE_SYSROOT STREQUAL "" OR NOT EXISTS "${VRAMTRACE_SYSROOT}/usr/include/stdio.h")
  message(FATAL_ERROR "portable build: VRAMTRACE_SYSROOT must name a root file system with libc6-dev "
                      "(scripts/portable.sh makes one); got '${VRAMTRACE_SYSROOT}'")
endif()
# Kept in the cache so that try_compile projects and reconfigures see the same root.
set(VRAMTRACE_SYSROOT "${VRAMTRACE_SYSROOT}" CACHE PATH "Root file system whose glibc the portable build links against")
set(CMAKE_TRY_COMPILE_PLATFORM_VARIABLES VRAMTRACE_SYSROOT)

set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR x86_64)
set(CMAKE_SYSROOT "${VRAMTRACE_SYSROOT}")
set(CMAKE_C_COMPILER gcc)
set(CMAKE_CXX_COMPILER g++)

# GCC's library search adds the host's multiarch directory by a relative path that --sysroot does
# not rewrite; naming the root's first keeps the host's libc.so (a newer glibc) out of every link.
set(_vt_libdir "${VRAMTRACE_SYSROOT}/usr/lib/x86_64-linux-gnu")
string(JOIN " " _vt_link_flags "-B${_vt_libdir}" "-L${_vt_libdir}" "-static-libstdc++" "-static-libgcc" "-pthread")
set(CMAKE_EXE_LINKER_FLAGS_INIT "${_vt_link_flags}")
set(CMAKE_SHARED_LINKER_FLAGS_INIT "${_vt_link_flags}")
set(CMAKE_MODULE_LINKER_FLAGS_INIT "${_vt_link_flags}")

# Libraries and headers from the root only; programs (python3, the CUDA toolkit) from the host.
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)

set(VRAMTRACE_PORTABLE ON CACHE BOOL "Portable build (cmake/portable)" FORCE)
