#!/usr/bin/env bash
# GPU check: the default `vramtrace run` of GPT-2 124M training (tests/gpu/torch_train.py) names
# its code. The reports read the run's tensor-level snapshot in place of the shim's trace; the
# top sites must name lines of transformers' modeling_gpt2.py and of the training script.
# Usage: tests/gpu/sites_check.sh BUILD OUTDIR   (BUILD: a carry or build directory)
set -uo pipefail
B=$1 out=$2
mkdir -p "$out"
"$B/bin/vramtrace" run -o "$out/gpt2.%p.jsonl" -- python3 tests/gpu/torch_train.py --model gpt2 --steps 4 \
  >"$out/run.out" 2>"$out/run.err"
echo "run rc $?"
trace=$(ls "$out"/gpt2.*.jsonl | head -1)
"$B/bin/vramtrace" summary "$trace" >"$out/summary.txt" 2>"$out/summary.err"
echo "summary rc $?"
"$B/bin/vramtrace" summary --json "$trace" >"$out/summary.json" 2>/dev/null
cat "$out/summary.err"
sed -n '/Top allocation sites at the peak/,/^$/p' "$out/summary.txt" | head -40
fail=0
grep -q "modeling_gpt2.py" "$out/summary.txt" || { echo "FAIL: no modeling_gpt2.py line among the sites"; fail=1; }
grep -q "torch_train.py" "$out/summary.txt" || { echo "FAIL: no training-script line among the sites"; fail=1; }
((fail == 0)) && echo "PASS: the sites name modeling_gpt2.py and torch_train.py"
exit $fail
