#!/usr/bin/env bash
# GPU check: the shim's own traces name code (native stacks and, where the allocating thread holds
# the GIL, Python frames). Each program runs under `vramtrace run --no-torch` (the device level),
# then `vramtrace summary` of its trace must name the program's own file among the top sites:
#   cupy   tests/gpu/cupy_check.py (CuPy's memory pool grows with cudaMalloc from Python calls)
#   torch  tests/gpu/torch_train.py --model gpt2-small (PyTorch's segments, device level)
#   cuda   gpu/alloc_check_static (nvcc, the CUDA runtime linked statically, no -g: native frames
#          with function names only; the carry builds it): the largest site is its own dmalloc or
#          main, not the runtime linked into it
#   jax    tests/gpu/jax_check.py (XLA allocates from its own threads: reported, not required)
# Usage: tests/gpu/device_sites_check.sh BUILD OUTDIR   (BUILD: a carry or build directory)
set -uo pipefail
B=$1 out=$2
mkdir -p "$out"
fail=0
check() {  # name, required pattern (extended regex), must (1) or report only (0), command...
  local name=$1 pattern=$2 must=$3
  shift 3
  "$B/bin/vramtrace" run --no-torch -o "$out/$name.%p.jsonl" -- "$@" >"$out/$name.run.out" 2>"$out/$name.run.err"
  local rc=$?
  local trace
  trace=$(ls "$out/$name".*.jsonl 2>/dev/null | head -1)
  if [[ -z $trace ]]; then
    echo "$name: run rc $rc, no trace"; tail -3 "$out/$name.run.err"
    ((must)) && fail=1
    return
  fi
  "$B/bin/vramtrace" summary --level device "$trace" >"$out/$name.summary.txt" 2>"$out/$name.summary.err"
  echo "$name: run rc $rc, summary rc $?"
  sed -n '/allocation sites/,/^$/p' "$out/$name.summary.txt" | head -14
  if grep -qE "$pattern" "$out/$name.summary.txt"; then
    echo "$name: PASS ($pattern named)"
  else
    echo "$name: $( ((must)) && echo FAIL || echo NOTE ): $pattern not named"
    ((must)) && fail=1
  fi
}
check cupy cupy_check.py 1 python3 tests/gpu/cupy_check.py
check torch torch_train.py 1 python3 tests/gpu/torch_train.py --model gpt2-small --steps 2 --warmup 0
if [[ -x "$B/gpu/alloc_check_static" ]]; then
  check cuda "^ +1 .*  (dmalloc|main)$" 1 "$B/gpu/alloc_check_static"
fi
check jax jax_check.py 0 python3 tests/gpu/jax_check.py
((fail == 0)) && echo "PASS: every required program's trace names its code"
exit $fail
