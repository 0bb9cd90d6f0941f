#!/usr/bin/env bash
# vramtrace in two minutes: builds it (installing what it needs), then
#  1. replays a real PyTorch GPT-2 training trace (recorded on an H200) on a simulated GPU and
#     asks what it would reserve with other allocator settings and on a 16 GB card;
#  2. summarises the trace and explains a real OOM message;
#  3. where a GPU is present, runs a real CUDA program under the shim and reports on its trace.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/setup-deps.sh
cmake --preset release >/dev/null
cmake --build --preset release -j"$(nproc)" --target vramtrace >/dev/null
vt=build-release/bin/vramtrace
trace=tests/data/torch-h200/gpt2_train.torchtrace.jsonl.gz

echo "== 1. replay: GPT-2 training (PyTorch 2.11, H200) under three allocator settings"
$vt replay "$trace" --conf "" --conf "expandable_segments:True" --conf "max_split_size_mb:128"
echo
echo "== 1b. would it fit on a T4 (14.58 GiB, as PyTorch reports it)?"
$vt replay "$trace" --capacity T4 --conf "" --conf "expandable_segments:True" || true

if $vt --help 2>/dev/null | grep -q summary; then
  echo
  echo "== 2. summary of the same trace"
  $vt summary "$trace"
fi
if $vt --help 2>/dev/null | grep -q explain; then
  echo
  echo "== 2b. explain a pasted OOM message"
  $vt explain "CUDA out of memory. Tried to allocate 44.00 MiB. GPU 0 has a total capacity of 139.81 GiB of which 123.93 GiB is free. Including non-PyTorch memory, this process has 15.31 GiB memory in use. 14.58 GiB allowed; Of the allocated memory 14.56 GiB is allocated by PyTorch, and 12.76 MiB is reserved by PyTorch but unallocated."
fi

if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
  echo
  echo "== 3. a real CUDA program (nvcc, static cudart) under the shim"
  cmake --build --preset release -j"$(nproc)" --target vramtrace_shim vramtrace_gpu_programs >/dev/null
  out=$(mktemp -d)/sample.%p.jsonl
  VRAMTRACE_LIB=$PWD/build-release/shim/libvramtrace.so $vt run -o "$out" -- build-release/gpu/alloc_check_static
else
  echo
  echo "(no GPU here: skipping the live run; on a GPU machine this step runs a CUDA program under 'vramtrace run')"
fi
