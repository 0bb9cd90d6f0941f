#!/usr/bin/env bash
# GPU compatibility and benchmark run of libvramtrace.so (issue 3), on the GPU machine.
# Builds nothing except the nvcc check program when the build directory lacks it; uses the
# libvramtrace.so of a build directory made on the CPU machine and carried over.
#
# Usage: scripts/gpu-compat.sh [--ctest] [--budget SECONDS] [--build DIR]
#   VRAMTRACE_BUILD_DIR  build directory (default: the first of build, build-release, build-shim
#                        that holds shim/libvramtrace.so)
#   OUT                  where the table (gpu-compat.md/.json) and logs go (default ./gpu-compat-out)
# Exit 77 (ctest's skip code) when no GPU is present.
set -u
cd "$(dirname "$0")/.."
if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
  echo "gpu-compat: no GPU on this machine: skipped"
  exit 77
fi
exec python3 tests/gpu/gpu_compat.py "$@"
