#!/usr/bin/env bash
# Step `cap` of scripts/gpu-check.sh: a smaller GPU reproduced on a bigger one with the shim's
# memory cap (docs/configuration.md, "Memory cap").
#  (a)  the transformer encoder with random sequence lengths (docs/h200.md) in tensor mode,
#       `vramtrace run --tensors --limit 14.58GiB`, must end in an OOM; prints what PyTorch raised,
#       then `vramtrace oom` on its trace must give the capped device's figures, compared with
#       what PyTorch itself sees (torch.cuda.mem_get_info at the failure), and the diagnosis that
#       follows from them (capacity when all the free memory is below the request);
#  (a2) the same under the cap with PyTorch's own caching allocator (no --tensors): PyTorch's OOM
#       message figures ("total capacity of ... of which ... is free", "reserved by PyTorch but
#       unallocated") against `vramtrace oom`'s device free and cache free;
#  (b)  the same tensor-mode run with a cap above its need (60GiB) passes;
#  (c)  JAX under the cap: its BFC preallocation (75% by default) is sized from the capped total;
#  (d)  torch.cuda.mem_get_info(), get_device_properties(0).total_memory and NVML (pynvml, or
#       ctypes when pynvml is absent) report the cap; without a cap, the physical device.
# Every step has its own time limit; a failing step prints why and the script goes on. A PASS/FAIL
# table ends the output (also $OUT/summary.txt). Total runtime about 2-3 minutes on the H200.
#
# Usage (binaries staged by `scripts/gpu-check.sh carry`: bin/vramtrace, shim/libvramtrace.so, lib/;
# a build directory works too):
#   VRAMTRACE_BUILD_DIR=.carry/gpu OUT=/tmp/cap-out tests/gpu/cap_check.sh
# or, with the time budget and the summary of every step: scripts/gpu-check.sh cap
# Knobs: CAP (14.58GiB), BIG_CAP (60GiB), STEP_TIMEOUT (100 s), ENCODER_ARGS ("--steps 6 --batch 16").
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2
B=${VRAMTRACE_BUILD_DIR:-.carry/gpu}
vt="$B/bin/vramtrace"
lib="$B/shim/libvramtrace.so"
OUT=${OUT:-$(mktemp -d /tmp/vramtrace-cap-XXXXXX)}
mkdir -p "$OUT"
export LD_LIBRARY_PATH="$B/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export VRAMTRACE_LIB="$lib"
CAP=${CAP:-14.58GiB}
BIG_CAP=${BIG_CAP:-60GiB}
T=${STEP_TIMEOUT:-100}
read -r -a ENC_ARGS <<< "${ENCODER_ARGS:---steps 6 --batch 16}"
: > "$OUT/summary.txt"
start=$(date +%s)
echo "output in $OUT; cap $CAP; vramtrace $vt; shim $lib"

row() {  # name verdict detail
  printf '%-52s %-5s %s\n' "$1" "$2" "$3" | tee -a "$OUT/summary.txt"
}
bytes_of() {  # a size as vramtrace parses it (binary units, fractions rounded down)
  python3 - "$1" <<'PY'
import re, sys
m = re.fullmatch(r"\s*([0-9.]+)\s*([KMGT]i?B)?\s*", sys.argv[1], re.I)
units = {"kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12}
print(int(float(m.group(1)) * units.get((m.group(2) or "").lower(), 1)))
PY
}
result_json() { grep '^RESULT ' "$1" | tail -1 | sed 's/^RESULT //'; }
newest_trace() { ls -S "$1"/*.jsonl 2>/dev/null | head -1; }

for f in "$vt" "$lib"; do
  if [[ ! -e $f ]]; then
    echo "missing $f: stage the binaries with scripts/gpu-check.sh carry and set VRAMTRACE_BUILD_DIR"
    exit 2
  fi
done
cap_bytes=$(bytes_of "$CAP")
echo "cap $CAP = $cap_bytes bytes"
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader 2>/dev/null | sed 's/^/GPU: /'

# ---------------------------------------------------------------------------------------- (a)
mkdir -p "$OUT/a"
echo "== (a) encoder, tensor mode, --limit $CAP"
timeout "$T" "$vt" run --tensors --limit "$CAP" -o "$OUT/a/encoder.%p.jsonl" -- \
  python3 tests/gpu/encoder_cap.py "${ENC_ARGS[@]}" > "$OUT/a/stdout" 2> "$OUT/a/stderr"
rc=$?
cat "$OUT/a/stdout"; tail -15 "$OUT/a/stderr"
oom_type=$(grep '^OOM_TYPE ' "$OUT/a/stdout" | sed 's/^OOM_TYPE //')
oom_msg=$(grep '^OOM_MESSAGE ' "$OUT/a/stdout" | sed 's/^OOM_MESSAGE //')
echo "PyTorch raised: ${oom_type:-nothing} -- ${oom_msg}"
if [[ $rc -eq 3 ]]; then
  row "(a) tensor mode under $CAP ends in an OOM" PASS "exit 3 after $(result_json "$OUT/a/stdout" | python3 -c 'import json,sys; print(json.load(sys.stdin)["steps_done"])' 2>/dev/null) steps"
else
  row "(a) tensor mode under $CAP ends in an OOM" FAIL "exit code $rc (3 = OOM caught; 124 = timeout after ${T}s)"
fi
# What PyTorch raises in tensor mode for a cudaMalloc that fails on the real device, without the
# shim: in this mode every tensor goes through C10_CUDA_CHECK(cudaMalloc(...)), so the shim (which
# returns cudaErrorMemoryAllocation like the real API) must make PyTorch raise the same type.
native_type=$(PYTORCH_NO_CUDA_MEMORY_CACHING=1 timeout 60 python3 -c '
import torch
try:
    torch.empty(1 << 50, dtype=torch.uint8, device="cuda")
except Exception as e:
    print(type(e).__module__ + "." + type(e).__qualname__)' 2>/dev/null | tail -1)
oom_class=${oom_type%%:*}
echo "without the shim, tensor mode on a real OOM raises: ${native_type:-nothing}"
if [[ $oom_type == *OutOfMemoryError* ]]; then
  row "(a) PyTorch raises torch.OutOfMemoryError" PASS "$oom_type"
elif [[ -n $native_type && $oom_class == *"${native_type##*.}"* ]]; then
  row "(a) PyTorch raises what it raises without the shim" PASS "${oom_type:0:60} under the cap = ${native_type} on a real OOM without the shim (tensor mode: C10_CUDA_CHECK(cudaMalloc))"
else
  row "(a) PyTorch raises torch.OutOfMemoryError" FAIL "it raised ${oom_type:-nothing}: ${oom_msg:0:90}; without the shim: ${native_type:-?}"
fi
trace=$(newest_trace "$OUT/a")
if [[ -n $trace ]]; then
  "$vt" oom --no-replay "$trace" > "$OUT/a/oom.txt" 2>&1
  "$vt" oom --json --no-replay "$trace" > "$OUT/a/oom.json" 2> "$OUT/a/oom.err"
  head -30 "$OUT/a/oom.txt"
  verdict=$(python3 - "$OUT/a/oom.json" "$cap_bytes" "$(result_json "$OUT/a/stdout")" <<'PY'
import json, sys
oom = json.load(open(sys.argv[1])); cap = int(sys.argv[2])
res = json.loads(sys.argv[3]) if sys.argv[3] else {}
if not oom.get("ooms"):
    print("FAIL no oom event in the trace"); sys.exit()
o = oom["ooms"][0]; f = o["figures"]
gib = lambda b: f"{b / 2**30:.2f} GiB"
why = [f"diagnosis {o['diagnosis']}", f"request {gib(f.get('request_bytes', 0))}",
       f"capacity {gib(f.get('device_total_bytes', 0))}", f"free {gib(f.get('device_free_bytes', 0))}",
       f"reserved {gib(f.get('reserved_bytes', 0))}"]
# The diagnosis must follow from the figures: capacity when all the free memory is below the
# request, else fragmentation (the free memory exists in holes) unless the replays showed that
# no layout rescues it (Note [fragmentation that no layout rescues]), which also reads capacity.
free_all = f.get("device_free_bytes", 0) + f.get("cache_free_bytes", 0)
req = f.get("request_bytes", 0)
follows = (o["diagnosis"] == "capacity") if free_all < req else o["diagnosis"] in ("fragmentation", "capacity")
why.append(f"free in all {gib(free_all)} {'<' if free_all < req else '>='} request")
ok = follows and abs(f.get("device_total_bytes", 0) - cap) < 2**20
mg = res.get("mem_get_info")
if mg and mg[1] > 0:
    tf = f.get("device_free_bytes", 0) + f.get("cache_free_bytes", 0)
    why.append(f"torch.cuda.mem_get_info after the error: free {gib(mg[0])} total {gib(mg[1])} "
               f"(trace: device free + cache free {gib(tf)})")
    # measured after the exception unwound (tensors freed since then add to it): at least tf
    ok = ok and abs(mg[1] - f.get("device_total_bytes", 0)) < 2**20 and mg[0] + 2**21 >= tf
print(("PASS " if ok else "FAIL ") + "; ".join(why))
PY
)
  row "(a) vramtrace oom: diagnosis follows the figures = PyTorch's view" "${verdict%% *}" "${verdict#* }"
else
  row "(a) vramtrace oom: diagnosis follows the figures = PyTorch's view" FAIL "no trace written in $OUT/a"
fi

# ---------------------------------------------------------------------------------------- (a2)
mkdir -p "$OUT/a2"
echo "== (a2) encoder, PyTorch's caching allocator, --limit $CAP"
timeout "$T" "$vt" run --limit "$CAP" -o "$OUT/a2/encoder.%p.jsonl" -- \
  python3 tests/gpu/encoder_cap.py "${ENC_ARGS[@]}" > "$OUT/a2/stdout" 2> "$OUT/a2/stderr"
rc=$?
cat "$OUT/a2/stdout"; tail -8 "$OUT/a2/stderr"
trace=$(newest_trace "$OUT/a2")
if [[ -n $trace ]]; then "$vt" oom --json --no-replay "$trace" > "$OUT/a2/oom.json" 2> "$OUT/a2/oom.err"; fi
verdict=$(python3 - "$OUT/a2/stdout" "$OUT/a2/oom.json" "$cap_bytes" "$rc" <<'PY'
import json, re, sys
out = open(sys.argv[1]).read(); cap = int(sys.argv[3]); rc = int(sys.argv[4])
t = re.search(r"^OOM_TYPE (.*)$", out, re.M); m = re.search(r"^OOM_MESSAGE (.*)$", out, re.M)
if rc != 3 or not t:
    print(f"FAIL exit code {rc}, no OOM caught"); sys.exit()
msg = m.group(1) if m else ""
size = lambda s, u: float(s) * {"bytes": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30}[u]
tot = re.search(r"total capacity of ([0-9.]+) (GiB|MiB)", msg)
fre = re.search(r"of which ([0-9.]+) (GiB|MiB|KiB|bytes) is free", msg)
req = re.search(r"Tried to allocate ([0-9.]+) (GiB|MiB|KiB|bytes)", msg)
why = [t.group(1)]
ok = "OutOfMemoryError" in t.group(1) and tot is not None
try:
    o = json.load(open(sys.argv[2]))["ooms"][-1]; f = o["figures"]
except Exception as e:
    print(f"FAIL {t.group(1)}; no oom in the trace ({e})"); sys.exit()
g = lambda b: f"{b / 2**30:.2f} GiB"
if tot:
    pt = size(*tot.groups())
    why.append(f"PyTorch total {tot.group(1)} {tot.group(2)} vs cap {g(cap)} vs trace {g(f['device_total_bytes'])}")
    ok = ok and abs(pt - cap) <= 0.006 * 2**30 and abs(pt - f["device_total_bytes"]) <= 0.006 * 2**30
if fre:
    # PyTorch's "is free" is cudaMemGetInfo's free at its failure, and its "reserved by PyTorch
    # but unallocated" its cache's free memory: the trace's free on the device and free in the
    # cache at the same OOM (its own allocator's cache is not free memory to the driver).
    pf = size(*fre.groups())
    tf = f.get("device_free_bytes", 0)
    why.append(f"free {fre.group(1)} {fre.group(2)} vs trace device free {g(tf)}")
    ok = ok and abs(pf - tf) <= 0.006 * 2**30 + 2**20
    ru = re.search(r"([0-9.]+) (GiB|MiB|KiB|bytes) is reserved by PyTorch but unallocated", msg)
    if ru:
        pc = size(*ru.groups()); tc = f.get("cache_free_bytes", 0)
        why.append(f"reserved but unallocated {ru.group(1)} {ru.group(2)} vs trace cache free {g(tc)}")
        ok = ok and abs(pc - tc) <= 0.006 * 2**30 + 2**20
if req:
    why.append(f"request {req.group(1)} {req.group(2)} vs trace {g(f.get('request_bytes', 0))} (segment {g(f.get('segment_bytes', f.get('request_bytes', 0)))})")
why.append(f"diagnosis {o['diagnosis']}")
ok = ok and o["diagnosis"] == "capacity"
print(("PASS " if ok else "FAIL ") + "; ".join(why))
PY
)
row "(a2) native allocator: OOM message = vramtrace oom" "${verdict%% *}" "${verdict#* }"

# ---------------------------------------------------------------------------------------- (b)
mkdir -p "$OUT/b"
echo "== (b) encoder, tensor mode, --limit $BIG_CAP"
timeout "$T" "$vt" run --tensors --limit "$BIG_CAP" -o "$OUT/b/encoder.%p.jsonl" -- \
  python3 tests/gpu/encoder_cap.py "${ENC_ARGS[@]}" > "$OUT/b/stdout" 2> "$OUT/b/stderr"
rc=$?
tail -4 "$OUT/b/stdout"; tail -8 "$OUT/b/stderr"
if [[ $rc -eq 0 ]] && result_json "$OUT/b/stdout" | grep -q '"ok": true'; then
  row "(b) tensor mode under $BIG_CAP passes" PASS "$(grep -c '^step ' "$OUT/b/stdout") steps"
else
  row "(b) tensor mode under $BIG_CAP passes" FAIL "exit code $rc; $(grep '^OOM_' "$OUT/b/stdout" | tr '\n' ' ' | cut -c1-100)"
fi

# ---------------------------------------------------------------------------------------- (c)
mkdir -p "$OUT/c"
echo "== (c) JAX under --limit $CAP"
if python3 -c 'import jax' 2>/dev/null; then
  timeout "$T" "$vt" run --limit "$CAP" -o "$OUT/c/jax.%p.jsonl" -- python3 tests/gpu/jax_cap.py \
    > "$OUT/c/stdout" 2> "$OUT/c/stderr"
  rc=$?
  tail -3 "$OUT/c/stdout"; tail -6 "$OUT/c/stderr"
  verdict=$(python3 - "$(result_json "$OUT/c/stdout")" "$cap_bytes" "$rc" <<'PY'
import json, os, sys
if not sys.argv[1]:
    print(f"FAIL no RESULT line (exit {sys.argv[3]})"); sys.exit()
r = json.loads(sys.argv[1]); cap = int(sys.argv[2]); lim = r.get("bytes_limit")
frac = float(os.environ.get("XLA_PYTHON_CLIENT_MEM_FRACTION", "0.75"))
if not lim:
    print(f"FAIL no bytes_limit in memory_stats: {r.get('memory_stats')}"); sys.exit()
ratio = lim / cap
ok = lim <= cap and abs(ratio - frac) <= 0.02
print(f"{'PASS' if ok else 'FAIL'} cap {cap / 2**30:.2f} GiB, JAX bytes_limit {lim / 2**30:.2f} GiB = {ratio:.3f} x cap "
      f"(expected {frac}); {r['device']}")
PY
)
  row "(c) JAX preallocation sized from the cap" "${verdict%% *}" "${verdict#* }"
else
  row "(c) JAX preallocation sized from the cap" SKIP "jax is not installed"
fi

# ---------------------------------------------------------------------------------------- (d)
mkdir -p "$OUT/d"
echo "== (d) memory queries, without and with --limit $CAP"
timeout "$T" env LD_PRELOAD="$lib" python3 tests/gpu/cap_queries.py > "$OUT/d/uncapped.stdout" 2> "$OUT/d/uncapped.stderr"
timeout "$T" "$vt" run --limit "$CAP" -o "$OUT/d/q.%p.jsonl" -- python3 tests/gpu/cap_queries.py \
  > "$OUT/d/capped.stdout" 2> "$OUT/d/capped.stderr"
cat "$OUT/d/uncapped.stdout" "$OUT/d/capped.stdout"
verdict=$(python3 - "$(result_json "$OUT/d/uncapped.stdout")" "$(result_json "$OUT/d/capped.stdout")" "$cap_bytes" <<'PY'
import json, sys
if not sys.argv[1] or not sys.argv[2]:
    print("FAIL a query run printed no RESULT (see $OUT/d/*.stderr)"); sys.exit()
u = json.loads(sys.argv[1]); c = json.loads(sys.argv[2]); cap = int(sys.argv[3])
g = lambda b: f"{b / 2**30:.2f} GiB"
near = lambda a, b: abs(a - b) < 2**20
phys = u["mem_get_info"][1]
ok = near(c["mem_get_info"][1], min(cap, phys)) and c["mem_get_info"][0] <= c["mem_get_info"][1]
ok = ok and near(c["props_total"], min(cap, phys)) and near(u["props_total"], phys)
why = [f"uncapped total {g(phys)}, props {g(u['props_total'])}",
       f"capped mem_get_info ({g(c['mem_get_info'][0])} free, {g(c['mem_get_info'][1])} total), props {g(c['props_total'])}"]
if c.get("nvml"):
    ok = ok and near(c["nvml"]["total"], min(cap, phys)) and c["nvml"]["free"] <= c["nvml"]["total"]
    why.append(f"NVML ({c['nvml']['via']}) total {g(c['nvml']['total'])} free {g(c['nvml']['free'])}; "
               f"uncapped NVML total {g(u['nvml']['total']) if u.get('nvml') else '?'}")
else:
    why.append(f"NVML not checked: {c.get('nvml_error')}")
print(("PASS " if ok else "FAIL ") + "; ".join(why))
PY
)
row "(d) mem_get_info, properties, NVML = cap" "${verdict%% *}" "${verdict#* }"

echo
echo "== summary ($(( $(date +%s) - start )) s; files in $OUT)"
cat "$OUT/summary.txt"
