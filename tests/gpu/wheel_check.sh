#!/usr/bin/env bash
# The wheel on the GPU machine, as a user installs it: `pip install --no-index` of the wheel built
# by scripts/portable.sh --wheel into the machine's own Python, then, with nothing of a build on
# any path:
#   - `vramtrace run` of a PyTorch training (tests/gpu/torch_train.py): the program's own RESULT
#     line, a trace, PyTorch's tensor-level pickle beside it, and `vramtrace summary` of both;
#   - `python -m vramtrace summary` of that trace gives the same text;
#   - `vramtrace run` of a CuPy program (tests/gpu/cupy_check.py) where CuPy is installed;
#   - `vramtrace export` of both runs to memory-viz, opened by `python -m torch.cuda._memory_viz`
#     (tests/gpu/memory_viz_check.sh) beside PyTorch's own snapshot of the run, and to Perfetto's
#     JSON, read back with counters.
# Usage: tests/gpu/wheel_check.sh WHEEL OUTDIR      Exit 0 when every check held.
set -uo pipefail
wheel=$(realpath "$1")
out=$2
mkdir -p "$out"
out=$(realpath "$out")
here=$(cd "$(dirname "$0")" && pwd)
fail=0
check() {  # name command...
  local name=$1; shift
  if "$@" >"$out/$name.out" 2>&1; then echo "ok    $name"; else echo "FAIL  $name (exit $?; $out/$name.out)"; tail -20 "$out/$name.out"; fail=1; fi
}
# Into the Python that runs the programs (the one on PATH, with PyTorch), as a user would; where
# that environment has no pip (uv makes such ones), with another Python's pip into a --target
# directory put on PYTHONPATH, pip's documented way for a read-only or pip-less environment.
py=$(command -v python3)
clean=(env -u VRAMTRACE_LIB -u VRAMTRACE_BUILD_DIR -u VRAMTRACE_PYTHON_DIR -u LD_LIBRARY_PATH -u LD_PRELOAD)
if "$py" -m pip --version >/dev/null 2>&1; then
  check install "$py" -m pip install --no-index --disable-pip-version-check "$wheel"
  echo "installed into $("$py" -c 'import sys; print(sys.prefix)') with its pip"
else
  pip_py=$(for p in /usr/bin/python3 /usr/local/bin/python3; do "$p" -m pip --version >/dev/null 2>&1 && echo "$p" && break; done)
  [[ -n $pip_py ]] || { echo "FAIL  no Python with pip on this machine"; exit 1; }
  check install "$pip_py" -m pip install --no-index --disable-pip-version-check --target "$out/site" "$wheel"
  echo "installed with $pip_py's pip into $out/site (PYTHONPATH; the command in $out/site/bin)"
  clean+=(PYTHONPATH="$out/site" PATH="$out/site/bin:$PATH")
fi
check version "${clean[@]}" vramtrace --version
lib=$("${clean[@]}" python3 -c 'import vramtrace; print(vramtrace.library_path())')
echo "libvramtrace.so: $lib"
check ldd_shim ldd "$lib"
if grep -v -E 'libc\.so|libm\.so|libdl\.so|libpthread\.so|ld-linux|linux-vdso' "$out/ldd_shim.out" | grep -q .; then
  echo "FAIL  the shim needs more than glibc:"; cat "$out/ldd_shim.out"; fail=1
fi
check torch_run "${clean[@]}" vramtrace run -o "$out/torch.jsonl" -- python3 "$here/torch_train.py" --model gpt2-small --steps 4
grep -q '^RESULT ' "$out/torch_run.out" || { echo "FAIL  torch_run printed no RESULT line"; fail=1; }
ls "$out"/torch*.torch.pickle >/dev/null 2>&1 || { echo "FAIL  no tensor-level pickle beside the trace"; ls "$out"; fail=1; }
check torch_summary "${clean[@]}" vramtrace summary "$out"/torch*.jsonl
check module_summary "${clean[@]}" python -m vramtrace summary "$out"/torch*.jsonl
cmp -s "$out/torch_summary.out" "$out/module_summary.out" || { echo "FAIL  python -m vramtrace differs from vramtrace"; fail=1; }
if python3 -c "import cupy" 2>/dev/null; then
  check cupy_run "${clean[@]}" vramtrace run -o "$out/cupy.jsonl" -- python3 "$here/cupy_check.py"
  check cupy_summary "${clean[@]}" vramtrace summary "$out"/cupy*.jsonl
fi
# The exports of both runs, opened by PyTorch's own viewer code (tests/gpu/memory_viz_check.sh):
# the PyTorch run at its tensor level (PyTorch's history) and at the shim's device level, and
# the CuPy run, which PyTorch's tools have never been able to show.
viz=()
if ls "$out"/torch*.jsonl >/dev/null 2>&1; then
  t=$(ls "$out"/torch*.jsonl | head -1)
  check export_torch "${clean[@]}" vramtrace export "$t" --format memory-viz -o "$out/torch_level.pickle" && viz+=("$out/torch_level.pickle")
  check export_torch_device "${clean[@]}" vramtrace export "$t" --level device --format memory-viz -o "$out/torch_device.pickle" \
    && viz+=("$out/torch_device.pickle")
  check perfetto_torch "${clean[@]}" vramtrace export "$t" --format perfetto -o "$out/torch.perfetto.json"
fi
if ls "$out"/cupy*.jsonl >/dev/null 2>&1; then
  c=$(ls "$out"/cupy*.jsonl | head -1)
  check export_cupy "${clean[@]}" vramtrace export "$c" --format memory-viz -o "$out/cupy.pickle" && viz+=("$out/cupy.pickle")
  check perfetto_cupy "${clean[@]}" vramtrace export "$c" --format perfetto -o "$out/cupy.perfetto.json"
fi
for j in "$out"/*.perfetto.json; do
  [[ -e $j ]] || continue
  check "json_$(basename "$j" .perfetto.json)" python3 -c "import json,sys; d=json.load(open(sys.argv[1])); e=d['traceEvents']; \
c=[x for x in e if x.get('ph')=='C']; assert c, 'no counters'; print(len(e), 'events,', len(c), 'counter points')" "$j"
done
# PyTorch's own snapshot of the same run, through the same viewer code, for comparison.
native=$(ls "$out"/torch*.torch.pickle 2>/dev/null | head -1)
[[ -n $native ]] && viz+=("$native")
if ((${#viz[@]})); then
  "$here/memory_viz_check.sh" "$out/viz" "${viz[@]}" || fail=1
fi
exit $fail
