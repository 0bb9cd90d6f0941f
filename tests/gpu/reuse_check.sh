#!/usr/bin/env bash
# GPU step `reuse` of scripts/gpu-check.sh: what a program can see of the shim's cache.
#  1. Pointer queries (pointer_check.cu): every block answers as its own driver allocation, the
#     answers equal a native run's, a memset of the reported size spares the neighbours, IPC of a
#     segment's first block works end to end, and a block inside a segment is refused.
#  2. Reuse safety (reuse_check.cu, record_stream_check.py): a buffer freed while another stream
#     still reads it and reallocated at once, TRIALS trials (default 20) natively and under each
#     reuse policy (the writer on the legacy stream, on another stream, and on another stream with
#     stream-ordered memory given back by a plain cudaFree). Every policy that claims cudaFree's guarantee (lazy_sync, device_sync, lazy_barrier) must give
#     0 wrong; stream_ordered's figure is printed as what it is for (one-stream programs).
#  3. numba's device_memory_size pattern (cuMemGetAddressRange, then a memset), where numba is
#     installed.
#  4. Many threads allocating and freeing at once (threads_reuse_check.cu, built here with nvcc when
#     BUILD lacks it), traced under reuse:none (every allocation forwarded: the driver gives a freed
#     address to another thread at once), the default and expandable segments: `vramtrace summary`
#     must find no contradiction in the trace (Note [a free is recorded before it happens]).
# Usage: tests/gpu/reuse_check.sh BUILD OUT [TRIALS]; exit 1 when a row fails (summary.txt).
set -uo pipefail
B=${1:?build dir} OUT=${2:?out dir} TRIALS=${3:-20}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$OUT"
: >"$OUT/summary.txt"
SHIM=$B/shim/libvramtrace.so
fail=0
row() {  # verdict text
  printf '%-5s %s\n' "$1" "$2" | tee -a "$OUT/summary.txt"
  [[ $1 == FAIL ]] && fail=1
  return 0
}
verdict() { if "$@"; then echo PASS; else echo FAIL; fi; }

# 1. pointer queries
PC=$B/gpu/pointer_check
if [[ -x $PC ]]; then
  "$PC" >"$OUT/pointers.native.txt" 2>&1; rn=$?
  LD_PRELOAD=$SHIM "$PC" >"$OUT/pointers.shim.txt" 2>"$OUT/pointers.shim.err"; rs=$?
  VRAMTRACE_CONF=reuse:none LD_PRELOAD=$SHIM "$PC" >"$OUT/pointers.none.txt" 2>&1; rx=$?
  row "$(verdict test $rn -eq 0)" "pointer_check native: every check holds (exit $rn)"
  row "$(verdict test $rs -eq 0)" "pointer_check under the shim: every check holds, neighbours intact (exit $rs)"
  row "$(verdict diff -q <(grep '^answer' "$OUT/pointers.native.txt") <(grep '^answer' "$OUT/pointers.shim.txt"))" \
    "pointer_check: the shim's answers equal the driver's ($(grep -c '^answer' "$OUT/pointers.shim.txt") answers)"
  row "$(verdict grep -q '^ipc_b 1$' "$OUT/pointers.shim.txt")" "IPC of a block inside a cached segment refused (cudaErrorInvalidValue)"
  row "$(verdict grep -q '^ipc_b 0$' "$OUT/pointers.none.txt")" "IPC of the same block under reuse:none exported (exit $rx)"
  sed -n 1,40p "$OUT/pointers.native.txt" "$OUT/pointers.shim.txt"
else
  row FAIL "no $PC (scripts/gpu-check.sh carry builds it)"
fi

# 2. reuse safety
RC=$B/gpu/reuse_check
run_policy() {  # label env...
  local label=$1; shift
  env "$@" "$RC" "$TRIALS" >"$OUT/reuse.$label.txt" 2>&1 || echo "exit $?" >>"$OUT/reuse.$label.txt"
}
if [[ -x $RC ]]; then
  run_policy native
  for p in lazy_sync device_sync lazy_barrier stream_ordered; do run_policy "$p" LD_PRELOAD="$SHIM" VRAMTRACE_CONF=reuse:$p; done
  for label in native lazy_sync device_sync lazy_barrier stream_ordered; do
    for w in legacy side async; do
      line=$(grep "^$w wrong" "$OUT/reuse.$label.txt" || echo "$w: no result ($(tail -1 "$OUT/reuse.$label.txt"))")
      what="writer on the $w stream"
      [[ $w == async ]] && what="stream-ordered memory given back by cudaFree, writer on its stream"
      if [[ $label == stream_ordered ]]; then
        row INFO "CUDA free+reallocate, $what, $label: $line (no guarantee across streams)"
      elif ! grep -q "^$w wrong 0 of $TRIALS" "$OUT/reuse.native.txt" && [[ $w == async ]]; then
        row INFO "CUDA free+reallocate, $what, $label: $line (not guaranteed natively)"
      else
        row "$(verdict grep -q "^$w wrong 0 of $TRIALS" "$OUT/reuse.$label.txt")" "CUDA free+reallocate, $what, $label: $line"
      fi
    done
  done
  # The first work on another stream, after blocks were reused at once on the legacy stream: one
  # fresh process per trial (the switch happens once per process).
  for label in native lazy_sync device_sync lazy_barrier; do
    wrong=0 same=0 ran=0
    for ((t = 0; t < TRIALS; t++)); do
      if [[ $label == native ]]; then out=$("$RC" switch 2>&1); else out=$(LD_PRELOAD="$SHIM" VRAMTRACE_CONF=reuse:$label "$RC" switch 2>&1); fi
      echo "$out" >>"$OUT/switch.$label.txt"
      [[ $out =~ switch\ wrong\ ([01])\ \(same\ address\ ([01])\) ]] || continue
      ran=$((ran + 1)) wrong=$((wrong + BASH_REMATCH[1])) same=$((same + BASH_REMATCH[2]))
    done
    row "$(verdict test "$ran:$wrong" = "$TRIALS:0")" \
      "CUDA first work on a second stream after a reuse on the legacy stream, $label: wrong $wrong of $ran (same address $same)"
  done
else
  row FAIL "no $RC (scripts/gpu-check.sh carry builds it)"
fi
RS=$here/record_stream_check.py
if python3 -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
  rs_run() {  # label env...
    local label=$1; shift
    env "$@" python3 "$RS" "$TRIALS" >"$OUT/record_stream.$label.txt" 2>&1 || echo "exit $?" >>"$OUT/record_stream.$label.txt"
    local line; line=$(grep '^record_stream wrong' "$OUT/record_stream.$label.txt" || tail -1 "$OUT/record_stream.$label.txt")
    if [[ $label == tensor_stream_ordered ]]; then
      row INFO "PyTorch record_stream, $label: $line (no guarantee across streams)"
    else
      row "$(verdict grep -q "^record_stream wrong 0 of $TRIALS" "$OUT/record_stream.$label.txt")" "PyTorch record_stream, $label: $line"
    fi
  }
  rs_run native
  rs_run native_uncached PYTORCH_NO_CUDA_MEMORY_CACHING=1
  rs_run shim_front LD_PRELOAD="$SHIM"
  for p in lazy_sync device_sync lazy_barrier stream_ordered; do
    rs_run "tensor_$p" LD_PRELOAD="$SHIM" PYTORCH_NO_CUDA_MEMORY_CACHING=1 VRAMTRACE_CONF=reuse:$p
  done
else
  row SKIP "PyTorch with CUDA not available: record_stream rows not run"
fi

# 3. numba
if python3 -c 'import numba.cuda' 2>/dev/null; then
  cat >"$OUT/numba_pinned.py" <<'PY'
import numpy as np
from numba import cuda
from numba.cuda.cudadrv import driver
for _ in range(3):
    ary = cuda.pinned_array(10, dtype=np.uint32)
    ary.fill(123)
    keep = cuda.to_device(np.full(1000, 7, dtype=np.uint32))  # a neighbour in the same segment
    devary = cuda.to_device(ary)
    driver.device_memset(devary, 0, driver.device_memory_size(devary))
    devary.copy_to_host(ary)
    assert all(ary == 0), ary
    assert (keep.copy_to_host() == 7).all(), "neighbour overwritten"
print("numba ok")
PY
  LD_PRELOAD=$SHIM python3 "$OUT/numba_pinned.py" >"$OUT/numba.txt" 2>&1
  row "$(verdict grep -q '^numba ok' "$OUT/numba.txt")" "numba: device_memory_size + memset under the shim ($(tail -1 "$OUT/numba.txt"))"
else
  row SKIP "numba-cuda not installed: numba row not run"
fi

# 4. threads: the trace of concurrent frees and reallocations holds no contradiction
TC=$B/gpu/threads_reuse_check
if [[ ! -x $TC ]] && command -v nvcc >/dev/null; then
  TC=$OUT/threads_reuse_check
  nvcc -O2 -std=c++17 "$here/threads_reuse_check.cu" -o "$TC" >"$OUT/threads.build.txt" 2>&1 || TC=
fi
if [[ -n $TC && -x $TC ]]; then
  for conf in reuse:none "" expandable_segments:True; do
    d=$OUT/threads.${conf:-default}
    d=${d//:/_}
    mkdir -p "$d"
    VRAMTRACE_CONF=$conf LD_PRELOAD=$SHIM VRAMTRACE_OUTPUT=$d/trace.jsonl "$TC" 16 3000 >"$d/out.txt" 2>&1
    rc=$?
    LD_LIBRARY_PATH=$B/lib "$B/bin/vramtrace" summary --json "$d/trace.jsonl" >"$d/summary.json" 2>"$d/summary.err"
    notes=$(python3 -c 'import json,sys
t = json.load(open(sys.argv[1]))["traces"][0]
n = t.get("notes", []) + [x for d in t.get("devices", []) for x in d.get("notes", [])]
print(len([x for x in n if "layout is kept" not in x]))' "$d/summary.json" 2>/dev/null || echo "unreadable")
    row "$(verdict test "$rc:$notes" = 0:0)" \
      "16 threads allocating and freeing, VRAMTRACE_CONF=${conf:-(default)}: exit $rc, notes on the trace: $notes"
  done
else
  row SKIP "no nvcc to build threads_reuse_check: threads row not run"
fi
exit $fail
