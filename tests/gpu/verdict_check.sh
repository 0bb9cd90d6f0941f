#!/usr/bin/env bash
# GPU check: the verdicts of `vramtrace oom` and `vramtrace replay` against the real program, on
# programs written to break them, and the recordings the CPU tests keep as fixtures.
#
# Per workload, under a cap (`vramtrace run --limit`):
#   - a run at the tensor level (the default `vramtrace run`: the shim's trace and PyTorch's
#     history) and a run at the segment level (`--no-torch`: the shim sees PyTorch's segments);
#   - `vramtrace tune --limit CAP --candidates ...`: the real outcome of every setting;
#   - `vramtrace oom --json` and `vramtrace replay --json --conf S...` of both recordings, with the
#     carried binary; tests/gpu/verdict_table.py compares every firm verdict with tune's outcome.
# Workloads:
#   bert   tests/gpu/bert_varlen.py --steps 12 under 16GiB: fragmentation (peak allocated about
#          13.8 GiB, reserved 22-25 GiB without a cap; expandable segments fit)
#   split  tests/gpu/split_waste.py under 14GiB: each weight split from a freed temporary's segment
#          (defaults run out; max_split_size_mb below the temporary and expandable segments fit)
#   frac   tests/gpu/split_waste.py under PyTorch's own per-process fraction (with_fraction.py, no
#          --limit): garbage_collection_threshold acts there, as it never does under --limit
#   gpt2   tests/gpu/torch_train.py --model gpt2 --steps 6 under 15GiB
# Also two runs killed by SIGKILL (tests/gpu/killed_step.py): mid-step and right after a step.
# Everything lands in OUT (traces, tune JSON, oom/replay JSON), and in one archive, written again
# after each workload: $VERDICT_TAR (default OUT/verdict-data.tar.gz).
# Usage: tests/gpu/verdict_check.sh BUILD OUT [WORKLOAD...]   (BUILD: a carry or build directory)
set -uo pipefail
B=$(realpath "$1") out=$(realpath -m "$2")
shift 2
VT="$B/bin/vramtrace"
export LD_LIBRARY_PATH="$B/lib:${LD_LIBRARY_PATH:-}"
export PYTHONPATH="$PWD/python${PYTHONPATH:+:$PYTHONPATH}"
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out"
tarball=${VERDICT_TAR:-$out/verdict-data.tar.gz}
workloads=("$@")
((${#workloads[@]})) || workloads=(split killed frac bert gpt2)
CANDS='expandable_segments:True;max_split_size_mb:20;max_split_size_mb:128;max_split_size_mb:512;roundup_power2_divisions:4;garbage_collection_threshold:0.6'

# name cap tune-limit-args... -- command...: both recordings, tune, then oom and replay of each.
one() {
  local name=$1 cap=$2
  shift 2
  local limit=()
  [[ $cap != none ]] && limit=(--limit "$cap")
  local d="$out/$name"
  mkdir -p "$d/tensor" "$d/segment"
  echo "== $name (cap $cap): $*"
  "$VT" run -q "${limit[@]}" -o "$d/tensor/$name.%p.jsonl.zst" -- "$@" >"$d/tensor.log" 2>&1
  echo "tensor-level run rc $?"
  "$VT" run -q --no-torch "${limit[@]}" -o "$d/segment/$name.%p.jsonl.zst" -- "$@" >"$d/segment.log" 2>&1
  echo "segment-level run rc $?"
  "$VT" tune --json "${limit[@]}" --candidates "$CANDS" --timeout 120 -o "$d/tune" -- "$@" \
    >"$d/tune.json" 2>"$d/tune.err"
  echo "tune rc $?"
  python3 - "$d/tune.json" <<'PY'
import json, sys
t = json.load(open(sys.argv[1]))
for r in t.get("runs", []):
    print(f"  {r.get('settings') or '(own)':<36} {r.get('result')}")
PY
  local lvl
  for lvl in tensor segment; do
    "$VT" oom --json "$d/$lvl" >"$d/oom.$lvl.json" 2>"$d/oom.$lvl.err"
    local confs=(--conf '')
    local IFS=';'
    for c in $CANDS; do confs+=(--conf "$c"); done
    unset IFS
    # replay takes one file: the tensor level's history, or the shim's trace.
    local f
    f=$(ls "$d/$lvl"/*.torch.pickle 2>/dev/null | head -1)
    [[ -n $f ]] || f=$(ls "$d/$lvl"/*.jsonl.zst 2>/dev/null | head -1)
    "$VT" replay --json "$f" "${confs[@]}" >"$d/replay.$lvl.json" 2>"$d/replay.$lvl.err"
  done
}

for w in "${workloads[@]}"; do
  case $w in
    split) one split 14GiB python3 "$here/split_waste.py" ;;
    bert) one bert 16GiB python3 "$here/bert_varlen.py" --steps 12 ;;
    frac)  # 14 GiB as a fraction of this card's total, as PyTorch reports it
      f=$(python3 -c "import torch; print(14 * 2**30 / torch.cuda.get_device_properties(0).total_memory)")
      one frac none python3 "$here/with_fraction.py" "$f" "$here/split_waste.py" ;;
    gpt2) one gpt2 15GiB python3 "$here/torch_train.py" --model gpt2 --steps 6 ;;
    killed)
      for at in mid boundary; do
        mkdir -p "$out/killed-$at"
        "$VT" run -q -o "$out/killed-$at/killed.%p.jsonl.zst" -- python3 "$here/killed_step.py" --at "$at" \
          >"$out/killed-$at/run.log" 2>&1
        echo "== killed-$at: rc $?"
        "$VT" summary "$out/killed-$at" >"$out/killed-$at/summary.txt" 2>&1
        "$VT" check --max-peak-reserved 80GiB "$out/killed-$at" >"$out/killed-$at/check.txt" 2>&1
        echo "check rc $?"
      done ;;
    *) echo "verdict_check: unknown workload $w" >&2 ;;
  esac
  # After each workload: what a time limit cuts short is still there.
  tar -C "$out" --exclude=verdict-data.tar.gz -czf "$tarball.tmp" . && mv "$tarball.tmp" "$tarball"
done
ls -la "$tarball"
