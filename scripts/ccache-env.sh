# Sourced by scripts/test.sh and scripts/portable.sh: ccache as the compiler launcher when it is
# installed, with the checkout ($1) as its base directory so that a fresh clone elsewhere reuses
# the cache. Sets the array `launcher` (CMake arguments; empty without ccache) and exports the
# CCACHE_* settings the caller has not set.
launcher=()
if command -v ccache >/dev/null; then
  launcher=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
  # Paths under the checkout are hashed relative to it; the command's precompiled header needs
  # the two sloppiness settings that ccache documents for precompiled headers.
  export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$1}
  export CCACHE_SLOPPINESS=${CCACHE_SLOPPINESS:-pch_defines,time_macros,include_file_mtime,include_file_ctime}
  # Debug-info builds (-g) hash the working directory by default, so a clone elsewhere would miss
  # every entry: the debug information's compilation directory may be another checkout's.
  export CCACHE_NOHASHDIR=${CCACHE_NOHASHDIR:-true}
fi
