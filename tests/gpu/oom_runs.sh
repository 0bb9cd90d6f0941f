#!/usr/bin/env bash
# GPU check: two PyTorch runs that die of an OOM under `vramtrace run --limit` (the default run:
# the shim's trace and PyTorch's tensor level beside it), and what every report says of them.
#   llama    the Llama-style 1.1B training of tests/gpu/torch_train.py (gradient checkpointing,
#            AdamW) under --limit T4 (14.58 GiB): it needs about 20.8 GB
#   encoder  the BERT-base encoder with variable lengths of tests/gpu/bert_varlen.py under
#            --limit 10GiB: its peak allocated memory is about 13.8 GiB (2026-12-01, H200), so it runs
#            out of memory whatever the settings (above its peak allocated, PyTorch survives a failed
#            cudaMalloc by freeing its cache: at 21GiB it ran all 12 steps)
# For each run and each level (the tensor level, read by default, and --level device) it checks
# that `oom`, `summary`, `report` and `check --max-ooms 0` report the OOM (Note [one OOM per failed
# request], reporter/model/oom_count.h): the text names "OOM 1", the summary counts OOMs >= 1, the
# report's data holds the count, and check exits 1. It prints both levels' counts side by side.
# It then stages the files for tests/data (the shim's trace zstd-compressed as written, the
# snapshot compressed, the sidecar beside it) in OUTDIR/data with their sizes.
#
# Usage: tests/gpu/oom_runs.sh BUILD OUTDIR   (BUILD: a carry or build directory)
# Environment: OOM_RUNS (default "llama encoder"), VRAMTRACE_TORCH_MAX_ENTRIES (default 50000: the
# history's ring, which bounds the snapshot's size).
set -uo pipefail
B=$1 out=$2
VT="$B/bin/vramtrace"
mkdir -p "$out/data"
export VRAMTRACE_TORCH_MAX_ENTRIES=${VRAMTRACE_TORCH_MAX_ENTRIES:-50000}
fail=0

compress() {  # FILE: FILE.zst (zstd), else FILE.gz; prints the name
  if command -v zstd >/dev/null; then
    zstd -q -19 -f "$1" -o "$1.zst" && echo "$1.zst"
  else
    gzip -9 -c "$1" >"$1.gz" && echo "$1.gz"
  fi
}

check_level() {  # NAME LEVEL FILE
  local name=$1 level=$2 f=$3 pre="$out/$1.$2"
  "$VT" summary --level "$level" "$f" >"$pre.summary.txt" 2>"$pre.summary.err"
  "$VT" summary --json --level "$level" "$f" >"$pre.summary.json" 2>/dev/null
  "$VT" oom --no-replay --level "$level" "$f" >"$pre.oom.txt" 2>"$pre.oom.err"
  "$VT" report --force --level "$level" "$f" -o "$pre.report.html" 2>"$pre.report.err"
  "$VT" check --max-ooms 0 --level "$level" "$f" >"$pre.check.txt" 2>&1
  local check_rc=$?
  local count
  count=$(grep -m1 -E '^OOMs [0-9]+' "$pre.summary.txt")
  echo "  $name, level $level: $count"
  echo "    oom: $(grep -m1 -E '^OOM 1 on device' "$pre.oom.txt" || echo 'no OOM 1')"
  grep -m1 'Diagnosis:' "$pre.oom.txt" | sed 's/^ */    /'
  echo "    check --max-ooms 0: exit $check_rc"
  grep -q -E '^OOMs [1-9]' "$pre.summary.txt" || { echo "FAIL: $name $level: summary counts no OOM"; fail=1; }
  grep -q -E '^OOM 1 on device' "$pre.oom.txt" || { echo "FAIL: $name $level: oom shows no OOM"; fail=1; }
  grep -q 'No OOM in this trace' "$pre.oom.txt" && { echo "FAIL: $name $level: oom says No OOM"; fail=1; }
  grep -q '"oom_count":"OOMs [1-9]' "$pre.report.html" || { echo "FAIL: $name $level: report shows no OOM"; fail=1; }
  ((check_rc == 1)) || { echo "FAIL: $name $level: check --max-ooms 0 exited $check_rc, not 1"; fail=1; }
}

run_one() {  # NAME LIMIT COMMAND...
  local name=$1 limit=$2
  shift 2
  rm -f "$out/$name".*
  "$VT" run --limit "$limit" -o "$out/$name.jsonl.zst" -- "$@" >"$out/$name.run.out" 2>"$out/$name.run.err"
  local rc=$?
  echo "== $name: vramtrace run --limit $limit -- $*: exit $rc"
  grep -m1 -E 'OutOfMemoryError|out of memory' "$out/$name.run.out" "$out/$name.run.err" | cut -c1-400
  sed -n '/^  trace/,/^$/p' "$out/$name.run.err" | head -8
  local trace="$out/$name.jsonl.zst" pickle
  pickle=$(ls "$out/$name".*.torch.pickle 2>/dev/null | head -1)
  [[ -f $trace ]] || { echo "FAIL: $name: no trace"; fail=1; return; }
  [[ -n $pickle ]] || { echo "FAIL: $name: no tensor-level snapshot"; fail=1; return; }
  grep -q -E 'OutOfMemoryError|out of memory' "$out/$name.run.out" "$out/$name.run.err" ||
    echo "NOTE: $name: no OOM message in the program's output (did it fit under $limit?)"
  check_level "$name" auto "$trace"
  check_level "$name" device "$trace"
  python3 - "$out/$name.auto.summary.json" "$out/$name.device.summary.json" <<'EOF'
import json, sys
for path in sys.argv[1:]:
    for t in json.load(open(path))["traces"]:
        for d in t["devices"]:
            c = d.get("oom_count", {})
            print("    %-8s %s device %d: ooms %s, retries %s, entries %s, survived %s, repeated %s, without entry %d"
                  % (t["format"], t["path"].rsplit("/", 1)[-1], d["device"], c.get("ooms"), c.get("num_alloc_retries"),
                     c.get("oom_entries"), c.get("survived"), c.get("repeated"), len(c.get("without_entry", []))))
EOF
  # For tests/data: the trace as written, the snapshot compressed, the sidecar under its own name.
  cp "$trace" "$out/data/$name.vramtrace.jsonl.zst"
  local packed
  packed=$(compress "$pickle")
  cp "$packed" "$out/data/"
  cp "$pickle.json" "$out/data/"
}

for name in ${OOM_RUNS:-llama encoder}; do
  case $name in
    llama) run_one llama T4 python3 tests/gpu/torch_train.py --model llama --steps 2 --warmup 0 ;;
    encoder) run_one encoder 10GiB python3 tests/gpu/bert_varlen.py --steps 12 ;;
    *) echo "unknown run $name (llama, encoder)"; exit 2 ;;
  esac
done
echo "== files for tests/data ($out/data):"
ls -l "$out/data"
for f in "$out/data"/*; do
  (($(stat -c %s "$f") > 4 * 1024 * 1024)) && echo "NOTE: $f is above 4 MiB: lower VRAMTRACE_TORCH_MAX_ENTRIES"
done
((fail == 0)) && echo "PASS: every report counts the OOM of each run at both levels, and check --max-ooms 0 fails it"
exit $fail
