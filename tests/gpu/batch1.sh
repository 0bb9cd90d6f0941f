#!/usr/bin/env bash
# One device call: the checks of call stacks, allocation sites and the ledger, then the cost of
# stacks. Usage: tests/gpu/batch1.sh (OUT set by the device tool)
export LD_LIBRARY_PATH=$PWD/.carry/gpu/lib:${LD_LIBRARY_PATH:-}
B=.carry/gpu
nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv
run() { local name=$1; shift; local t=$SECONDS; timeout "$1" "${@:2}" >"$OUT/$name.log" 2>&1; echo "== $name rc $? $((SECONDS - t)) s"; tail -${TAILN:-25} "$OUT/$name.log"; }
run stacks 120 tests/gpu/stacks_check.sh $B "$OUT/stacks"
run sites 120 tests/gpu/device_sites_check.sh $B "$OUT/sites"
run ledger 100 python3 tests/gpu/ledger_check.py $B "$OUT/ledger"
TAILN=14 run overhead 230 env OUT="$OUT/overhead" python3 tests/gpu/run_overhead.py --build $B --rounds 3 --steps 20 --budget 220 --variants native,run,run_noshimstacks,run_nonestacks
rm -rf "$OUT"/*/traces "$OUT"/stacks/*.jsonl* "$OUT"/sites/*.jsonl* 2>/dev/null
