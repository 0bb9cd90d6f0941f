#!/usr/bin/env bash
# Device calls for the OOM answers: tune against the verdicts on three workloads that run out of
# memory under a cap, the encoder's capacity OOM for tests/data, the cap step, the cost of the
# default run. Usage: tests/gpu/batch4.sh PHASE   (OUT set by the device tool)
#   one   the encoder's OOM (tests/gpu/oom_runs.sh encoder), tune_check bert and gpt2
#   two   tune_check llama, scripts/gpu-check.sh cap, run_overhead (GPT-2, native against run)
#   three tune_check bert gpt2 llama, then the cap step (after a change to the shim)
# Each phase leaves at most 8 files in $OUT.
export LD_LIBRARY_PATH=$PWD/.carry/gpu/lib:${LD_LIBRARY_PATH:-}
export PYTHONUNBUFFERED=1
B=.carry/gpu
case ${1:-} in
  one)
    t=$SECONDS; OOM_RUNS=encoder timeout 150 tests/gpu/oom_runs.sh $B "$OUT/oom" >"$OUT/oom.log" 2>&1
    echo "== oom_runs encoder rc $? $((SECONDS - t)) s"
    grep -E "^==|Diagnosis|FAIL|PASS|OOMs|oom:|check" "$OUT/oom.log" | head -30
    grep -h -E "OutOfMemoryError" "$OUT"/oom/*.run.err | cut -c1-400 | head -2
    tar -C "$OUT/oom" -cf "$OUT/oom-data.tar" data 2>/dev/null
    rm -rf "$OUT/oom"
    t=$SECONDS; timeout 400 tests/gpu/tune_check.sh $B "$OUT/tune" bert gpt2 >"$OUT/tune.log" 2>&1
    echo "== tune bert gpt2 rc $? $((SECONDS - t)) s"
    cat "$OUT/tune.log"
    mv "$OUT"/tune/*.tune-0.tar.gz "$OUT/" 2>/dev/null
    tar -C "$OUT" -czf "$OUT/tune-json.tar.gz" tune 2>/dev/null; rm -rf "$OUT/tune"
    ;;
  two)
    t=$SECONDS; timeout 220 tests/gpu/tune_check.sh $B "$OUT/tune" llama >"$OUT/tune.log" 2>&1
    echo "== tune llama rc $? $((SECONDS - t)) s"
    cat "$OUT/tune.log"
    mv "$OUT"/tune/*.tune-0.tar.gz "$OUT/" 2>/dev/null
    tar -C "$OUT" -czf "$OUT/tune-json.tar.gz" tune 2>/dev/null; rm -rf "$OUT/tune"
    t=$SECONDS; OUT="$OUT/gc" timeout 95 scripts/gpu-check.sh --budget 90 cap >"$OUT/cap.log" 2>&1
    echo "== cap rc $? $((SECONDS - t)) s"
    grep -E "^\((a|a2|b|c|d)\)" "$OUT/cap.log"
    rm -rf "$OUT/gc"
    t=$SECONDS; OUT="$OUT" timeout 230 python3 tests/gpu/run_overhead.py --build $B --rounds "${ROUNDS:-5}" --steps 15 --budget 220 \
      --variants native,run >"$OUT/overhead.log" 2>&1
    echo "== run_overhead rc $? $((SECONDS - t)) s"
    tail -25 "$OUT/overhead.log"
    ;;
  three)  # after the shim forwards PyTorch's segments and caps cuMemCreate: all three tunes, the cap step
    t=$SECONDS; timeout 420 tests/gpu/tune_check.sh $B "$OUT/tune" ${TUNE:-bert gpt2 llama} >"$OUT/tune.log" 2>&1
    echo "== tune rc $? $((SECONDS - t)) s"
    cat "$OUT/tune.log"
    for f in "$OUT"/tune/*.tune-0.tar.gz; do
      tar -xzOf "$f" --wildcards '*.torch.pickle.json' 2>/dev/null |
        python3 -c 'import json,sys; d=json.load(sys.stdin); print(sys.argv[1], "shim_forwards", d["allocator"].get("shim_forwards"))' "$f"
    done
    mv "$OUT"/tune/*.tune-0.tar.gz "$OUT/" 2>/dev/null
    tar -C "$OUT" -czf "$OUT/tune-json.tar.gz" tune 2>/dev/null; rm -rf "$OUT/tune"
    t=$SECONDS; OUT="$OUT/gc" timeout 95 scripts/gpu-check.sh --budget 90 cap >"$OUT/cap.log" 2>&1
    echo "== cap rc $? $((SECONDS - t)) s"
    grep -E "^\((a|a2|b|c|d)\)" "$OUT/cap.log" | sort -u
    rm -rf "$OUT/gc"
    ;;
  *) echo "usage: batch4.sh one|two|three" >&2; exit 2 ;;
esac
