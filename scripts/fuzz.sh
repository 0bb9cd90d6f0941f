#!/usr/bin/env bash
# Fuzzes every libFuzzer target of tests/fuzz for SECONDS each (default 20), one after another,
# in the clang build `build-fuzz` (preset "fuzz": address + undefined sanitizers, coverage).
# CI runs the short form; the scheduled long run is `scripts/fuzz.sh 1800 --merge`.
#
# Usage: scripts/fuzz.sh [SECONDS] [--merge] [TARGET...]
#   --merge   afterwards, fold the new inputs that add coverage into tests/fuzz/corpus/<target>/
#             (libFuzzer -merge=1) so that the next run starts from them; commit them.
#   TARGET    only these targets (names as in tests/fuzz/fuzz_<name>.cpp)
# A finding fails the run and is saved in build-fuzz/fuzz-work/<target>/artifacts/: copy it to
# tests/fuzz/regressions/<target>/ (replayed by ctest "fuzz-regressions: <target>" in every build).
# Figures of each run (executions, coverage) are printed; docs/reliability.md records them.
set -euo pipefail
cd "$(dirname "$0")/.."

seconds=20
merge=0
targets=()
for a in "$@"; do
  case $a in
    --merge) merge=1 ;;
    ''|*[!0-9]*) targets+=("$a") ;;
    *) seconds=$a ;;
  esac
done

scripts/setup-deps.sh
cmake --preset fuzz >/dev/null
cmake --build build-fuzz -j"$(nproc)" --target fuzz_all

regex="^fuzz: "
if ((${#targets[@]})); then
  regex="^fuzz: ($(IFS='|'; echo "${targets[*]}"))\$"
fi
status=0
log=build-fuzz/fuzz-run.log
VRAMTRACE_FUZZ_SECONDS=$seconds ctest --test-dir build-fuzz -L '^fuzz$' -R "$regex" -V >"$log" 2>&1 || status=$?
# Per target: libFuzzer's final figures and the verdict (the whole output is in $log).
grep -E '^[0-9]+: (stat::(number_of_executed_units|average_exec_per_sec|new_units_added|peak_rss_mb)|#[0-9]+ +DONE|fuzz: )' "$log" \
  | sed -E 's/^[0-9]+: //' || true
grep -E 'tests passed|FINDING' "$log" || true
if ((status != 0)); then
  echo "fuzz: FAILED: see $log and build-fuzz/fuzz-work/*/artifacts/"
fi

if ((merge)); then
  for work in build-fuzz/fuzz-work/*/; do
    name=$(basename "$work")
    [[ -x build-fuzz/tests/fuzz/fuzz_$name ]] || continue
    ((${#targets[@]})) && [[ " ${targets[*]} " != *" $name "* ]] && continue
    mkdir -p "tests/fuzz/corpus/$name"
    build-fuzz/tests/fuzz/fuzz_"$name" -merge=1 "tests/fuzz/corpus/$name" "$work/corpus" 2>&1 | grep -E "MERGE-OUTER: [0-9]+ new files" || true
  done
fi
exit $status
