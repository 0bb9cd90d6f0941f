#!/usr/bin/env bash
# Fuzzes the libFuzzer targets of tests/fuzz (docs/reliability.md), each for SECONDS (default 20)
# or --minutes M, from the committed corpus, past findings and seeds (build-fuzz/fuzz-targets.tsv
# lists them), up to --jobs J fuzzing processes at a time.
#
# Usage: scripts/fuzz.sh [SECONDS] [--minutes M] [--jobs J] [--merge] [--out DIR] [TARGET...]
#        scripts/fuzz.sh carry [--no-build] [DEST]     stage the binaries for another machine (below)
#   --minutes M  long run: M minutes per target in libFuzzer's fork mode, which goes on after a
#                finding, so that one run collects every finding (short runs stop at the first)
#   --jobs J     fuzzing processes at once (default 1). With more jobs than targets, every target
#                runs at once with J / targets fork workers; with fewer, J targets at a time.
#   --merge      afterwards, fold the new inputs that add coverage into tests/fuzz/corpus/<target>/
#                (libFuzzer -merge=1) so that the next run starts from them; commit them
#   --out DIR    where the summary, findings and new corpus inputs go (default $OUT if set, else
#                <work>/out)
#   TARGET       only these targets (names as in tests/fuzz/fuzz_<name>.cpp)
# Environment:
#   FUZZ_BIN_DIR   prebuilt binaries (`scripts/fuzz.sh carry` stages them, with fuzz-targets.tsv
#                  and their shared libraries in lib/): nothing is built; run from a source checkout
#                  (corpora, dictionaries and seeds are read from it)
#   FUZZ_WORK_DIR  working directory (default build-fuzz/fuzz-work, or /tmp/vramtrace-fuzz-work
#                  with FUZZ_BIN_DIR)
#
# Output: per target, libFuzzer's figures; at the end a table (target, runs, seconds, corpus size,
# crashes) printed and written to DIR/fuzz-summary.md; every finding copied to
# DIR/crashes/<target>/; the inputs that add coverage over the committed corpus to
# DIR/corpus-new/<target>/ (long runs and --merge). Exit 1 if any target found something.
# A finding: copy it to tests/fuzz/regressions/<target>/ (replayed by ctest
# "fuzz-regressions: <target>" in every build), fix the bug.
#
# Long runs on another machine: `scripts/fuzz.sh carry` builds the libFuzzer executables (preset
# "fuzz", target fuzz_engines) unless --no-build, and copies into DEST (default .carry/fuzz,
# git-ignored)
#   fuzz_<name>          every libFuzzer executable of build-fuzz/tests/fuzz
#   fuzz-targets.tsv     their settings, corpus and seed directories (relative to the checkout)
#   lib/                 every shared library they load that is not glibc's (ldd): libstdc++,
#                        libgcc_s, fmt, simdjson, zlib, ... so that a machine without the Debian
#                        packages runs them (FUZZ_BIN_DIR puts lib/ on LD_LIBRARY_PATH)
# --no-build stages what $FUZZ_BUILD_DIR (default build-fuzz) already holds. Then, in a checkout
# of the same commit on that machine (glibc 2.36 or newer, Debian 12's, which built the binaries):
#   FUZZ_BIN_DIR=.carry/fuzz scripts/fuzz.sh --minutes 30 --jobs "$(nproc)" --out "$OUT"
set -euo pipefail
cd "$(dirname "$0")/.."

carry() {
  local build=1 dest=.carry/fuzz a
  for a in "$@"; do
    case $a in
      --no-build) build=0 ;;
      -*) echo "fuzz.sh carry: unknown option $a" >&2; exit 2 ;;
      *) dest=$a ;;
    esac
  done
  if ((build)); then
    scripts/setup-deps.sh
    cmake --preset fuzz >/dev/null
    cmake --build build-fuzz -j"$(nproc)" --target fuzz_engines
  fi
  local build_dir=${FUZZ_BUILD_DIR:-build-fuzz}
  ((build)) && build_dir=build-fuzz
  local manifest=$build_dir/fuzz-targets.tsv
  [[ -f $manifest ]] || { echo "fuzz.sh carry: no $manifest: configure with cmake --preset fuzz" >&2; exit 2; }

  rm -rf "$dest"
  mkdir -p "$dest/lib"
  cp "$manifest" "$dest/"
  # glibc's own libraries (and the vDSO) stay: they must match the machine's kernel interface and
  # loader; everything else is copied.
  local glibc='^(linux-vdso|linux-gate|ld-linux.*|libc|libm|libpthread|libdl|librt|libresolv|libutil|libanl|libnsl|libmvec)\.so'
  local bins=() name bin soname path
  while IFS=$'\t' read -r name _; do
    [[ -z $name || $name == \#* ]] && continue
    bin=$build_dir/tests/fuzz/fuzz_$name
    [[ -x $bin ]] || { echo "fuzz.sh carry: $bin is missing: build target fuzz_engines" >&2; exit 2; }
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

  echo "fuzz: staged in $dest:"
  ls -l "$dest" "$dest/lib" | sed 's/^/  /'
  du -sh "$dest" | sed 's/^/  total /'
}
if [[ ${1:-} == carry ]]; then
  shift
  carry "$@"
  exit 0
fi

seconds=20
minutes=
jobs=1
merge=0
out=${OUT:-}
targets=()
while (($#)); do
  case $1 in
    --merge) merge=1 ;;
    --minutes) minutes=$2; shift ;;
    --jobs) jobs=$2; shift ;;
    --out) out=$2; shift ;;
    -*) echo "fuzz.sh: unknown option $1" >&2; exit 2 ;;
    ''|*[!0-9]*) targets+=("$1") ;;
    *) seconds=$1 ;;
  esac
  shift
done
if [[ -n $minutes ]]; then
  [[ $minutes =~ ^[0-9]+$ ]] || { echo "fuzz.sh: --minutes wants a whole number" >&2; exit 2; }
  seconds=$((minutes * 60))
fi
[[ $jobs =~ ^[1-9][0-9]*$ ]] || { echo "fuzz.sh: --jobs wants a positive number" >&2; exit 2; }

if [[ -n ${FUZZ_BIN_DIR:-} ]]; then
  bin_dir=$(cd "$FUZZ_BIN_DIR" && pwd)
  manifest=$bin_dir/fuzz-targets.tsv
  work_root=${FUZZ_WORK_DIR:-/tmp/vramtrace-fuzz-work}
  export LD_LIBRARY_PATH="$bin_dir/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
else
  scripts/setup-deps.sh
  cmake --preset fuzz >/dev/null
  # Only the libFuzzer executables: the replay executables run in the gcc and asan builds.
  cmake --build build-fuzz -j"$(nproc)" --target fuzz_engines
  bin_dir=$PWD/build-fuzz/tests/fuzz
  manifest=$PWD/build-fuzz/fuzz-targets.tsv
  work_root=${FUZZ_WORK_DIR:-build-fuzz/fuzz-work}
fi
[[ -f $manifest ]] || { echo "fuzz.sh: no $manifest" >&2; exit 2; }
mkdir -p "$work_root"
work_root=$(cd "$work_root" && pwd)
out=${out:-$work_root/out}
mkdir -p "$out"
out=$(cd "$out" && pwd)

# The targets to run, in manifest order.
names=()
declare -A max_len dict leaks dirs
while IFS=$'\t' read -r name len d lk ds; do
  [[ -z $name || $name == \#* ]] && continue
  if ((${#targets[@]})) && [[ " ${targets[*]} " != *" $name "* ]]; then continue; fi
  [[ -x $bin_dir/fuzz_$name ]] || { echo "fuzz.sh: no binary $bin_dir/fuzz_$name" >&2; exit 2; }
  names+=("$name")
  max_len[$name]=$len dict[$name]=$d leaks[$name]=$lk dirs[$name]=$ds
done <"$manifest"
((${#names[@]})) || { echo "fuzz.sh: no target selected" >&2; exit 2; }

# Parallelism: every target at once with `fork` workers each, or `jobs` targets at a time.
fork=0
parallel=$jobs
if ((jobs >= ${#names[@]})); then
  parallel=${#names[@]}
  ((jobs / ${#names[@]} > 1)) && fork=$((jobs / ${#names[@]}))
fi
[[ -n $minutes ]] && ((fork == 0)) && fork=1  # long runs go on after a finding

run_target() {
  local name=$1 work=$work_root/$1 flags=""
  [[ ${dict[$name]} != - ]] && flags="-dict=${dict[$name]}"
  ((${leaks[$name]})) && flags="$flags -detect_leaks=0"
  local start end status=0
  start=$(date +%s)
  # shellcheck disable=SC2086  # the directories are space-separated on purpose
  VRAMTRACE_FUZZ_SECONDS=$seconds VRAMTRACE_FUZZ_FORK=$fork \
    tests/fuzz/run_fuzzer.sh "$bin_dir/fuzz_$name" "$name" "$work" "${max_len[$name]}" "$flags" ${dirs[$name]} \
    >"$work_root/$name.out" 2>&1 || status=$?
  end=$(date +%s)
  echo "$((end - start)) $status" >"$work_root/$name.result"
}

echo "fuzz: ${#names[@]} targets x ${seconds}s, $parallel at a time$( ((fork)) && echo ", fork mode with $fork worker(s) each")"
running=0
for name in "${names[@]}"; do
  rm -f "$work_root/$name.result"
  run_target "$name" &
  running=$((running + 1))
  if ((running >= parallel)); then
    wait -n || true
    running=$((running - 1))
  fi
done
wait || true

status=0
summary=$out/fuzz-summary.md
{
  echo "| Target | Runs | Seconds | Workers | Corpus (new / total) | Crashes |"
  echo "|---|---|---|---|---|---|"
} >"$summary"
for name in "${names[@]}"; do
  work=$work_root/$name
  cat "$work_root/$name.out"
  read -r secs rc <"$work_root/$name.result" || { secs=0; rc=1; }
  log=$work/log.txt
  runs=$(grep -oE '^stat::number_of_executed_units: [0-9]+' "$log" | grep -oE '[0-9]+$' | tail -n1 || true)
  if [[ -z $runs ]]; then  # fork mode: "#RUNS: cov: ..." lines
    runs=$(grep -oE '^#[0-9]+:? ' "$log" | grep -oE '[0-9]+' | tail -n1 || true)
  fi
  new=$(find "$work/corpus" -type f 2>/dev/null | wc -l)
  total=$new
  for d in ${dirs[$name]}; do total=$((total + $(find "$d" -type f 2>/dev/null | wc -l))); done
  crashes=$(find "$work/artifacts" -type f 2>/dev/null | wc -l)
  if ((crashes)); then
    mkdir -p "$out/crashes/$name"
    cp "$work/artifacts/"* "$out/crashes/$name/"
  fi
  ((rc != 0)) && status=1
  echo "| $name | ${runs:-?} | $secs | $((fork ? fork : 1)) | $new / $total | $crashes |" >>"$summary"
done

# New inputs that add coverage over the committed corpus (long runs, --merge).
if ((merge)) || [[ -n $minutes ]]; then
  for name in "${names[@]}"; do
    work=$work_root/$name
    [[ -d $work/corpus ]] || continue
    committed=tests/fuzz/corpus/$name
    tmp=$work/merge
    rm -rf "$tmp" && mkdir -p "$tmp"
    [[ -d $committed ]] && cp "$committed/"* "$tmp/" 2>/dev/null || true
    before=$(ls "$tmp" | sort)
    ASAN_OPTIONS=detect_leaks=0 "$bin_dir/fuzz_$name" -merge=1 -max_len="${max_len[$name]}" "$tmp" "$work/corpus" \
      >"$work/merge.log" 2>&1 || echo "fuzz: $name: merge failed (see $work/merge.log)"
    mkdir -p "$out/corpus-new/$name"
    comm -13 <(echo "$before") <(ls "$tmp" | sort) | while read -r f; do cp "$tmp/$f" "$out/corpus-new/$name/"; done
    added=$(ls "$out/corpus-new/$name" | wc -l)
    echo "fuzz: $name: $added new inputs add coverage (in $out/corpus-new/$name)"
    if ((merge)) && ((added)); then
      mkdir -p "$committed"
      cp "$out/corpus-new/$name/"* "$committed/"
    fi
  done
fi

echo
cat "$summary"
echo "fuzz: summary in $summary"
if ((status != 0)); then
  echo "fuzz: FINDINGS: inputs in $out/crashes/; logs in $work_root/<target>/log.txt"
fi
exit $status
