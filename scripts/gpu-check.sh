#!/usr/bin/env bash
# Every check of vramtrace that needs a GPU, as named steps run within one time budget.
#
# Usage:
#   scripts/gpu-check.sh --list                         the steps, what each checks, its typical time
#   scripts/gpu-check.sh carry [--no-build] [DEST]      on the CPU machine: build what the GPU steps
#                                                       need and stage it in DEST (default .carry/gpu);
#                                                       --no-build stages what the build already holds
#   scripts/gpu-check.sh [--budget SECONDS] [STEP...]   on the GPU machine: run the steps in the order
#                                                       given (default: every GPU step, cheapest first)
#
# The GPU machine has no -dev packages to build with (docs/h200.md), so the binaries are built on
# the CPU machine and carried over: `scripts/gpu-check.sh carry` there, then, with .carry carried,
#   scripts/gpu-check.sh --budget 540 cap multi leak
# A step starts only when the budget has at least its typical minimum left, gets the rest of the
# budget as its time limit (the Python steps also as their own --budget), and writes into
# $OUT/<step>/. A step that does not start is reported as SKIP with the reason. The summary table
# is printed at the end and written to $OUT/gpu-check.md. Figures from these steps, with the
# commands that produced them, are in docs/compatibility.md and docs/benchmarks.md.
#
# Environment:
#   VRAMTRACE_BUILD_DIR  the binaries: a carry directory (bin/vramtrace, shim/libvramtrace.so,
#                        gpu/alloc_check_{static,shared}, gpu/{pointer,reuse}_check, gpu/count_probe.so,
#                        lib/, share/) or a build
#                        directory (default: .carry/gpu if it holds the shim, else build/, then
#                        build-release/)
#   OUT                  where results go (default ./gpu-check-out)
#   COMPAT_ARGS, BENCH_ARGS, WHATIF_ARGS  extra arguments of tests/gpu/gpu_compat.py,
#                        tests/gpu/gpu_bench.py and tests/gpu/whatif_accuracy.py
#                        (BENCH_ARGS='--rounds 3 --models gpt2 --variants native,front',
#                        WHATIF_ARGS='--workloads bert,gpt2')
#   STEPS, ROUNDS        training steps and rounds of step trace (default 20 and 3)
#   STEP_TIMEOUT         per-run limit inside steps cap and multi (default 100 s)
#   VRAMTRACE_GPU_BUILD  build directory of `carry` (default build-gpu, a Release build)
# Exit: 0 when no step failed, 1 when one did, 2 on a usage error, 77 (ctest's skip code) when no
# GPU is present.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2

# name  typical-minimum-seconds  GPUs  what it checks
STEP_TABLE='compat-quick 60 1 the nvcc check programs (static and shared cudart) and compute-sanitizer under the shim: results, intercepted calls (ctest "gpu: compatibility script")
cap 90 1 a smaller GPU on a bigger one (--limit): tensor-mode and native PyTorch OOMs explained with the figures PyTorch sees, JAX preallocation and the memory queries (NVML too) report the cap
multi 60 2 several processes and GPUs: two-rank DDP traced per rank and merged, a rank on another GPU flagged, one process on two GPUs
leak 90 1 `vramtrace check --no-leaks` on a real training loop with and without a 1 MiB-per-step leak, from PyTorch history and from the shim
trace 150 1 `vramtrace run --tensors` of GPT-2 training: its replay reproduces the trailer, full tracing costs <= 1.03x step time
compat 120 1 the compatibility table: nvcc programs, PyTorch (four allocator modes), CuPy, JAX without and with the shim, bit-identical results and intercepted calls, plus benchmark rows
bench 150 1 interleaved step-time rounds: native, the shim in front of PyTorch, tensor mode under each reuse policy, traced
reuse 60 1 pointer queries answer for the block (base, size, buffer id; a memset of that size spares the neighbours; IPC) and reuse safety: a cross-stream free and reallocate in CUDA and the PyTorch record_stream pattern, 20 trials under each reuse policy (ctest "gpu: reuse safety and pointer queries")
wheel 60 1 the wheel of scripts/portable.sh --wheel (dist/, carried) installed with pip --no-index into a virtual environment of the machine'"'"'s Python, then `vramtrace run` of a PyTorch training and a CuPy program with nothing else on any path
whatif 300 1 what-if accuracy: replay peak reserved vs the real run under each setting, per workload (the error bound of the verdicts; not in the default steps: about 10 minutes for all four workloads)
fraction 200 1 replay verdicts under per_process_memory_fraction against the real program under the same cap, at caps around each setting'"'"'s replayed peak (every fits ran, every does-not-fit ran out; not in the default steps: about 4 minutes)
verdicts 240 1 programs written to break the verdicts (fragmentation OOMs of split_waste.py and BERT recorded at both levels, garbage collection under a cap and under PyTorch'"'"'s fraction, runs killed by SIGKILL), each setting run by tune: tests/gpu/verdict_table.py compares oom'"'"'s and replay'"'"'s firm verdicts with the real outcome (not in the default steps: about 6-9 minutes)'
DEFAULT_STEPS=(reuse cap multi leak trace compat bench)

list_steps() {
  printf '%-13s %-8s %s\n' step minimum "what it checks"
  printf '%-13s %-8s %s\n' carry - "(CPU machine) build vramtrace, libvramtrace.so, the nvcc check programs and the counting probe (Release) and stage them in .carry/gpu"
  while read -r name min gpus what; do
    printf '%-13s %-8s %s%s\n' "$name" "${min}s" "$what" "$( ((gpus > 1)) && echo " [needs $gpus GPUs]")"
  done <<<"$STEP_TABLE"
}

step_field() {  # step field(2 = minimum, 3 = GPUs)
  awk -v s="$1" -v f="$2" '$1 == s {print $f}' <<<"$STEP_TABLE"
}

# ------------------------------------------------------------------------------------ carry
# Builds on the CPU machine what the GPU steps need and stages it in one folder to carry (a few
# MiB): the layout of a build directory (bin/, shim/, gpu/) plus lib/ with every library
# `vramtrace` loads that is not glibc's or the C++ runtime (the GPU machine lacks the Debian
# packages: simdjson, fmt, ...).
carry() {
  local dest=.carry/gpu build=${VRAMTRACE_GPU_BUILD:-build-gpu} do_build=1 a
  for a in "$@"; do
    case $a in
      --no-build) do_build=0 ;;
      -*) echo "gpu-check carry: unknown option $a" >&2; return 2 ;;
      *) dest=$a ;;
    esac
  done
  if ((do_build)); then
    cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DVRAMTRACE_BUILD_BENCH=OFF \
      -DVRAMTRACE_BUILD_TESTS=ON >/dev/null || return 1
    local targets=(vramtrace vramtrace_shim)
    # The nvcc programs exist only where nvcc was found; without them the compat steps build them
    # on the GPU machine.
    if cmake --build "$build" --target help 2>/dev/null | grep -q vramtrace_gpu_programs; then
      targets+=(vramtrace_gpu_programs)
    fi
    cmake --build "$build" -j"$(nproc)" --target "${targets[@]}" || return 1
  fi
  local f
  for f in "$build/bin/vramtrace" "$build/shim/libvramtrace.so"; do
    [[ -e $f ]] || { echo "gpu-check carry: no $f (build it, or leave out --no-build)" >&2; return 2; }
  done
  rm -rf "$dest"
  mkdir -p "$dest/bin" "$dest/shim" "$dest/gpu" "$dest/lib"
  cp "$build/bin/vramtrace" "$dest/bin/"
  cp "$build/shim/libvramtrace.so" "$dest/shim/"
  # Debug information stays here: the carried copies must fit the device tool's 64 MiB.
  strip --strip-debug "$dest/bin/vramtrace" "$dest/shim/libvramtrace.so"
  # The Python start-up hook `vramtrace run` finds at ../share/vramtrace/python (tensor level).
  mkdir -p "$dest/share/vramtrace/python/vramtrace/_boot"
  cp python/vramtrace/torch_level.py "$dest/share/vramtrace/python/vramtrace/"
  cp python/vramtrace/_boot/sitecustomize.py "$dest/share/vramtrace/python/vramtrace/_boot/"
  for p in alloc_check_static alloc_check_shared pointer_check reuse_check; do
    [[ -x $build/gpu/$p ]] && cp "$build/gpu/$p" "$dest/gpu/"
  done
  # The counting probe of tests/gpu/count_probe.c (plain C, glibc only): an independent count of
  # a program's calls where PyTorch keeps none.
  cc -O2 -shared -fPIC -o "$dest/gpu/count_probe.so" tests/gpu/count_probe.c -ldl || return 1
  ldd "$build/bin/vramtrace" | awk '/=> \// {print $3}' | while read -r lib; do
    case "$(basename "$lib")" in
      libc.so*|libm.so*|libstdc++.so*|libgcc_s.so*|ld-linux*|libpthread.so*|libdl.so*|librt.so*) ;;
      *) cp -L "$lib" "$dest/lib/" ;;
    esac
  done
  echo "gpu-check: staged in $dest ($(du -sh "$dest" | cut -f1)); carry .carry to the GPU machine"
}

# ------------------------------------------------------------------------------------ steps
find_build() {
  if [[ -n ${VRAMTRACE_BUILD_DIR:-} ]]; then echo "$VRAMTRACE_BUILD_DIR"; return; fi
  local d
  for d in .carry/gpu build build-release; do
    [[ -e $d/shim/libvramtrace.so ]] && { echo "$d"; return; }
  done
  echo .carry/gpu
}

# The command of one step, given the seconds it may use (the Python steps stop starting new runs
# 15 s before their own budget ends, so they get a little less than the time limit).
step_command() {  # step seconds
  local t=$(( $2 > 30 ? $2 - 20 : $2 ))
  local -a extra=()
  case $1 in
    compat-quick) cmd=(python3 tests/gpu/gpu_compat.py --ctest --budget "$t" --build "$B") ;;
    compat) read -r -a extra <<<"${COMPAT_ARGS:-}"
            cmd=(python3 tests/gpu/gpu_compat.py --budget "$t" --build "$B" "${extra[@]}") ;;
    bench) read -r -a extra <<<"${BENCH_ARGS:-}"
           cmd=(python3 tests/gpu/gpu_bench.py --budget "$t" --build "$B" "${extra[@]}") ;;
    trace) cmd=(tests/gpu/trace_check.sh) ;;
    cap) cmd=(tests/gpu/cap_check.sh) ;;
    multi) cmd=(tests/gpu/multi_check.sh) ;;
    leak) cmd=(tests/gpu/leak_check.sh "$B" "$OUT/leak") ;;
    reuse) cmd=(tests/gpu/reuse_check.sh "$B" "$OUT/reuse") ;;
    wheel) local w
           w=$(ls dist/vramtrace-*-manylinux_*.whl 2>/dev/null | head -1)
           cmd=(tests/gpu/wheel_check.sh "${w:-dist/no-wheel-built.whl}" "$OUT/wheel") ;;
    whatif) read -r -a extra <<<"${WHATIF_ARGS:-}"
            cmd=(python3 tests/gpu/whatif_accuracy.py --budget "$t" --build "$B" --out "$OUT/whatif" "${extra[@]}") ;;
    fraction) cmd=(python3 tests/gpu/fraction_check.py --budget "$t" --build "$B" --out "$OUT/fraction") ;;
    verdicts) cmd=(bash -c "tests/gpu/verdict_check.sh '$B' '$OUT/verdicts' && python3 tests/gpu/verdict_table.py '$OUT/verdicts' --markdown '$OUT/verdicts/table.md'") ;;
  esac
}

# A step's own verdict where its exit code does not carry it: the compatibility table and the cap
# check print FAIL rows and exit 0.
step_failed_rows() {  # step
  case $1 in
    compat) grep -qE '\| (FAIL|ERROR)' "$OUT/compat/gpu-compat.md" 2>/dev/null ;;
    cap) grep -qE ' FAIL  ' "$OUT/cap/summary.txt" 2>/dev/null ;;
    *) return 1 ;;
  esac
}

budget=540
steps=()
while (($#)); do
  case $1 in
    --list) list_steps; exit 0 ;;
    --budget) [[ ${2:-} =~ ^[0-9]+$ ]] || { echo "gpu-check: --budget wants whole seconds" >&2; exit 2; }
              budget=$2; shift ;;
    carry) shift; carry "$@"; exit $? ;;
    -*) echo "gpu-check: unknown option $1 (see --list)" >&2; exit 2 ;;
    *) [[ -n $(step_field "$1" 2) ]] || { echo "gpu-check: unknown step $1 (see --list)" >&2; exit 2; }
       steps+=("$1") ;;
  esac
  shift
done
((${#steps[@]})) || steps=("${DEFAULT_STEPS[@]}")

if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
  echo "gpu-check: no GPU on this machine: skipped"
  exit 77
fi
gpus=$(nvidia-smi -L | grep -c '^GPU ')
B=$(find_build)
[[ -e $B/shim/libvramtrace.so ]] || {
  echo "gpu-check: no $B/shim/libvramtrace.so: run scripts/gpu-check.sh carry on the CPU machine (or set VRAMTRACE_BUILD_DIR)" >&2
  exit 2
}
B=$(cd "$B" && pwd)
OUT=${OUT:-$PWD/gpu-check-out}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
export VRAMTRACE_BUILD_DIR=$B
export VRAMTRACE_LIB=$B/shim/libvramtrace.so
export LD_LIBRARY_PATH="$B/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"  # vramtrace's own libraries
start=$(date +%s)
echo "gpu-check: ${#steps[@]} step(s) within ${budget}s on $gpus GPU(s); binaries $B; results in $OUT"

names=() results=() secs=() notes=()
for s in "${steps[@]}"; do
  min=$(step_field "$s" 2) need=$(step_field "$s" 3)
  left=$(( budget - ($(date +%s) - start) ))
  t0=$(date +%s)
  if ((gpus < need)); then
    r=SKIP note="needs $need GPUs, this machine has $gpus"
  elif ((left < min)); then
    r=SKIP note="budget: ${left}s left, the step needs about ${min}s"
  else
    mkdir -p "$OUT/$s"
    step_command "$s" "$left"
    echo "== $s (${left}s left): ${cmd[*]}"
    OUT=$OUT/$s timeout --kill-after=10 "$left" "${cmd[@]}" 2>&1 | tee "$OUT/$s.log"
    rc=${PIPESTATUS[0]}
    if ((rc == 124 || rc == 137)); then
      r=FAIL note="stopped at the budget (${left}s); partial output in $OUT/$s"
    elif ((rc != 0)); then
      r=FAIL note="exit $rc; log $OUT/$s.log"
    elif step_failed_rows "$s"; then
      r=FAIL note="FAIL rows in its table ($OUT/$s)"
    else
      r=PASS note="$OUT/$s"
    fi
  fi
  names+=("$s") results+=("$r") secs+=("$(( $(date +%s) - t0 ))") notes+=("$note")
done

{
  echo "GPU checks, $(date -u '+%Y-%m-%d %H:%M UTC'), $(( $(date +%s) - start ))s of ${budget}s;" \
       "command: scripts/gpu-check.sh --budget $budget ${steps[*]}"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | sed 's/^/GPU: /'
  echo
  echo "| step | result | seconds | notes |"
  echo "|---|---|---|---|"
  for i in "${!names[@]}"; do
    echo "| ${names[$i]} | ${results[$i]} | ${secs[$i]} | ${notes[$i]} |"
  done
} >"$OUT/gpu-check.md"
echo
cat "$OUT/gpu-check.md"
for r in "${results[@]}"; do [[ $r == FAIL ]] && exit 1; done
exit 0
