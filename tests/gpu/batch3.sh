#!/usr/bin/env bash
# One device call: the capped OOM runs (fixtures for tests/data), the cap step, and tune against
# the what-if verdicts. Usage: tests/gpu/batch3.sh (OUT set by the device tool)
export LD_LIBRARY_PATH=$PWD/.carry/gpu/lib:${LD_LIBRARY_PATH:-}
B=.carry/gpu
t=$SECONDS; timeout 110 tests/gpu/oom_runs.sh $B "$OUT/oom" >"$OUT/oom.log" 2>&1; echo "== oom_runs rc $? $((SECONDS - t)) s"
grep -h "OutOfMemoryError" "$OUT"/oom/*.run.err | cut -c1-330
grep -E "^==|Diagnosis|FAIL" "$OUT/oom.log" | head -20
tar -C "$OUT/oom" -cf "$OUT/oom-data.tar" data 2>/dev/null
t=$SECONDS; OUT="$OUT/gc" timeout 80 scripts/gpu-check.sh --budget 75 cap >"$OUT/cap.log" 2>&1; echo "== cap rc $? $((SECONDS - t)) s"
grep -E "^\((a|a2|b|c|d)\)" "$OUT/cap.log"
t=$SECONDS; timeout 385 tests/gpu/tune_check.sh $B "$OUT/tune" ${TUNE:-bert gpt2 llama} >"$OUT/tune.log" 2>&1; echo "== tune rc $? $((SECONDS - t)) s"
cat "$OUT/tune.log"
rm -rf "$OUT"/oom "$OUT"/gc/cap; tar -C "$OUT" -cf "$OUT/tune.tar" tune 2>/dev/null; rm -rf "$OUT/tune"
