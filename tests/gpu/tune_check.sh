#!/usr/bin/env bash
# GPU check: `vramtrace tune` against `vramtrace oom`'s verdicts on real programs that run out of
# memory under a cap. For each workload: `vramtrace tune --limit CAP` runs the program once per
# setting (the defaults first) and says what really fits; `vramtrace oom` on the defaults' run
# (tune's run 0: it died of its OOM) replays the same settings on the cap and gives its verdicts.
# Every verdict "fits" must be a run that fits, every "does not fit" a run that does not;
# "marginal" promises nothing. Prints both tables and a PASS/FAIL line per workload.
#   bert   tests/gpu/bert_varlen.py --steps 12 under 16GiB (fragmentation: its peak allocated is
#          about 13.8 GiB, its peak reserved 22-25 GiB; expandable segments fit)
#   gpt2   tests/gpu/torch_train.py --model gpt2 --steps 6 under 15GiB (peak allocated 13.45 GiB,
#          reserved 15.77 GiB without a cap: the replays have the defaults out of memory and
#          expandable segments fitting on what the cap leaves)
#   llama  tests/gpu/torch_train.py --model llama --steps 2 under T4 (nothing fits)
# Usage: tests/gpu/tune_check.sh BUILD OUTDIR [WORKLOAD...]   (BUILD: a carry or build directory)
set -uo pipefail
B=$1 out=$2
shift 2
VT="$B/bin/vramtrace"
mkdir -p "$out"
fail=0
one() {  # name cap command...
  local name=$1 cap=$2
  shift 2
  local dir="$out/$name"
  "$VT" tune --json --limit "$cap" --timeout 200 -o "$dir" -- "$@" >"$out/$name.tune.json" 2>"$out/$name.tune.err"
  echo "== $name under $cap: tune rc $?"
  local trace
  trace=$(ls "$dir"/tune-0.*.jsonl 2>/dev/null | grep -v torch | head -1)
  "$VT" oom --json "$trace" >"$out/$name.oom.json" 2>"$out/$name.oom.err"
  python3 - "$out/$name.tune.json" "$out/$name.oom.json" "$name" <<'PY' || fail=1
import json, sys
tune = json.load(open(sys.argv[1]))
try:
    oom = json.load(open(sys.argv[2]))
except Exception as e:  # noqa: BLE001
    print(f"{sys.argv[3]}: FAIL: no oom report ({e})"); sys.exit(1)
real = {r["settings"]: r for r in tune["runs"]}
bad = 0
if not oom.get("replays"):
    # The defaults must die of an OOM under the cap, or there is no verdict to check.
    print(f"{sys.argv[3]}: FAIL: no verdicts to check (the defaults' run: {real.get('', {}).get('result')}); "
          "choose a lower cap")
    sys.exit(1)
print(f"  {'settings':<30} {'real':>10} {'real peak':>12}  {'verdict':>13} {'replay peak':>12} {'spare':>10}")
for w in oom.get("replays", []):
    r = real.get(w["settings"])
    v = w["verdict"]
    res = r["result"] if r else "not run"
    peak = f"{r['peak_reserved_bytes'] / 2**30:.2f} GiB" if r and r["peak_reserved_bytes"] else "?"
    ok = (v == "fits" and res == "fits") or (v == "does_not_fit" and res == "OOM") or \
        v in ("marginal", "failed", None)
    bad += not ok
    # A setting that was not replayed has no figures (null), and margin and shortfall are exclusive.
    rp = w.get("peak_reserved_bytes")
    spare = w.get("margin_bytes") if w.get("margin_bytes") is not None else -(w.get("shortfall_bytes") or 0)
    rp_text = f"{rp / 2**30:>8.2f} GiB" if rp is not None else f"{'-':>12}"
    print(f"  {w['settings'] or '(defaults)':<30} {res:>10} {peak:>12}  {str(v):>13} "
          f"{rp_text} {spare / 2**20:>7.0f} MiB  {'' if ok else 'DISAGREES'}")
wi = oom.get('whatif') or {}
print(f"  capacity {(wi.get('capacity_bytes') or 0) / 2**30:.2f} GiB "
      f"({wi.get('capacity_source')}), bound of the first row {(oom['replays'][0].get('bound_bytes') or 0) / 2**20:.0f} MiB, "
      f"covers {wi.get('covers')}; tune command: {oom.get('tune_command')}")
for o in oom.get("ooms", [])[:1]:
    print(f"  diagnosis: {o.get('diagnosis')} - {o.get('headline')}")
print(f"{sys.argv[3]}: {'PASS' if bad == 0 else 'FAIL'}: {bad} verdict(s) disagree with the real runs")
sys.exit(1 if bad else 0)
PY
  # The defaults' run (the trace the verdicts came from) is kept, compressed, for the reports.
  tar -C "$dir" -czf "$out/$name.tune-0.tar.gz" $(cd "$dir" && ls tune-0.* 2>/dev/null) 2>/dev/null
  rm -f "$dir"/*.jsonl "$dir"/*.pickle
}
want=${*:-bert gpt2 llama}
for w in $want; do
  case $w in
    bert) one bert 16GiB python3 tests/gpu/bert_varlen.py --steps 12 ;;
    gpt2) one gpt2 15GiB python3 tests/gpu/torch_train.py --model gpt2 --steps 6 --warmup 0 ;;
    llama) one llama T4 python3 tests/gpu/torch_train.py --model llama --steps 2 --warmup 0 ;;
  esac
done
exit $fail
