#!/usr/bin/env bash
# GPU validation of `vramtrace check --no-leaks` (step `leak` of scripts/gpu-check.sh; docs/ci.md):
# a PyTorch training loop with a deliberate 1 MiB-per-step leak is caught, the same loop without it
# passes. Two inputs:
#   1. PyTorch's own allocator history (tests/gpu/train_leak.py --out), no shim needed;
#   2. the shim's trace under `vramtrace run --tensors` (skipped when libvramtrace.so is absent).
# Usage: tests/gpu/leak_check.sh [BUILD_DIR] [OUT_DIR]     (BUILD_DIR default: build)
# Exit 0 when every expectation holds; prints each check's report.
set -uo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build}
out=${2:-${OUT:-/tmp/vramtrace-leak-check}}
vt=$build/bin/vramtrace
mkdir -p "$out"
fail=0

expect() {  # expect RC DESCRIPTION -- command...
  local want=$1 what=$2
  shift 3
  "$@" >"$out/last.txt" 2>&1
  local rc=$?
  cat "$out/last.txt"
  if [[ $rc -eq $want ]]; then
    echo "OK   $what (exit $rc)"
  else
    echo "FAIL $what (exit $rc, expected $want)"
    fail=1
  fi
}

python3 -c "import torch; assert torch.cuda.is_available()" || { echo "no CUDA PyTorch"; exit 2; }

echo "== 1. PyTorch's allocator history"
python3 tests/gpu/train_leak.py --steps 40 --out "$out/noleak.torchtrace.jsonl" || fail=1
python3 tests/gpu/train_leak.py --steps 40 --leak --out "$out/leak.torchtrace.jsonl" || fail=1
expect 0 "history: no leak passes --no-leaks" -- "$vt" check "$out/noleak.torchtrace.jsonl" --no-leaks --max-ooms 0
expect 1 "history: 1 MiB/step leak fails --no-leaks" -- "$vt" check "$out/leak.torchtrace.jsonl" --no-leaks
"$vt" check "$out/leak.torchtrace.jsonl" --no-leaks --format json >"$out/leak.check.json"
"$vt" check "$out/leak.torchtrace.jsonl" --no-leaks --format junit -o "$out/leak.junit.xml" >/dev/null
expect 0 "diff of the two runs" -- "$vt" diff "$out/noleak.torchtrace.jsonl" "$out/leak.torchtrace.jsonl"

echo "== 2. the shim's trace (vramtrace run --tensors)"
if [[ -e "$build/shim/libvramtrace.so" || -n "${VRAMTRACE_LIB:-}" ]]; then
  export PYTHONPATH="$PWD/python:${PYTHONPATH:-}"  # vramtrace_mark, as `pip install ./python` would
  "$vt" run --tensors -o "$out/noleak.vramtrace.jsonl" -- python3 tests/gpu/train_leak.py --steps 40 || fail=1
  "$vt" run --tensors -o "$out/leak.vramtrace.jsonl" -- python3 tests/gpu/train_leak.py --steps 40 --leak || fail=1
  expect 0 "shim: no leak passes --no-leaks" -- "$vt" check "$out/noleak.vramtrace.jsonl" --no-leaks
  expect 1 "shim: 1 MiB/step leak fails --no-leaks" -- "$vt" check "$out/leak.vramtrace.jsonl" --no-leaks
else
  echo "SKIP no libvramtrace.so in $build/shim (set VRAMTRACE_LIB)"
fi

[[ $fail -eq 0 ]] && echo "leak_check: all expectations hold" || echo "leak_check: FAILED"
exit $fail
