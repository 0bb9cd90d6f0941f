#!/usr/bin/env bash
# Builds the portable libvramtrace.so and vramtrace command: this machine's GCC against the glibc
# of a Debian 11 root file system (glibc 2.31), the C++ runtime and third-party code linked in
# statically (cmake/portable, docs/install.md). Then checks their symbol versions against that
# baseline, and with --test runs them inside the Debian 11 root: the shim's fake-driver suite, and
# the command on every bundled trace, whose output must equal the normal build's.
#
# The root (debootstrap of Debian 11 from deb.debian.org; about 80 s, needs root) and simdjson's
# release source (checked against its sha256) are kept in VRAMTRACE_PORTABLE_CACHE (default
# ~/.cache/vramtrace/portable) and made only once.
#
# Usage: scripts/portable.sh [--test] [--wheel]
#   --test    also run the tests inside the Debian 11 root (needs root: chroot, mount)
#   --wheel   also build the Python wheel from the portable binaries (python/build_wheel.py)
set -euo pipefail
cd "$(dirname "$0")/.."
src=$PWD

run_tests=0
make_wheel=0
for a in "$@"; do
  case "$a" in
    --test) run_tests=1 ;;
    --wheel) make_wheel=1 ;;
    -h|--help) sed -n '2,15p' "$0"; exit 0 ;;
    *) echo "portable.sh: unknown option '$a' (--test, --wheel)" >&2; exit 2 ;;
  esac
done

cache=${VRAMTRACE_PORTABLE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/vramtrace/portable}
mirror=${VRAMTRACE_DEBIAN_MIRROR:-http://deb.debian.org/debian}
suite=bullseye  # Debian 11: glibc 2.31
root=$cache/$suite
simdjson_version=3.0.1
simdjson_sha256=156b1bc5eb0561b2bd166b46d191fd3d95a3e709cc63761477d3b7aec2b6e9ed
simdjson_src=$cache/simdjson-$simdjson_version
mkdir -p "$cache"

sudo_=""
[[ $(id -u) -ne 0 ]] && sudo_="sudo"

if [[ ! -e $root/.vramtrace-root ]]; then
  command -v debootstrap >/dev/null || { echo "portable.sh: debootstrap is needed (apt-get install debootstrap)" >&2; exit 1; }
  echo "portable.sh: making the Debian 11 root in $root (about 80 s)" >&2
  $sudo_ rm -rf "$root.tmp"
  $sudo_ debootstrap --variant=minbase --include=libc6-dev,zlib1g-dev,libzstd-dev,libdw-dev,libelf-dev,python3,python3-pip,python3-venv,binutils \
    "$suite" "$root.tmp" "$mirror" >"$cache/debootstrap.log" 2>&1 \
    || { echo "portable.sh: debootstrap failed; its log: $cache/debootstrap.log" >&2; exit 1; }
  # The root's library links are absolute (/lib/...): made relative, they resolve inside the
  # root when the linker follows them through --sysroot.
  (cd "$root.tmp" && find . -xdev -lname '/*' -print0 | while IFS= read -r -d '' link; do
     target=$(readlink "$link")
     $sudo_ ln -sfn "$(realpath -m --relative-to="$(dirname "$link")" ".$target")" "$link"
   done)
  $sudo_ touch "$root.tmp/.vramtrace-root"
  $sudo_ mv "$root.tmp" "$root"
fi

if [[ ! -e $simdjson_src/singleheader/simdjson.cpp ]]; then
  tarball=$cache/simdjson_$simdjson_version.orig.tar.gz
  curl -sSfL -o "$tarball.part" "$mirror/pool/main/s/simdjson/simdjson_$simdjson_version.orig.tar.gz"
  echo "$simdjson_sha256  $tarball.part" | sha256sum -c --quiet - \
    || { echo "portable.sh: simdjson's tarball does not match its sha256" >&2; rm -f "$tarball.part"; exit 1; }
  mv "$tarball.part" "$tarball"
  tar -C "$cache" -xzf "$tarball"
fi

export VRAMTRACE_SYSROOT=$root VRAMTRACE_SIMDJSON_SOURCE=$simdjson_src
export CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
# shellcheck source=scripts/ccache-env.sh
source "$src/scripts/ccache-env.sh" "$src"
# --fresh: the cache holds the root's paths (link flags, found libraries); a root made again
# elsewhere must not be mixed with them. Unchanged compile lines rebuild nothing.
cmake --preset portable --fresh "${launcher[@]}" >/dev/null
cmake --build --preset portable -j"$(nproc)"

bin=build-portable/bin/vramtrace
shim=build-portable/shim/libvramtrace.so
python3 scripts/check-glibc.py --max 2.31 --only-glibc "$shim" "$bin"

if ((run_tests)); then
  # The checkout is bind-mounted at its own path inside the root, so every path compiled into the
  # tests holds there too; the CUDA toolkit's too, for the tests that load the real cudart.
  # unshare gives the mounts their own namespace: they vanish when the tests end, whatever happens.
  inner=$(mktemp "$cache/inner.XXXXXX.sh")
  cat >"$inner" <<'INNER'
set -u
cd "$1"
status=0
for t in test_shim test_shim_faults test_stacks test_ranks; do
  exe=build-portable/tests/shim/$t
  [ -x "$exe" ] || { echo "portable tests: $exe was not built" >&2; status=1; continue; }
  echo "== $t (in Debian 11, glibc $(ldd --version | head -1 | awk '{print $NF}'))"
  "$exe" --reporter compact || status=1
done
exit $status
INNER
  mounts="mount --bind /proc '$root/proc' && mount --rbind /dev '$root/dev' && mount -t tmpfs tmpfs '$root/tmp'"
  mounts+=" && mkdir -p '$root$src' && mount --bind '$src' '$root$src'"
  if [[ -d $CUDA_HOME ]]; then
    mounts+=" && mkdir -p '$root$CUDA_HOME' && mount --bind '$CUDA_HOME' '$root$CUDA_HOME'"
  fi
  cp "$inner" "$src/build-portable/portable-inner.sh"
  rm -f "$inner"
  $sudo_ unshare -m sh -c "$mounts && chroot '$root' /bin/sh '$src/build-portable/portable-inner.sh' '$src'"
  echo "== the command: portable (Debian 11) against the normal build"
  normal=${VRAMTRACE_NORMAL_BIN:-build/bin/vramtrace}
  [[ -x $normal ]] || { echo "portable.sh: $normal is missing: build the default preset first" >&2; exit 1; }
  VRAMTRACE_SUDO=$sudo_ python3 tests/portable/compare_command.py --root "$root" --checkout "$src" \
    --normal "$normal" --portable "$bin"
fi

if ((make_wheel)); then
  rm -f dist/vramtrace-*-manylinux_*.whl
  wheel=$(python3 python/build_wheel.py --shim "$shim" --command "$bin" --out dist | tail -1)
  echo "portable.sh: $wheel"
  if ((run_tests)); then
    tests/portable/wheel_smoke.sh "$wheel" build-portable --root "$root"
  else
    tests/portable/wheel_smoke.sh "$wheel" build-portable
  fi
fi
