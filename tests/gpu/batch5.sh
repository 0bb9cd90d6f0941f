#!/usr/bin/env bash
# Device calls for the call-site and tensor-level checks of a default `vramtrace run`.
# Usage: tests/gpu/batch5.sh PHASE   (OUT set by the device tool; .carry from scripts/gpu-check.sh carry)
#   stacks  the driver-level native stacks' cost: gpu_bench.py native, front_stacks, front_nostacks
#           (GPT-2 124M, ROUNDS rounds, default 4)
#   checks  the tensor level against memory_stats (torch_level_check.py), the top sites of GPT-2
#           (sites_check.sh), the ledger (ledger_check.py) and the shim's own stacks
#           (device_sites_check.sh), each with its log in $OUT
#   killed  SIGKILLed PyTorch runs say what is missing of the tensor level (killed_check.sh), then
#           device_sites_check.sh and torch_level_check.py again
set -u
export LD_LIBRARY_PATH=$PWD/.carry/gpu/lib:${LD_LIBRARY_PATH:-}
export PYTHONUNBUFFERED=1
B=.carry/gpu
case ${1:-} in
  stacks)
    t=$SECONDS
    BENCH_ARGS="--rounds ${ROUNDS:-4} --models ${MODELS:-gpt2} --gpt2-steps 20 --variants native,front_stacks,front_nostacks" \
      OUT="$OUT" timeout 580 scripts/gpu-check.sh --budget "${BUDGET:-570}" bench >"$OUT/bench.log" 2>&1
    echo "== bench rc $? $((SECONDS - t)) s"
    tail -30 "$OUT/bench.log"
    cat "$OUT"/bench/gpu-bench.md 2>/dev/null || find "$OUT" -name gpu-bench.md -exec cat {} \;
    ;;
  checks)
    t=$SECONDS; timeout 150 python3 tests/gpu/torch_level_check.py --steps 6 >"$OUT/torch_level.log" 2>&1
    echo "== torch_level_check rc $? $((SECONDS - t)) s"; tail -12 "$OUT/torch_level.log"
    t=$SECONDS; timeout 120 tests/gpu/sites_check.sh $B "$OUT/sites" >"$OUT/sites.log" 2>&1
    echo "== sites_check rc $? $((SECONDS - t)) s"; tail -40 "$OUT/sites.log"
    t=$SECONDS; timeout 150 python3 tests/gpu/ledger_check.py $B "$OUT/ledger" >"$OUT/ledger.log" 2>&1
    echo "== ledger_check rc $? $((SECONDS - t)) s"; tail -25 "$OUT/ledger.log"
    t=$SECONDS; timeout 150 tests/gpu/device_sites_check.sh $B "$OUT/dsites" >"$OUT/dsites.log" 2>&1
    echo "== device_sites_check rc $? $((SECONDS - t)) s"; grep -E "PASS|FAIL|rc " "$OUT/dsites.log"
    tar -C "$OUT" -czf "$OUT/checks.tar.gz" sites ledger dsites 2>/dev/null; rm -rf "$OUT/sites" "$OUT/ledger" "$OUT/dsites"
    ;;
  killed)  # after the sidecar of the start and the static runtime's sites
    t=$SECONDS; timeout 120 tests/gpu/killed_check.sh $B "$OUT/killed" >"$OUT/killed.log" 2>&1
    echo "== killed_check rc $? $((SECONDS - t)) s"; cat "$OUT/killed.log"
    t=$SECONDS; timeout 150 tests/gpu/device_sites_check.sh $B "$OUT/dsites" >"$OUT/dsites.log" 2>&1
    echo "== device_sites_check rc $? $((SECONDS - t)) s"; cat "$OUT/dsites.log"
    t=$SECONDS; timeout 150 python3 tests/gpu/torch_level_check.py --steps 4 >"$OUT/torch_level.log" 2>&1
    echo "== torch_level_check rc $? $((SECONDS - t)) s"; tail -4 "$OUT/torch_level.log"
    tar -C "$OUT" -czf "$OUT/killed.tar.gz" killed dsites 2>/dev/null; rm -rf "$OUT/killed" "$OUT/dsites"
    ;;
  *) echo "usage: $0 stacks|checks|killed" >&2; exit 2 ;;
esac
