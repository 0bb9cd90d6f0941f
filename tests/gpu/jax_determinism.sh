#!/usr/bin/env bash
# Does the shim change what JAX computes? tests/gpu/jax_train.py trained natively (the determinism
# control: two runs), under the shim (default settings and reuse:none), each run dumping XLA's
# autotuning results, and under the shim loading the native run's autotuning results.
# Prints one row per run: identical to the first native run or not, and whether the autotuning
# choices were the same.
# Usage: tests/gpu/jax_determinism.sh BUILD OUT [STEPS]
set -uo pipefail
B=${1:?build dir} OUT=${2:?out dir} STEPS=${3:-20}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$OUT"
SHIM=$B/shim/libvramtrace.so
run() {  # label env...
  local label=$1; shift
  env "$@" python3 "$here/jax_train.py" "$STEPS" >"$OUT/$label.txt" 2>"$OUT/$label.err" || echo "exit $?" >>"$OUT/$label.txt"
}
dump() { echo "XLA_FLAGS=--xla_gpu_dump_autotune_results_to=$OUT/$1.autotune.textproto"; }
run native1 "$(dump native1)"
run native2 "$(dump native2)"
run shim1 LD_PRELOAD="$SHIM" "$(dump shim1)"
run shim2 LD_PRELOAD="$SHIM" "$(dump shim2)"
run shim_none LD_PRELOAD="$SHIM" VRAMTRACE_CONF=reuse:none "$(dump shim_none)"
run shim_platform LD_PRELOAD="$SHIM" XLA_PYTHON_CLIENT_ALLOCATOR=platform "$(dump shim_platform)"
run native_platform XLA_PYTHON_CLIENT_ALLOCATOR=platform "$(dump native_platform)"
if [[ -s $OUT/native1.autotune.textproto ]]; then
  run shim_loaded LD_PRELOAD="$SHIM" XLA_FLAGS="--xla_gpu_load_autotune_results_from=$OUT/native1.autotune.textproto"
fi
for f in "$OUT"/*.txt; do
  l=$(basename "$f" .txt)
  same=$(cmp -s <(grep '^loss' "$OUT/native1.txt") <(grep '^loss' "$f") && echo identical || echo DIFFERENT)
  first=$(diff <(grep '^loss' "$OUT/native1.txt") <(grep '^loss' "$f") | grep -m1 '^>' | awk '{print "first differing step " $3}')
  at=-
  [[ -s $OUT/$l.autotune.textproto ]] && at=$(cmp -s "$OUT/native1.autotune.textproto" "$OUT/$l.autotune.textproto" && echo "same autotuning" || echo "autotuning differs")
  printf '%-16s %-10s %-26s %s (%s steps, %s)\n' "$l" "$same" "${first:--}" "$at" "$(grep -c '^loss' "$f")" "$(head -1 "$f")"
done | tee "$OUT/summary.txt"
