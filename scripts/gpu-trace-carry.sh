#!/usr/bin/env bash
# Stages what scripts/gpu-trace-check.sh needs on the GPU machine (issue 4, Done-when 3): the
# `vramtrace` command, libvramtrace.so beside it (../lib, where `vramtrace run` looks), and the
# non-system shared libraries `vramtrace` needs, in .carry/trace (git-ignored):
#   scripts/gpu-trace-carry.sh          # here, on the CPU machine
#   scripts/gpu-trace-check.sh          # on the GPU machine, carrying .carry
set -euo pipefail
cd "$(dirname "$0")/.."
build=${VRAMTRACE_GPU_BUILD:-build-gpu}
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DVRAMTRACE_BUILD_BENCH=OFF >/dev/null
cmake --build "$build" -j2 --target vramtrace vramtrace_shim
rm -rf .carry/trace
mkdir -p .carry/trace/bin .carry/trace/lib
cp "$build/bin/vramtrace" .carry/trace/bin/
cp "$build/shim/libvramtrace.so" .carry/trace/lib/
# Libraries from Debian packages (simdjson, fmt, ...) that the GPU machine may not have.
ldd "$build/bin/vramtrace" | awk '/=> \// {print $3}' | while read -r lib; do
  case "$(basename "$lib")" in
    libc.so*|libm.so*|libstdc++.so*|libgcc_s.so*|ld-linux*|libpthread.so*|libdl.so*|librt.so*) ;;
    *) cp -L "$lib" .carry/trace/lib/ ;;
  esac
done
du -sh .carry/trace
