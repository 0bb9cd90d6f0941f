#!/usr/bin/env bash
# Installs the binary wheel with pip, offline, into a fresh virtual environment of this machine's
# Python (and, with --root ROOT, with the older root's Python and glibc), then uses it as a user
# would: `vramtrace --version` from the PATH, `python -m vramtrace`, and `vramtrace run` of a
# fake-driver program (tests/shim) whose trace `vramtrace summary` must read back. Fails on the
# first step that does not work.
#
# Usage: tests/portable/wheel_smoke.sh WHEEL BUILD_DIR [--root ROOT]   (BUILD_DIR: build-portable)
set -euo pipefail
wheel=$(realpath "$1")
build=$(realpath "$2")
root=${4:-}
fakelib=$build/tests/shim/fakelib
road=$build/tests/shim/roads/road_runtime_shared
for f in "$wheel" "$fakelib/libcuda.so.1" "$road"; do
  [[ -e $f ]] || { echo "wheel_smoke: $f is missing" >&2; exit 1; }
done
case "$wheel" in "$(realpath "$build/..")"/*) ;; *) echo "wheel_smoke: the wheel must lie inside the checkout (it is bind-mounted into the root)" >&2; exit 1 ;; esac

tmp=$(mktemp -d "$build/wheel-smoke.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
# One user session, a POSIX sh script so that it runs in the older root too. $1: python,
# $2: a fresh directory, $3: 1 to pip install into a virtual environment, 0 with --target.
cat >"$tmp/session.sh" <<'SESSION'
set -eu
py=$1; dir=$2
mkdir -p "$dir"
if [ "$3" = 1 ]; then
  "$py" -m venv "$dir/venv"
  "$dir/venv/bin/python" -m pip install --no-index --quiet --disable-pip-version-check "$WHEEL"
  bin=$dir/venv/bin/vramtrace; py=$dir/venv/bin/python
else
  "$py" -m pip install --no-index --quiet --disable-pip-version-check --target "$dir/site" "$WHEEL"
  bin=$dir/site/bin/vramtrace; export PYTHONPATH=$dir/site
fi
"$bin" --version
"$py" -m vramtrace --version
"$py" -c "import vramtrace_mark, pytest_vramtrace, vramtrace; assert vramtrace.library_path()"
LD_LIBRARY_PATH=$FAKELIB "$bin" run -o "$dir/t.jsonl" -- "$ROAD" >"$dir/run.out" 2>&1 || { cat "$dir/run.out"; exit 1; }
"$py" -m vramtrace summary "$dir"/t*.jsonl >"$dir/summary.out" 2>&1 || { cat "$dir/summary.out"; exit 1; }
grep -qi "peak" "$dir/summary.out" || { echo "wheel_smoke: the summary of the run names no peak" >&2; cat "$dir/summary.out"; exit 1; }
echo "wheel_smoke: ok with $("$py" --version 2>&1), glibc $(ldd --version | head -1 | awk '{print $NF}')"
SESSION
export WHEEL=$wheel FAKELIB=$fakelib ROAD=$road
sh "$tmp/session.sh" python3 "$tmp/host" 1

if [[ -n $root ]]; then
  src=$(realpath "$build/..")
  sudo_=""; [[ $(id -u) -ne 0 ]] && sudo_="sudo"
  $sudo_ env WHEEL="$wheel" FAKELIB="$fakelib" ROAD="$road" unshare -m sh -c \
    "mount --bind /proc '$root/proc' && mkdir -p '$root$src' && mount --bind '$src' '$root$src' && \
     chroot '$root' /bin/sh '$tmp/session.sh' python3 '$tmp/root' 0"
fi
