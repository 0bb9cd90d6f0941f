#!/usr/bin/env bash
# Builds vramtrace and runs the whole test suite: the normal build, then the address and
# undefined-behaviour sanitizer build, then the thread sanitizer build, then a short run of every
# fuzz target (docs/reliability.md).
# Installs what it needs first (scripts/setup-deps.sh).
# GPU tests (ctest label "gpu") skip themselves where no GPU is present.
#
# Usage: scripts/test.sh [--quick]   (--quick: normal build only, no sanitizer pass)
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/setup-deps.sh --with-browser

jobs=$(nproc)
run_suite() {
  local preset=$1
  echo "== configure and build ($preset)"
  cmake --preset "$preset" >/dev/null
  cmake --build --preset "$preset" -j"$jobs"
  echo "== test ($preset)"
  ctest --preset "$preset" -j"$jobs"
}

run_suite default
if [[ "${1:-}" != "--quick" ]]; then
  # The sanitizer pass runs a shorter random sequence: the instrumented allocator is ~10x slower.
  # verify_asan_link_order=0: `vramtrace run` tests preload a library into sanitized children.
  ASAN_OPTIONS=verify_asan_link_order=0 VRAMTRACE_RANDOM_STEPS=300000 run_suite asan
  # Thread sanitizer on everything but the shim (which is never built with a sanitizer: it is
  # preloaded into other programs): the allocator, the trace writer and reader, the reporter.
  # Left out for the TSan runtime's own limits (docs/reliability.md, "Sanitizers"): the two fork
  # cases of the trace writer (the child starts threads after a multithreaded fork, which TSan
  # does not support); the `vramtrace run` suite (test_trace_run) is not built under TSan at all:
  # it preloads a library into /bin/sh and python3, and TSan's runtime must be the first library
  # a process loads (tests/trace/CMakeLists.txt).
  echo "== configure and build (tsan)"
  cmake --preset tsan >/dev/null
  cmake --build --preset tsan -j"$jobs"
  echo "== test (tsan)"
  VRAMTRACE_RANDOM_STEPS=20000 VRAMTRACE_THREAD_OPS=200 ctest --preset tsan -j"$jobs" \
    -E '^(fork and exec give one complete file per process|a fork child without %p in the name gets -<pid> added)$'
  # Short fuzzing: the clang build of the libFuzzer executables only (target fuzz_engines; the
  # replay of the committed corpora already ran in both builds above), then every target for
  # VRAMTRACE_CI_FUZZ_SECONDS (default 15) from the committed corpus and seeds, $jobs at a time.
  # A finding fails CI; its input is under build-fuzz/fuzz-work/out/crashes/.
  echo "== fuzz (${VRAMTRACE_CI_FUZZ_SECONDS:-15} s per target)"
  scripts/fuzz.sh "${VRAMTRACE_CI_FUZZ_SECONDS:-15}" --jobs "$jobs"
fi
