#!/usr/bin/env python3
"""Prints the hooks.def lines of the driver's work-submission entry points (policy SUBMIT).

Note [work on another stream] (shim/src/policies/context_pool.h) needs every driver call that
puts device work on a stream: kernel launches, graph launches, copies, sets, stream memory
operations and batch decompression, in their legacy and per-thread (_ptsz, _ptds) ABI variants.
The declarations come from the toolkit's own cuda.h, preprocessed with
__CUDA_API_VERSION_INTERNAL, which declares every ABI version (cuStreamBatchMemOp and
cuStreamBatchMemOp_v2, their _ptsz forms...) under its exact name: programs built against older
headers call the older versions.

Usage: scripts/gen_submit_hooks.py [path/to/cuda.h] > lines; paste them into hooks.def's SUBMIT
block. Run it again when a new CUDA release adds such calls.
"""
import re
import subprocess
import sys

# Families that put device work on a stream (by the name cuda.h declares). Host callbacks, event
# records, stream waits and capture calls do not touch device memory and are not listed.
FAMILIES = re.compile(
    r"^cu(LaunchKernel|LaunchKernelEx|LaunchCooperativeKernel|LaunchCooperativeKernelMultiDevice|"
    r"GraphLaunch|Memcpy\w*|Memset\w*|MemPrefetchAsync|MemPrefetchBatchAsync|MemDiscardBatchAsync|"
    r"MemDiscardAndPrefetchBatchAsync|MemBatchDecompressAsync|StreamBatchMemOp|StreamWaitValue(32|64)|"
    r"StreamWriteValue(32|64))(_v2|_v3)?(_ptsz|_ptds)?$"
)
# Synchronous copies and sets on the legacy stream need no hook (legacy work is ordered on one
# stream); their per-thread (_ptds) forms are work on another stream.
LEGACY_ONLY = re.compile(r"^cuMem(cpy|set)(?!.*Async)\w*$")


def declarations(header):
    src = f'#define __CUDA_API_VERSION_INTERNAL 1\n#include "{header}"\n'
    out = subprocess.run(["cc", "-E", "-P", "-x", "c", "-"], input=src, capture_output=True,
                         text=True, check=True).stdout
    out = re.sub(r"__attribute__\s*\(\(.*?\)\)", "", out)
    for m in re.finditer(r"CUresult\s+(cu\w+)\s*\(([^;{]*?)\)\s*;", out, re.S):
        yield m.group(1), " ".join(m.group(2).split())


def split_params(params):
    if params in ("", "void"):
        return [], []
    parts = [p.strip() for p in params.split(",")]
    names = []
    typed = []
    for i, p in enumerate(parts):
        m = re.match(r"^(.*?)(\w+)\s*(\[\s*\])?$", p)
        ty, name = m.group(1).strip(), m.group(2)
        if m.group(3):
            ty += "*"
        if re.fullmatch(r"(const\s+)?(unsigned\s+)?\w+\s*\**", p):  # a type without a name
            ty, name = p, f"a{i}"
        if ty.replace("const", "").strip() in ("CUstream", "CUstream_st*"):
            name = "s"  # the generated wrapper finds the stream by type; a fixed name reads better
        typed.append(f"{ty} {name}".replace(" *", "* ").replace("  ", " ").strip())
        names.append(name)
    return typed, names


def main():
    header = sys.argv[1] if len(sys.argv) > 1 else "cuda.h"
    seen = {}
    for name, params in declarations(header):
        if not FAMILIES.match(name) or name in seen:
            continue
        if LEGACY_ONLY.match(name) and not name.endswith("_ptds"):
            continue
        seen[name] = params
    for name in sorted(seen):
        typed, names = split_params(seen[name])
        print(f"VT_HOOK(driver, SUBMIT, {name}, CUresult, ({', '.join(typed)}), ({', '.join(names)}))")


if __name__ == "__main__":
    main()
