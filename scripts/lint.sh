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
    # --Werror turns clang-format's findings into "error: code should be clang-formatted".
    n=$(grep -cE '(warning|error):' /tmp/vramtrace-format.$$ || true)
    echo "lint: clang-format would change $n places (scripts/lint.sh --fix):"
    { grep -E '(warning|error):' /tmp/vramtrace-format.$$ || true; } | cut -d: -f1 | sort | uniq -c | head -40
    status=1
  fi
  rm -f /tmp/vramtrace-format.$$
fi

[[ -f build/compile_commands.json ]] || cmake --preset default >/dev/null
# clang-tidy cannot read gcc's precompiled headers: a copy of the compile database without them
# (every source includes what the precompiled header holds itself).
tidy_db=$(mktemp -d /tmp/vramtrace-tidy-db.XXXXXX)
trap 'rm -rf "$tidy_db"' EXIT
python3 - build/compile_commands.json "$tidy_db/compile_commands.json" <<'PY'
import json, re, sys
entries = json.load(open(sys.argv[1]))
for e in entries:
    e["command"] = re.sub(r" -Winvalid-pch| -include \S*cmake_pch\.hxx", "", e["command"])
json.dump(entries, open(sys.argv[2], "w"))
PY
mapfile -t sources < <(git ls-files 'allocator/*.cpp' 'trace/*.cpp' 'shim/*.cpp' 'reporter/*.cpp')
if ! run-clang-tidy-14 -quiet -p "$tidy_db" -j "$(nproc)" "${sources[@]/#/$PWD/}" >/tmp/vramtrace-tidy.$$ 2>&1; then
  grep -E 'warning:|error:' /tmp/vramtrace-tidy.$$ | sort -u | head -60
  echo "lint: clang-tidy reported findings"
  status=1
fi
rm -f /tmp/vramtrace-tidy.$$
((status == 0)) && echo "lint: clean"
exit $status
