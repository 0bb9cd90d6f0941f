#!/usr/bin/env bash
# GPU check: call stacks in the shim's own traces (shim/src/base/stacks.h, trace format 1.2).
# Under `vramtrace run`, read at the device level (`--level device`, the shim's trace):
#   1. tests/gpu/stacks_python.py: allocations from known Python lines through the real driver
#      with the GIL held -- `vramtrace summary` must name the script's line; with the GIL released
#      the stack has native frames only;
#   2. CuPy (tests/gpu/cupy_check.py), JAX (tests/gpu/jax_check.py) and PyTorch's segments
#      (tests/gpu/torch_train.py, GPT-2, 4 steps): every allocation must carry a stack
#      (no_stack_bytes 0 in `summary --json`), and the top sites are printed. CuPy and PyTorch
#      allocate with the GIL released, so their sites are framework frames, not script lines (the
#      check says which it found).
# Usage: tests/gpu/stacks_check.sh BUILD OUTDIR   (BUILD: a carry or build directory)
set -uo pipefail
B=$1 out=$2
mkdir -p "$out"
fail=0
vt() { "$B/bin/vramtrace" "$@"; }

# The sites of a trace's peak, as "bytes site" lines, and its stack coverage; $1 trace, $2 name.
sites_of() {
  vt summary --level device "$1" >"$out/$2.summary.txt" 2>"$out/$2.summary.err"
  vt summary --level device --json "$1" >"$out/$2.summary.json" 2>/dev/null
  python3 - "$out/$2.summary.json" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
for t in j.get("traces", [j]):
    s = t.get("sites", {})
    if not s.get("devices"):
        print("NO SITES:", s.get("reason"))
        continue
    for d in s["devices"]:
        at = d.get("at_peak") or d["at_end"]
        print(f"device {d['device']}: {at['total_bytes']} bytes at the peak, "
              f"{at['no_stack_bytes']} without a stack")
        for site in at["sites"][:5]:
            via = site["via"][0]["site"] if site["via"] and site["via"][0]["site"] else "-"
            print(f"  {site['bytes']:>12}  {site['site']}   via {via}")
PY
}

run() {  # name, then the command
  local name=$1
  shift
  vt run -o "$out/$name.%p.jsonl" -- "$@" >"$out/$name.out" 2>"$out/$name.err"
  local rc=$?
  echo "$name: run rc $rc" >&2
  ((rc == 0)) || { echo "FAIL: $name exited $rc" >&2; tail -5 "$out/$name.err" >&2; return 1; }
  ls "$out"/"$name".*.jsonl | grep -v '\.torch\.' | head -1
}

# 1. Python lines through the real driver.
if ! trace=$(run python python3 tests/gpu/stacks_python.py); then
  fail=1
else
  sites_of "$trace" python | tee "$out/python.sites"
  line=$(python3 -c 'import json,sys; print(json.loads(open(sys.argv[1]).read().split("RESULT ",1)[1])["gil_line"])' "$out/python.out")
  if grep -q "stacks_python.py:$line in allocate" "$out/python.sites"; then
    echo "PASS: the site of the GIL-held allocation is stacks_python.py:$line"
  else
    echo "FAIL: no site stacks_python.py:$line"; fail=1
  fi
  grep -q " 0 without a stack" "$out/python.sites" || { echo "FAIL: allocations without a stack"; fail=1; }
fi

# 2. Frameworks: every allocation has a stack.
for spec in "cupy python3 tests/gpu/cupy_check.py" "jax python3 tests/gpu/jax_check.py" \
            "torch python3 tests/gpu/torch_train.py --model gpt2 --steps 4"; do
  read -r name cmd <<<"$spec"
  python3 -c "import $name" 2>/dev/null || { echo "SKIP: $name is not installed"; continue; }
  # shellcheck disable=SC2086
  trace=$(run "$name" $cmd) || { fail=1; continue; }
  sites_of "$trace" "$name" | tee "$out/$name.sites"
  if grep -q "without a stack" "$out/$name.sites" && ! grep -Eq " [1-9][0-9]* without a stack" "$out/$name.sites"; then
    echo "PASS: $name: every allocation alive at the peak has its stack"
  else
    echo "FAIL: $name: allocations without a stack, or no sites"; fail=1
  fi
  script=$(awk '{print $2}' <<<"$cmd")
  if grep -q "$(basename "$script")" "$out/$name.sites"; then
    echo "NOTE: $name: a site names $(basename "$script") (Python frames: the GIL was held)"
  else
    echo "NOTE: $name: no site names $(basename "$script") (the framework allocates with the GIL released)"
  fi
done
((fail == 0)) && echo "PASS: stacks_check"
exit $fail
