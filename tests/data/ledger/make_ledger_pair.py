#!/usr/bin/env python3
"""Writes the pair of files a default `vramtrace run` of a PyTorch program leaves, small and
synthetic, for the tests of the memory ledger (tests/reporter-reports/test_ledger.cpp):

  run.4242.jsonl                 the shim's trace (vramtrace format 1.2, written here line by line)
  run.4242.torch.pickle          PyTorch's snapshot, in the shape torch.cuda.memory._snapshot() gives
  run.4242.torch.pickle.json     its sidecar (python/vramtrace/torch_level.py's fields)

Run from the repository root: python3 tests/data/ledger/make_ledger_pair.py
The outputs are committed; the test states every figure of the ledger by hand, from the story below.

Device 0 (80 GiB): the CUDA context takes 500 MiB (the shim's reading when it met the context),
another process appears with 100 MiB. PyTorch's segments: A 20 MiB, B 2 MiB (small pool),
C 40 MiB (the shim's block for it is 41 MiB: 1 MiB of rounding), D an expandable segment of two
20 MiB pages (cuMemCreate + cuMemMap). Outside PyTorch's allocator: a 64 MiB cudaMalloc (freed
after the OOM), a 6 MiB pitched allocation, a 20 MiB cuMemCreate handle mapped elsewhere (NCCL
style), and 1 GiB of pinned host memory, which is not device memory. Tensors: t1 8 MiB - 100 B in
A, t2 300 B in B, t4 10 MiB in D, t3 30 MiB in C (the peak), freed; a segment E of 20 MiB, empty,
is released by PyTorch just before a 90 GiB request fails, and the shim's trace has that release
10 ms after the OOM (the two clocks apart: E is PyTorch's, in no row at the OOM).
Device 1: the process made a CUDA context there (500 MiB) and nothing else.
"""
import json
import os
import pickle

here = os.path.dirname(os.path.abspath(__file__))
MiB = 1 << 20
GiB = 1 << 30
TOTAL = 80 * GiB
PID = 4242
HOST = "gpu-node-7"
START_NS = 1796134320_000_000_000  # the shim's start_unix_ns (CLOCK_REALTIME at its origin)
ORIGIN_NS = 5_000_000_000_000      # its origin_monotonic_ns: events' "t" count from here

A, B, C, D, E = 0x7F0000000000, 0x7F0001400000, 0x7F4000000000, 0x7F5000000000, 0x7F6000000000
OUT_MALLOC, PITCHED, NCCL_VA, PINNED = 0x7F1000000000, 0x7F2000000000, 0x7F3000000000, 0x5000
H1, H2, H3 = 0x1001, 0x1002, 0x1003


def unix_us(t):
    return (START_NS + int(t * 1e9)) // 1000


# --- the shim's trace ---------------------------------------------------------------------------
header = {"a": "header", "format": "vramtrace", "version": "1.2", "tool_version": "0.1.0", "pid": PID,
          "ppid": 1, "host": HOST, "rank": "", "local_rank": "", "command_line": ["python3", "train.py"],
          "start_unix_ns": START_NS, "clock": "CLOCK_MONOTONIC", "origin_monotonic_ns": ORIGIN_NS,
          "cuda_driver_version": 13000, "cuda_runtime_version": 13000,
          "devices": [{"id": 0, "name": "NVIDIA H200", "total_bytes": TOTAL,
                       "context_free_bytes": TOTAL - 500 * MiB, "context_total_bytes": TOTAL}],
          "allocator_settings": "", "settings": {"reuse": "lazy_sync"}, "entry_points": ["", "cudaMalloc"],
          "trace": {"buffer_events": 16384, "on_full": "wait", "flush_interval_ms": 100, "compression": "none"}}
events = []


def ev(t, a, p, r, b=None, k=0):
    e = {"a": a, "t": int(t * 1e9), "p": p, "r": r}
    if b is not None and b != r:
        e["b"] = b
    if k:
        e["k"] = k
    e["th"] = 7
    events.append(e)


ev(0.20, "segment_alloc", 0x7E0000000000, 64 * MiB)  # the shim's own segment: not the program's memory
ev(0.20, "alloc", A, 20 * MiB)                       # PyTorch's segment A
ev(0.30, "alloc", OUT_MALLOC, 64 * MiB)              # a library's cudaMalloc
ev(0.35, "segment_alloc", PITCHED, 6 * MiB, k=3)
ev(0.40, "segment_alloc", PINNED, GiB, k=5)
ev(0.45, "segment_alloc", H3, 20 * MiB, k=7)
ev(0.45, "segment_map", NCCL_VA, 20 * MiB, k=7)
ev(0.50, "alloc", B, 2 * MiB)                        # PyTorch's segment B
ev(0.60, "alloc", C, 40 * MiB, b=41 * MiB)           # PyTorch's segment C, 1 MiB of the shim's rounding
ev(0.62, "segment_alloc", H1, 20 * MiB, k=7)         # PyTorch's expandable segment D, two pages
ev(0.62, "segment_map", D, 20 * MiB, k=7)
ev(0.63, "segment_alloc", H2, 20 * MiB, k=7)
ev(0.63, "segment_map", D + 20 * MiB, 20 * MiB, k=7)
ev(0.6599, "alloc", E, 20 * MiB)                     # PyTorch's segment E
ev(0.905, "free_requested", E, 20 * MiB)             # PyTorch released it at 0.895 by its own clock
ev(0.905, "free_completed", E, 20 * MiB)
ev(1.00, "free_requested", OUT_MALLOC, 64 * MiB)     # after the OOM
ev(1.00, "free_completed", OUT_MALLOC, 64 * MiB)
trailer = {"a": "trailer", "t": int(2.0 * 1e9), "events": len(events), "dropped": 0,
           "counts": {"alloc": 5, "free_requested": 2, "free_completed": 2, "segment_alloc": 6, "segment_map": 3},
           "devices": []}
with open(os.path.join(here, "run.4242.jsonl"), "w") as f:
    for rec in [header] + events + [trailer]:
        f.write(json.dumps(rec, separators=(",", ":")) + "\n")

# --- PyTorch's snapshot ---------------------------------------------------------------------------
trace = []


def te(t, action, addr, size):
    e = {"action": action, "size": size, "stream": 0, "time_us": unix_us(t), "frames": []}
    if action == "oom":
        e["device_free"] = addr
    else:
        e["addr"] = addr
    trace.append(e)


used_at_oom = 500 * MiB + 100 * MiB + 102 * MiB + 90 * MiB + 1 * MiB
te(0.20, "segment_alloc", A, 20 * MiB)
te(0.21, "alloc", A, 8 * MiB - 100)
te(0.50, "segment_alloc", B, 2 * MiB)
te(0.51, "alloc", B, 300)
te(0.60, "segment_alloc", C, 40 * MiB)
te(0.62, "segment_map", D, 20 * MiB)
te(0.63, "segment_map", D + 20 * MiB, 20 * MiB)
te(0.65, "alloc", D, 10 * MiB)
te(0.66, "segment_alloc", E, 20 * MiB)
te(0.70, "alloc", C, 30 * MiB)
te(0.80, "free_requested", C, 30 * MiB)
te(0.80, "free_completed", C, 30 * MiB)
te(0.895, "segment_free", E, 20 * MiB)
te(0.90, "oom", TOTAL - used_at_oom, 90 * GiB)


def segment(address, total, blocks, segment_type="large", expandable=False):
    out, addr = [], address
    for size, requested, state in blocks:
        out.append({"address": addr, "size": size, "requested_size": requested, "state": state, "frames": []})
        addr += size
    assert addr == address + total
    live = [b for b in out if b["state"] != "inactive"]
    return {"device": 0, "address": address, "total_size": total,
            "allocated_size": sum(b["size"] for b in out if b["state"] == "active_allocated"),
            "active_size": sum(b["size"] for b in live), "requested_size": sum(b["requested_size"] for b in live),
            "stream": 0, "segment_type": segment_type, "segment_pool_id": (0, 0), "is_expandable": expandable,
            "frames": [], "blocks": out}


segments = [
    segment(A, 20 * MiB, [(8 * MiB, 8 * MiB - 100, "active_allocated"), (12 * MiB, 0, "inactive")]),
    segment(B, 2 * MiB, [(512, 300, "active_allocated"), (2 * MiB - 512, 0, "inactive")], "small"),
    segment(C, 40 * MiB, [(40 * MiB, 0, "inactive")]),
    segment(D, 40 * MiB, [(10 * MiB, 10 * MiB, "active_allocated"), (30 * MiB, 0, "inactive")], expandable=True),
]
settings = {"PYTORCH_CUDA_ALLOC_CONF": "", "max_split_size": -1, "expandable_segments": False}
snapshot = {"segments": segments, "device_traces": [trace, []], "allocator_settings": settings,
            "external_annotations": []}
with open(os.path.join(here, "run.4242.torch.pickle"), "wb") as f:
    pickle.dump(snapshot, f, protocol=4)

# --- the sidecar -------------------------------------------------------------------------------------
allocated_end = 8 * MiB + 512 + 10 * MiB
stats0 = {"allocated_bytes.all.current": allocated_end, "allocated_bytes.all.peak": allocated_end + 30 * MiB,
          "active_bytes.all.current": allocated_end, "active_bytes.all.peak": allocated_end + 30 * MiB,
          "requested_bytes.all.current": 8 * MiB - 100 + 300 + 10 * MiB,
          "requested_bytes.all.peak": 8 * MiB - 100 + 300 + 10 * MiB + 30 * MiB,
          "reserved_bytes.all.current": 102 * MiB, "reserved_bytes.all.peak": 122 * MiB,
          "allocation.all.allocated": 4, "num_ooms": 1, "num_alloc_retries": 1}
stats_at_oom = dict(stats0, **{"num_ooms": 1})
zeros = {k: 0 for k in stats0}
sidecar = {
    "format": "vramtrace-torch-sidecar", "version": 1, "pid": PID, "ppid": 1, "rank": None, "host": HOST,
    "argv": ["train.py"], "python": "3.12.3", "torch_version": "2.11.0+cu130", "torch_cuda": "13.0",
    "reason": "exit", "final": True, "written_at": (START_NS + 1_500_000_000) / 1e9,
    "snapshot": "run.4242.torch.pickle", "snapshot_error": None, "snapshot_s": 0.01,
    "recording": {"state": "on", "reason": None, "started_at": (START_NS + 100_000_000) / 1e9, "api": "new"},
    "allocator": {"backend": "native", "env": {"PYTORCH_CUDA_ALLOC_CONF": None, "PYTORCH_ALLOC_CONF": None,
                                               "PYTORCH_NO_CUDA_MEMORY_CACHING": None},
                  "snapshot_settings": settings},
    "history": None,
    "devices": [
        {"device": 0, "primary_context": True, "memory_stats": stats0,
         "mem_get_info": [TOTAL - (500 + 100 + 102 + 26 + 1) * MiB, TOTAL]},
        {"device": 1, "primary_context": True, "memory_stats": zeros, "mem_get_info": [TOTAL - 500 * MiB, TOTAL]},
    ],
    "ooms": [{"time": (START_NS + 901_000_000) / 1e9, "device": 0, "alloc_bytes": 90 * GiB,
              "device_allocated": TOTAL, "device_free": TOTAL - used_at_oom, "stats": stats_at_oom}],
    "ooms_dropped": 0,
}
with open(os.path.join(here, "run.4242.torch.pickle.json"), "w") as f:
    json.dump(sidecar, f, indent=1)
