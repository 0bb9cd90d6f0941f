#!/usr/bin/env bash
# GPU check: a PyTorch run killed with SIGKILL under the default `vramtrace run`. The shim's trace
# stays readable and the reports say how much of the tensor level is missing:
#   early  SIGKILL after some allocations, before any snapshot write: only the sidecar written when
#          recording started is there; `vramtrace summary` reads the trace at the device level and
#          says that all of the tensor level is missing
#   oom    an OOM under set_per_process_memory_fraction (caught), more allocations, then SIGKILL:
#          the OOM's snapshot is there; `summary` reads it and says that the tensor level ends at
#          that write
# Usage: tests/gpu/killed_check.sh BUILD OUTDIR   (BUILD: a carry or build directory)
set -uo pipefail
B=$1 out=$2
mkdir -p "$out"
fail=0
cat >"$out/early.py" <<'PY'
import os, signal, torch
xs = [torch.empty(64 << 20, dtype=torch.uint8, device="cuda") for _ in range(8)]
torch.cuda.synchronize()
os.kill(os.getpid(), signal.SIGKILL)
PY
cat >"$out/oom.py" <<'PY'
import os, signal, torch
torch.cuda.set_per_process_memory_fraction(0.02)
xs = []
try:
    while True:
        xs.append(torch.empty(256 << 20, dtype=torch.uint8, device="cuda"))
except torch.OutOfMemoryError:
    pass
del xs[-1]
ys = [torch.empty(1 << 20, device="cuda") for _ in range(4)]
torch.cuda.synchronize()
os.kill(os.getpid(), signal.SIGKILL)
PY
for name in early oom; do
  "$B/bin/vramtrace" run -o "$out/$name.jsonl" -- python3 "$out/$name.py" >"$out/$name.run.out" 2>"$out/$name.run.err"
  echo "$name: run rc $? (137 expected: the program's SIGKILL)"
  ls "$out" | grep "^$name\." | tr '\n' ' '; echo
  "$B/bin/vramtrace" summary "$out/$name.jsonl" >"$out/$name.summary.txt" 2>"$out/$name.summary.err"
  rc=$?
  echo "$name: summary rc $rc"; cat "$out/$name.summary.err"
  ((rc == 0)) || { echo "$name: FAIL: summary rc $rc"; fail=1; }
done
grep -q "all of the tensor level is missing" "$out/early.summary.err" && echo "early: PASS (missing tensor level said)" ||
  { echo "early: FAIL: no note of the missing tensor level"; fail=1; }
ls "$out"/early*.torch.pickle >/dev/null 2>&1 && { echo "early: FAIL: a pickle was written"; fail=1; }
grep -q 'ends at its last write ("oom"' "$out/oom.summary.err" && echo "oom: PASS (the tensor level's end said)" ||
  { echo "oom: FAIL: no note of where the tensor level ends"; fail=1; }
grep -q "CUDA OOMs: *1" "$out/oom.summary.txt" && echo "oom: PASS (1 OOM in the summary)" ||
  { echo "oom: FAIL: the summary does not count the OOM"; grep OOMs "$out/oom.summary.txt"; fail=1; }
((fail == 0)) && echo "PASS: killed runs say what is missing"
exit $fail
