#!/usr/bin/env bash
# Builds what scripts/gpu-compat.sh needs on the GPU machine (libvramtrace.so and the nvcc check
# programs) here, on the CPU machine, and stages it in .carry/build (git-ignored, a few MiB), so
# that the GPU run carries only that folder:
#   scripts/gpu-carry.sh            # then, on the GPU machine (carry: .carry):
#   VRAMTRACE_BUILD_DIR=.carry/build scripts/gpu-compat.sh
set -euo pipefail
cd "$(dirname "$0")/.."
build=${VRAMTRACE_GPU_BUILD:-build-gpu}
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DVRAMTRACE_BUILD_BENCH=OFF -DVRAMTRACE_BUILD_TESTS=ON >/dev/null
cmake --build "$build" -j2 --target vramtrace_shim vramtrace_gpu_programs
rm -rf .carry/build
mkdir -p .carry/build/shim .carry/build/gpu
cp "$build/shim/libvramtrace.so" .carry/build/shim/
cp "$build"/gpu/alloc_check_static "$build"/gpu/alloc_check_shared .carry/build/gpu/
# the counting probe of tests/gpu/count_probe.c (plain C, glibc only)
cc -O2 -shared -fPIC -o .carry/build/gpu/count_probe.so tests/gpu/count_probe.c -ldl
du -sh .carry/build
