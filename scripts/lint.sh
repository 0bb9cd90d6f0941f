#!/usr/bin/env bash
# Lint of the project's own C++ sources: clang-format (.clang-format) and clang-tidy (.clang-tidy).
# Usage: scripts/lint.sh [--check | --fix]
#   --check  (default) exit 1 if clang-format would change a line or clang-tidy reports a finding
#   --fix    reformat every file in place (clang-tidy findings are only reported)
# clang-tidy reads build/compile_commands.json (configured with the default preset if absent) and
# runs over the product sources (allocator/, trace/, shim/, reporter/), as many at once as there
# are cores.
set -euo pipefail
cd "$(dirname "$0")/.."
mode=${1:---check}
case $mode in --check|--fix) ;; *) echo "lint.sh: usage: scripts/lint.sh [--check|--fix]" >&2; exit 2 ;; esac

mapfile -t files < <(git ls-files '*.cpp' '*.h' '*.cu' '*.c' | grep -v '^tests/data/')
status=0
if [[ $mode == --fix ]]; then
  clang-format -i "${files[@]}"
else
  if ! clang-format --dry-run --Werror "${files[@]}" 2>/tmp/vramtrace-format.$$; then
    n=$(grep -c 'warning:' /tmp/vramtrace-format.$$ || true)
    echo "lint: clang-format would change $n places (scripts/lint.sh --fix):"
    grep 'warning:' /tmp/vramtrace-format.$$ | cut -d: -f1 | sort | uniq -c | head -40
    status=1
  fi
  rm -f /tmp/vramtrace-format.$$
fi

[[ -f build/compile_commands.json ]] || cmake --preset default >/dev/null
mapfile -t sources < <(git ls-files 'allocator/*.cpp' 'trace/*.cpp' 'shim/*.cpp' 'reporter/*.cpp')
if ! run-clang-tidy-14 -quiet -p build -j "$(nproc)" "${sources[@]/#/$PWD/}" >/tmp/vramtrace-tidy.$$ 2>&1; then
  grep -E 'warning:|error:' /tmp/vramtrace-tidy.$$ | sort -u | head -60
  echo "lint: clang-tidy reported findings"
  status=1
fi
rm -f /tmp/vramtrace-tidy.$$
((status == 0)) && echo "lint: clean"
exit $status
