#!/usr/bin/env bash
# Interleaved step-time benchmarks of libvramtrace.so on the GPU machine (issues 3 and 4): native
# PyTorch, the shim in front of PyTorch's allocator, tensor mode under each reuse policy, and tensor
# mode with full tracing. Uses the libvramtrace.so staged by scripts/gpu-carry.sh.
#
# Usage: VRAMTRACE_BUILD_DIR=.carry/build scripts/gpu-bench.sh [--rounds N] [--budget S] [--models gpt2,llama]
#   OUT  where gpu-bench.md/.json and the logs go (default ./gpu-bench-out)
# Exit 77 (ctest's skip code) when no GPU is present.
set -u
cd "$(dirname "$0")/.."
if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
  echo "gpu-bench: no GPU on this machine: skipped"
  exit 77
fi
exec python3 tests/gpu/gpu_bench.py "$@"
