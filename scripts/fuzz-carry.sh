#!/usr/bin/env bash
# Stages the libFuzzer binaries for a long fuzzing run on another machine: builds them (preset
# "fuzz", target fuzz_engines) unless --no-build, and copies into .carry/fuzz/ (git-ignored)
#   fuzz_<name>          every libFuzzer executable of build-fuzz/tests/fuzz
#   fuzz-targets.tsv     their settings, corpus and seed directories (relative to the checkout)
#   lib/                 every shared library they load that is not glibc's (ldd): libstdc++,
#                        libgcc_s, fmt, simdjson, zlib, ... so that a machine without the Debian
#                        packages runs them; scripts/fuzz.sh puts lib/ on LD_LIBRARY_PATH
# Then, in a checkout of the same commit on that machine (corpora, dictionaries and seeds come
# from the checkout):
#   FUZZ_BIN_DIR=.carry/fuzz scripts/fuzz.sh --minutes 30 --jobs "$(nproc)" --out "$OUT"
# The machine needs glibc 2.36 or newer (Debian 12's, which built the binaries).
#
# Usage: scripts/fuzz-carry.sh [--no-build] [DEST]   (DEST default .carry/fuzz)
#   --no-build: stage what $FUZZ_BUILD_DIR (default build-fuzz) already holds
set -euo pipefail
cd "$(dirname "$0")/.."

build=1
dest=.carry/fuzz
for a in "$@"; do
  case $a in
    --no-build) build=0 ;;
    -*) echo "fuzz-carry.sh: unknown option $a" >&2; exit 2 ;;
    *) dest=$a ;;
  esac
done

if ((build)); then
  scripts/setup-deps.sh
  cmake --preset fuzz >/dev/null
  cmake --build build-fuzz -j"$(nproc)" --target fuzz_engines
fi
build_dir=${FUZZ_BUILD_DIR:-build-fuzz}
((build)) && build_dir=build-fuzz
manifest=$build_dir/fuzz-targets.tsv
[[ -f $manifest ]] || { echo "fuzz-carry.sh: no $manifest: configure with cmake --preset fuzz" >&2; exit 2; }

rm -rf "$dest"
mkdir -p "$dest/lib"
cp "$manifest" "$dest/"
# glibc's own libraries (and the vDSO) stay: they must match the machine's kernel interface and
# loader; everything else is copied.
glibc='^(linux-vdso|linux-gate|ld-linux.*|libc|libm|libpthread|libdl|librt|libresolv|libutil|libanl|libnsl|libmvec)\.so'
bins=()
while IFS=$'\t' read -r name _; do
  [[ -z $name || $name == \#* ]] && continue
  bin=$build_dir/tests/fuzz/fuzz_$name
  [[ -x $bin ]] || { echo "fuzz-carry.sh: $bin is missing: build target fuzz_engines" >&2; exit 2; }
  cp "$bin" "$dest/"
  bins+=("$bin")
done <"$manifest"

for bin in "${bins[@]}"; do
  # "libfoo.so.1 => /path/libfoo.so.1 (0x...)"; a library ldd cannot find is an error here.
  if ldd "$bin" | grep -q 'not found'; then
    ldd "$bin" | grep 'not found' >&2
    exit 2
  fi
  ldd "$bin" | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}' | while read -r soname path; do
    [[ $soname =~ $glibc ]] && continue
    [[ -e $dest/lib/$soname ]] || cp -L "$path" "$dest/lib/$soname"
  done
done

echo "fuzz-carry: staged in $dest:"
ls -l "$dest" "$dest/lib" | sed 's/^/  /'
du -sh "$dest" | sed 's/^/  total /'
