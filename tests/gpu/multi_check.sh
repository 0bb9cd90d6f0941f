#!/usr/bin/env bash
# Step `multi` of scripts/gpu-check.sh, on a machine with two GPUs: several processes and devices
# (docs/reports.md).
#  (a) a two-process DDP training (torchrun, NCCL) under `vramtrace run` gives two traces, named
#      by rank, and a merged summary and HTML report: both ranks on their own GPU, none flagged;
#  (b) the same job with a deliberate bug (rank 1 also creates tensors on cuda:0): rank 1, and
#      only rank 1, is flagged for memory on device 0;
#  (c) one process placing layers on cuda:0 and cuda:1: its one trace holds both devices.
# Each step that fails prints why; the script goes on and ends with a PASS/FAIL table (exit 1 if
# any failed). Total well under 4 minutes.
#
# Needs the carry directory of `scripts/gpu-check.sh carry` (bin/vramtrace, shim/libvramtrace.so,
# and vramtrace's libraries in lib/) or a build directory, and python3 with torch (CUDA, NCCL).
#   scripts/gpu-check.sh carry                                          # on the CPU machine
#   VRAMTRACE_BUILD_DIR=.carry/gpu OUT=/tmp/out tests/gpu/multi_check.sh   # on the GPU machine
# (or scripts/gpu-check.sh multi, which does the same within its time budget)
set -uo pipefail
cd "$(dirname "$0")/../.."
repo=$(pwd)
B=${VRAMTRACE_BUILD_DIR:-.carry/gpu}
B=$(cd "$B" && pwd)
vt="$B/bin/vramtrace"
export LD_LIBRARY_PATH="$B/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"  # vramtrace's own libraries
export VRAMTRACE_LIB="$B/shim/libvramtrace.so"
OUT=${OUT:-$(mktemp -d /tmp/vramtrace-multi-XXXXXX)}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
steps=${STEPS:-5}
limit=${STEP_TIMEOUT:-100}
echo "output in $OUT"

declare -a names results reasons
record() {  # name PASS|FAIL reason
  names+=("$1"); results+=("$2"); reasons+=("$3")
  echo "== $1: $2${3:+ ($3)}"
}

nvidia-smi --query-gpu=index,name,memory.total --format=csv,noheader 2>&1 | tee "$OUT/gpus.txt"
python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "gpus", torch.cuda.device_count())' \
  2>&1 | tee "$OUT/torch.txt"

# Checks on `vramtrace summary --json DIR`: python3 check.py MODE summary.json [expected traces]
cat > "$OUT/check.py" <<'PY'
import json, sys
mode, path = sys.argv[1], sys.argv[2]
j = json.load(open(path))
def fail(msg):
    print("FAIL: " + msg); sys.exit(1)
if mode in ("ddp", "bug"):
    p = j.get("processes")
    if p is None: fail("no merged process view: fewer than two traces were read")
    labels = [x["label"] for x in p["processes"]]
    print("processes:", labels, "cross_device:", p["cross_device"])
    for c in p["cells"]:
        print("  %-10s device %d: peak allocated %.1f MiB, peak reserved %.1f MiB" % (
            labels[c["process"]], c["device"], c["allocated_bytes.all.peak"] / 2**20, c["reserved_bytes.all.peak"] / 2**20))
    if p["imbalance"]: print("imbalance: %.2fx (device %d over device %d)" % (
        p["imbalance"]["ratio"], p["imbalance"]["most_loaded"], p["imbalance"]["least_loaded"]))
    if sorted(labels) != ["rank 0", "rank 1"]: fail("expected the processes rank 0 and rank 1, got %s" % labels)
    own = {x["label"]: x["own_device"] for x in p["processes"]}
    if own != {"rank 0": 0, "rank 1": 1}: fail("own devices %s, expected rank r -> device r (LOCAL_RANK)" % own)
    want = [] if mode == "ddp" else ["rank 1"]
    if p["cross_device"] != want: fail("flagged %s, expected %s" % (p["cross_device"], want))
    if mode == "bug":
        r1 = [x for x in p["processes"] if x["label"] == "rank 1"][0]
        if r1["foreign_devices"] != [0]: fail("rank 1's foreign devices %s, expected [0]" % r1["foreign_devices"])
        i1 = labels.index("rank 1")
        c = [c for c in p["cells"] if c["process"] == i1 and c["device"] == 0]
        if not c or c[0]["allocated_bytes.all.peak"] < 256 * 2**20:
            fail("rank 1 holds less than the 256 MiB the bug put on device 0: %s" % c)
    else:
        devs = sorted({c["device"] for c in p["cells"] if c["reserved_bytes.all.peak"] > 0})
        if devs != [0, 1]: fail("memory on devices %s, expected [0, 1]" % devs)
elif mode == "layers":
    if len(j["traces"]) != 1: fail("expected one trace, got %d" % len(j["traces"]))
    devs = {d["device"]: d["stats"] for d in j["traces"][0]["devices"]}
    for d, s in sorted(devs.items()):
        print("device %d: peak allocated %.1f MiB, peak reserved %.1f MiB" % (
            d, s["allocated_bytes.all.peak"] / 2**20, s["reserved_bytes.all.peak"] / 2**20))
    if sorted(devs) != [0, 1]: fail("devices in the trace: %s, expected [0, 1]" % sorted(devs))
    if any(devs[d]["allocated_bytes.all.peak"] <= 0 for d in devs): fail("a device with no allocation")
    # The second half of the model (on cuda:1) is the larger one.
    if devs[1]["allocated_bytes.all.peak"] <= devs[0]["allocated_bytes.all.peak"]:
        fail("device 1 should hold more than device 0 (its layers are larger)")
print("ok")
PY

# One torchrun job under `vramtrace run`, in its own directory (default trace names).
ddp_job() {  # dir extra-args...
  local dir="$1"; shift
  mkdir -p "$dir"
  (cd "$dir" && timeout "$limit" "$vt" run --tensors -- \
     python3 -m torch.distributed.run --standalone --nproc_per_node 2 "$repo/tests/gpu/ddp_train.py" --steps "$steps" "$@") \
     >"$dir/job.out" 2>"$dir/job.err"
}

merged_reports() {  # dir name: summary text, JSON, HTML from the directory's traces
  local dir="$1" name="$2"
  "$vt" summary "$dir" >"$OUT/$name.summary.txt" 2>"$OUT/$name.summary.err" &&
  "$vt" summary --json "$dir" >"$OUT/$name.summary.json" 2>>"$OUT/$name.summary.err" &&
  "$vt" report --force "$dir" -o "$OUT/$name.report.html" 2>>"$OUT/$name.summary.err"
}

check_ddp() {  # dir name mode
  local dir="$1" name="$2" mode="$3" n
  n=$(ls "$dir"/vramtrace.*.rank[01].*.jsonl 2>/dev/null | wc -l)
  if [ "$n" != 2 ]; then
    record "$name" FAIL "expected 2 traces named by rank in $dir, found $n: $(ls "$dir" | tr '\n' ' '); see $dir/job.err"
    tail -20 "$dir/job.err"; return
  fi
  if ! merged_reports "$dir" "$name"; then
    record "$name" FAIL "vramtrace summary/report failed: $(tail -3 "$OUT/$name.summary.err")"; return
  fi
  sed -n '1,/^$/p' "$OUT/$name.summary.txt"
  local msg
  if msg=$(python3 "$OUT/check.py" "$mode" "$OUT/$name.summary.json" 2>&1); then
    echo "$msg"; record "$name" PASS "2 traces, merged summary and report; $(grep -m1 -E '^(Imbalance|Balance)' "$OUT/$name.summary.txt")"
  else
    echo "$msg"; record "$name" FAIL "$(echo "$msg" | grep FAIL | head -1)"
  fi
}

# (a) DDP, correct
echo "== (a) DDP training, 2 processes"
if ddp_job "$OUT/a"; then check_ddp "$OUT/a" "(a) ddp" ddp
else record "(a) ddp" FAIL "the job failed (exit $?): $(tail -3 "$OUT/a/job.err" | tr '\n' ' ')"; fi

# (b) DDP with rank 1 also on cuda:0
echo "== (b) DDP training, rank 1 also allocates on cuda:0"
if ddp_job "$OUT/b" --bug; then check_ddp "$OUT/b" "(b) ddp bug" bug
else record "(b) ddp bug" FAIL "the job failed (exit $?): $(tail -3 "$OUT/b/job.err" | tr '\n' ' ')"; fi

# (c) one process, layers on both GPUs
echo "== (c) one process, layers on cuda:0 and cuda:1"
mkdir -p "$OUT/c"
if (cd "$OUT/c" && timeout "$limit" "$vt" run --tensors -o "$OUT/c/layers.%p.jsonl" -- \
      python3 "$repo/tests/gpu/two_gpu_layers.py" --steps "$steps") >"$OUT/c/job.out" 2>"$OUT/c/job.err"; then
  n=$(ls "$OUT"/c/layers.*.jsonl 2>/dev/null | wc -l)
  if [ "$n" != 1 ]; then
    record "(c) layers" FAIL "expected 1 trace, found $n"
  elif ! { "$vt" summary "$OUT"/c/layers.*.jsonl >"$OUT/c.summary.txt" &&
           "$vt" summary --json "$OUT"/c/layers.*.jsonl >"$OUT/c.summary.json" &&
           "$vt" report --force "$OUT"/c/layers.*.jsonl -o "$OUT/c.report.html"; } 2>"$OUT/c.summary.err"; then
    record "(c) layers" FAIL "vramtrace summary/report failed: $(tail -3 "$OUT/c.summary.err")"
  elif msg=$(python3 "$OUT/check.py" layers "$OUT/c.summary.json" 2>&1); then
    echo "$msg"; record "(c) layers" PASS "one trace, devices 0 and 1 traced separately"
  else
    echo "$msg"; record "(c) layers" FAIL "$(echo "$msg" | grep FAIL | head -1)"
  fi
else
  record "(c) layers" FAIL "the job failed (exit $?): $(tail -3 "$OUT/c/job.err" | tr '\n' ' ')"
fi

echo
printf '%-14s %-5s %s\n' step result detail
fail=0
for i in "${!names[@]}"; do
  printf '%-14s %-5s %s\n' "${names[$i]}" "${results[$i]}" "${reasons[$i]}"
  [ "${results[$i]}" = PASS ] || fail=1
done | tee "$OUT/results.txt"
grep -q FAIL "$OUT/results.txt" && exit 1
exit 0
