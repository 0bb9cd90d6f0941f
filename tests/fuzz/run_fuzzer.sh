#!/usr/bin/env bash
# Fuzzes one libFuzzer target for a while (ctest "fuzz: <name>", scripts/fuzz.sh).
#
# Usage: run_fuzzer.sh BINARY NAME WORKDIR MAX_LEN "EXTRA_FLAGS" CORPUS_DIR...
# Seconds: $VRAMTRACE_FUZZ_SECONDS (default 20). $VRAMTRACE_FUZZ_FORK=K (K >= 1, long runs of
# scripts/fuzz.sh): libFuzzer's fork mode with K worker processes that goes on after a finding
# (-ignore_crashes/-ignore_timeouts/-ignore_ooms), so that a 30-minute run collects every finding
# instead of stopping at the first. New inputs go to WORKDIR/corpus (never into the
# source tree; `scripts/fuzz.sh --merge` folds useful ones into tests/fuzz/corpus/NAME). A finding
# is saved under WORKDIR/artifacts/ and makes this script fail: copy it to
# tests/fuzz/regressions/NAME/, fix the bug, and the replay test keeps it fixed.
set -euo pipefail
bin=$1 name=$2 work=$3 max_len=$4 dict=$5
shift 5
seconds=${VRAMTRACE_FUZZ_SECONDS:-20}
rm -rf "$work/artifacts"
mkdir -p "$work/corpus" "$work/artifacts"
args=(-max_total_time="$seconds" -max_len="$max_len" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1
      -artifact_prefix="$work/artifacts/")
read -ra extra <<<"$dict"
# libFuzzer's -detect_leaks=0 covers the fuzzing loop only; LeakSanitizer's check at exit needs this.
if [[ "$dict" == *detect_leaks=0* ]]; then
  export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
fi
args+=("${extra[@]}")
fork=${VRAMTRACE_FUZZ_FORK:-0}
if ((fork >= 1)); then
  args+=(-fork="$fork" -ignore_crashes=1 -ignore_timeouts=1 -ignore_ooms=1)
fi
status=0
"$bin" "${args[@]}" "$work/corpus" "$@" >"$work/log.txt" 2>&1 || status=$?
grep -E '^stat::|^#[0-9]+.*(DONE|cov:)' "$work/log.txt" | tail -n 12 || true
# In fork mode libFuzzer goes on after a finding; the inputs it saved are the verdict.
findings=$(find "$work/artifacts" -type f | wc -l)
if ((status == 0 && findings > 0)); then status=1; fi
if ((status != 0)); then
  echo "fuzz: $name: FINDING (exit $status); last lines of $work/log.txt:"
  tail -n 60 "$work/log.txt"
  echo "fuzz: $name: inputs in $work/artifacts/: copy them to tests/fuzz/regressions/$name/"
  exit 1
fi
echo "fuzz: $name: no finding in ${seconds}s"
