#!/usr/bin/env bash
# Step `trace` of scripts/gpu-check.sh: the trace of a real training run is right and cheap.
#  (a) `vramtrace run --tensors -- python3 <GPT-2 training>` gives a trace whose replay reproduces
#      the statistics the shim recorded in its trailer;
#  (b) full tracing costs at most 1.03x step time against the shim without tracing
#      (same preload, VRAMTRACE_OUTPUT unset: the shim then creates no trace writer).
# Runs are interleaved (untraced, traced, untraced, ...) so that clock drift hits both sides.
# Needs .carry/gpu from `scripts/gpu-check.sh carry` (or a build directory in VRAMTRACE_BUILD_DIR),
# python3 with torch and transformers. Output in $OUT (default: a new directory under /tmp).
#   STEPS=20 ROUNDS=3 tests/gpu/trace_check.sh       (or: scripts/gpu-check.sh trace)
set -euo pipefail
cd "$(dirname "$0")/../.."
B=${VRAMTRACE_BUILD_DIR:-.carry/gpu}
vt="$B/bin/vramtrace"
lib="$B/shim/libvramtrace.so"
export LD_LIBRARY_PATH="$B/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"  # vramtrace's own libraries
steps=${STEPS:-20}
rounds=${ROUNDS:-3}
out=${OUT:-$(mktemp -d /tmp/vramtrace-gpu-XXXXXX)}
mkdir -p "$out"
train=(python3 tests/gpu/torch_train.py --model gpt2 --steps "$steps" --warmup 3)
echo "output in $out"

for r in $(seq 1 "$rounds"); do
  echo "== round $r: shim without tracing"
  env -u VRAMTRACE_OUTPUT LD_PRELOAD="$lib" PYTORCH_NO_CUDA_MEMORY_CACHING=1 "${train[@]}" \
    | grep '^RESULT ' | sed 's/^RESULT //' > "$out/untraced.$r.json"
  echo "== round $r: vramtrace run --tensors"
  mkdir -p "$out/traced.$r"
  "$vt" run --tensors -o "$out/traced.$r/gpt2.%p.jsonl" -- "${train[@]}" \
    2> "$out/traced.$r/run.err" | grep '^RESULT ' | sed 's/^RESULT //' > "$out/traced.$r.json"
  cat "$out/traced.$r/run.err"
done

trace=$(ls -S "$out"/traced.1/gpt2.*.jsonl | head -1)
settings=$(head -1 "$trace" | python3 -c 'import json,sys; print(json.load(sys.stdin)["allocator_settings"])')
echo "== replay of $trace (settings '$settings')"
"$vt" replay "$trace" --conf "$settings" --json > "$out/replay.json"
"$vt" replay "$trace" --conf "$settings" || true

python3 - "$trace" "$out" "$rounds" <<'PY'
import json, statistics, sys
trace, out, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3])
last = None
with open(trace) as f:
    for line in f:
        last = line
trailer = json.loads(last)
ok = True
if trailer.get("a") != "trailer" or not trailer.get("devices"):
    print("FAIL (a): the trace has no trailer with final statistics: the shim must close the writer at exit "
          "with flatten_stats() per device")
    ok = False
else:
    recorded = trailer["devices"][0]["stats"]
    replayed = json.load(open(out + "/replay.json"))["results"][0]["stats"]
    keys = ["allocated_bytes.all.peak", "reserved_bytes.all.peak", "requested_bytes.all.peak",
            "active_bytes.all.peak", "inactive_split_bytes.all.peak", "segment.all.peak",
            "allocation.all.allocated", "num_device_alloc", "num_alloc_retries", "num_ooms"]
    print(f"{'statistic':34} {'recorded (trailer)':>20} {'replayed':>20}")
    for k in keys:
        a, b = recorded.get(k), replayed.get(k)
        mark = "" if a == b else "   <-- differs"
        ok = ok and a == b
        print(f"{k:34} {str(a):>20} {str(b):>20}{mark}")
    print(("PASS" if ok else "FAIL") + " (a): replay reproduces the recorded statistics"
          f" ({trailer['events']} events, {trailer['dropped']} dropped)")
un = [json.load(open(f"{out}/untraced.{r}.json"))["step_ms_median"] for r in range(1, rounds + 1)]
tr = [json.load(open(f"{out}/traced.{r}.json"))["step_ms_median"] for r in range(1, rounds + 1)]
ratio = statistics.median(tr) / statistics.median(un)
print(f"step ms, shim without tracing: {un}")
print(f"step ms, full tracing:         {tr}")
print(("PASS" if ratio <= 1.03 else "FAIL") + f" (b): traced / untraced median step time = {ratio:.4f} (<= 1.03)")
sys.exit(0 if ok and ratio <= 1.03 else 1)
PY
