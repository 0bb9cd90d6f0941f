#!/usr/bin/env python3
"""Writes the traces of runs that ran out of memory, for the tests of Note [one OOM per failed
request] (reporter/model/oom_count.h): every command must count the same OOMs and retries.

The program is a small Llama-style training step on the H200 (139.80 GiB): four 2 GiB parameters,
a 4 GiB workspace allocated and freed before the first step (the run's largest request), then per
step eight 768 MiB activations (freed in backward) and four 512 MiB gradients. Run under PyTorch's
set_per_process_memory_fraction at 13.50 GiB, its eighth activation does not fit: PyTorch releases
its cached segments (the workspace's), fails again, and raises OutOfMemoryError.

  full_run.torchtrace.jsonl    the run without a cap: three steps, no OOM (PyTorch's history in
                               the torchtrace layout of tests/data/torch-h200/README.md)
  dead_entry.torchtrace.jsonl  the capped run, with its `oom` entry; the header carries the
                               message, the cap and num_ooms 1
  dead_run.torchtrace.jsonl    the same without the `oom` entry (the history was dumped before it)
  dead_run.snapshot.pickle     the capped run as the tensor level leaves it: a snapshot whose history
  dead_run.snapshot.pickle.json  holds no `oom` entry, and its sidecar (docs/tensor-level.md) with
                               num_ooms 1 in memory_stats and the observer's figures in `ooms`
  retries.vramtrace.jsonl      the shim's trace of PyTorch under `vramtrace run --limit`: two failed
                               cudaMalloc calls that PyTorch survived (it freed cached segments and
                               called again with the same size), then a request that failed twice
                               (the same call after the release) and raised: 4 failed allocations,
                               1 OOM, 3 retries
  plain_oom.vramtrace.jsonl    the shim's trace of a plain CUDA program whose one cudaMalloc failed

Deterministic; run from anywhere: python3 tests/data/oom/make_oom_fixtures.py
"""
import json
import os
import pickle

HERE = os.path.dirname(os.path.abspath(__file__))
MiB = 1 << 20
GiB = 1 << 30
TOTAL = 150109880320  # an H200 as PyTorch reports it: 139.80 GiB
CONTEXT = 492 * MiB  # the CUDA context and libraries, outside PyTorch's allocator
CAP = int(13.5 * GiB)
T0_US = 1_796_020_000_000_000


def fmt_size(b):
    """PyTorch's format_size (c10/cuda/CUDACachingAllocator.cpp)."""
    if b <= 1024:
        return "%d bytes" % b
    if b <= 1048576:
        return "%.2f KiB" % (b / 1024)
    if b <= 1073741824:
        return "%.2f MiB" % (b / 1048576)
    return "%.2f GiB" % (b / 1073741824)


class History:
    """PyTorch's allocator history of the program: one segment per size, cached when freed."""

    def __init__(self, cap=None):
        self.cap = cap
        self.entries = []
        self.t = T0_US
        self.next_addr = 0x7F0000000000
        self.cache = {}  # size -> [segment addresses]
        self.live = {}  # address -> size
        self.reserved = 0
        self.allocs = 0
        self.failed = None  # (size, device_free) of the OOM

    def ev(self, action, size, addr=None, **extra):
        self.t += 40
        e = {"action": action}
        if addr is not None:
            e["addr"] = addr
        e.update({"size": size, "stream": 0, "time_us": self.t})
        e.update(extra)
        self.entries.append(e)

    def alloc(self, size):
        if self.cache.get(size):
            addr = self.cache[size].pop()
        else:
            if self.cap is not None and self.reserved + size > self.cap:
                # release every cached segment and try once more (num_alloc_retries 1)
                for s, addrs in sorted(self.cache.items()):
                    for a in addrs:
                        self.ev("segment_free", s, a)
                        self.reserved -= s
                self.cache = {}
                if self.reserved + size > self.cap:
                    self.failed = (size, TOTAL - CONTEXT - self.reserved)
                    raise MemoryError
            addr = self.next_addr
            self.next_addr += size + 2 * MiB
            self.ev("segment_alloc", size, addr)
            self.reserved += size
        self.ev("alloc", size, addr)
        self.live[addr] = size
        self.allocs += 1
        return addr

    def free(self, addr):
        size = self.live.pop(addr)
        self.ev("free_requested", size, addr)
        self.ev("free_completed", size, addr)
        self.cache.setdefault(size, []).append(addr)

    def allocated(self):
        return sum(self.live.values())


def program(h, steps):
    params = [h.alloc(2 * GiB) for _ in range(4)]
    h.free(h.alloc(4 * GiB))  # the workspace: the run's largest request
    for _ in range(steps):
        acts = [h.alloc(768 * MiB) for _ in range(8)]
        for a in reversed(acts):
            h.free(a)
        grads = [h.alloc(512 * MiB) for _ in range(4)]
        for g in grads:
            h.free(g)
    return params


def stats(h, ooms, retries):
    return {"allocated_bytes.all.current": h.allocated(), "reserved_bytes.all.current": h.reserved,
            "allocation.all.allocated": h.allocs, "num_ooms": ooms, "num_alloc_retries": retries}


def torchtrace(name, h, header):
    with open(os.path.join(HERE, name), "w") as f:
        f.write(json.dumps(header) + "\n")
        for e in h.entries:
            f.write(json.dumps(e) + "\n")


def header(workload, h, cap_gib=None, oom=None, st=None):
    return {"kind": "header", "source": "tests/data/oom/make_oom_fixtures.py", "workload": workload, "conf": "",
            "steps": 3, "cap_gib": cap_gib, "oom": oom, "stats": st or {}, "torch": "2.11.0+cu130",
            "gpu": "NVIDIA H200", "total": TOTAL}


full = History()
program(full, 3)
torchtrace("full_run.torchtrace.jsonl", full, header("llama_style", full, st=stats(full, 0, 0)))

dead = History(cap=CAP)
try:
    program(dead, 3)
except MemoryError:
    pass
size, device_free = dead.failed
message = ("CUDA out of memory. Tried to allocate %s. GPU 0 has a total capacity of %s of which %s is free. "
           "Including non-PyTorch memory, this process has %s memory in use. %s allowed; Of the allocated memory "
           "%s is allocated by PyTorch, and %s is reserved by PyTorch but unallocated. If reserved but unallocated "
           "memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  "
           "See documentation for Memory Management  "
           "(https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)"
           % (fmt_size(size), fmt_size(TOTAL), fmt_size(device_free), fmt_size(dead.reserved + CONTEXT),
              fmt_size(CAP), fmt_size(dead.allocated()), fmt_size(dead.reserved - dead.allocated())))
dead_header = header("llama_style", dead, cap_gib=13.5, oom=message, st=stats(dead, 1, 1))
torchtrace("dead_run.torchtrace.jsonl", dead, dead_header)
with_entry = History(cap=CAP)
with_entry.entries = list(dead.entries)
with_entry.t = dead.t
with_entry.ev("oom", size, device_free=device_free)
torchtrace("dead_entry.torchtrace.jsonl", with_entry, dead_header)

# The tensor level: the snapshot written at exit (after the OOM, its entry not in the history) and
# the sidecar with PyTorch's statistics and the observer's figures.
blocks = []
for addr, s in sorted(dead.live.items()):
    blocks.append({"device": 0, "address": addr, "total_size": s, "allocated_size": s, "active_size": s,
                   "requested_size": s, "stream": 0, "segment_type": "large", "segment_pool_id": (0, 0),
                   "is_expandable": False, "frames": [],
                   "blocks": [{"address": addr, "size": s, "requested_size": s, "state": "active_allocated",
                               "frames": []}]})
snapshot = {"segments": blocks, "device_traces": [[dict(e, frames=[]) for e in dead.entries]],
            "allocator_settings": {"PYTORCH_CUDA_ALLOC_CONF": ""}, "external_annotations": []}
with open(os.path.join(HERE, "dead_run.snapshot.pickle"), "wb") as f:
    f.write(pickle.dumps(snapshot, protocol=4))
oom_time = (dead.t + 40) / 1e6
memory_stats = stats(dead, 1, 1)
sidecar = {
    "format": "vramtrace-torch-sidecar", "version": 1, "pid": 4242, "ppid": 1, "rank": None, "host": "gpu-node",
    "argv": ["train.py"], "python": "3.11.9", "torch_version": "2.11.0+cu130", "torch_cuda": "13.0",
    "reason": "exit", "final": True, "written_at": oom_time + 0.5, "snapshot": "dead_run.snapshot.pickle",
    "snapshot_error": None, "snapshot_s": 0.01,
    "recording": {"state": "on", "reason": None, "started_at": T0_US / 1e6, "api": "new", "enabled": "all",
                  "context": "alloc", "stacks": "python", "max_entries": 1000000, "oom_observer": True,
                  "signals": ["SIGTERM"]},
    "allocator": {"backend": "native", "current_allocator": "CUDAAllocator",
                  "env": {"PYTORCH_CUDA_ALLOC_CONF": None, "PYTORCH_ALLOC_CONF": None,
                          "PYTORCH_NO_CUDA_MEMORY_CACHING": None}},
    "history": {"entries": len(dead.entries), "wrapped": False, "max_entries": 1000000,
                "devices": [{"device": 0, "entries": len(dead.entries), "wrapped": False, "actions": {}}]},
    "devices": [{"device": 0, "primary_context": True, "memory_stats": memory_stats,
                 "mem_get_info": [device_free, TOTAL]}],
    "ooms": [{"time": oom_time, "device": 0, "alloc_bytes": size, "device_allocated": CAP,
              "device_free": device_free, "stats": memory_stats}],
    "ooms_dropped": 0,
}
with open(os.path.join(HERE, "dead_run.snapshot.pickle.json"), "w") as f:
    f.write(json.dumps(sidecar, indent=1) + "\n")


# --- the shim's traces (docs/trace-format.md, version 1.1) -------------------------------------
T4 = 15655829504  # --limit T4: the card's usable total


class ShimTrace:
    def __init__(self, command):
        self.lines = [json.dumps({
            "a": "header", "format": "vramtrace", "version": "1.1", "tool_version": "0.1.0", "pid": 4242, "ppid": 1,
            "host": "gpu-node", "rank": "", "command_line": command, "start_unix_ns": T0_US * 1000,
            "clock": "CLOCK_MONOTONIC", "origin_monotonic_ns": 1000, "cuda_driver_version": 13000,
            "cuda_runtime_version": 13000,
            "devices": [{"id": 0, "name": "NVIDIA H200", "total_bytes": T4}], "allocator_settings": "",
            "settings": {"reuse": "lazy_sync", "limit": "[*:%d]" % T4},
            "entry_points": ["", "cudaMalloc", "cudaFree"],
            "trace": {"buffer_events": 16384, "on_full": "wait", "flush_interval_ms": 100, "compression": "none"}},
            separators=(",", ":"))]
        self.t = 1000
        self.next_addr = 0x7F0000000000
        self.counts = {}
        self.segments = {}  # address -> size, the shim allocator's segments
        self.live = {}  # address -> size, blocks handed to the program
        self.peak_reserved = 0
        self.retries = 0
        self.failures = 0

    def ev(self, a, **fields):
        self.t += 1000
        e = {"a": a, "t": self.t}
        e.update(fields)
        e.setdefault("th", 77)
        self.lines.append(json.dumps(e, separators=(",", ":")))
        self.counts[a] = self.counts.get(a, 0) + 1

    def malloc(self, size):
        """cudaMalloc served by the shim's allocator: one segment per request (sizes above 10 MiB)."""
        addr = self.next_addr
        self.next_addr += size + 2 * MiB
        self.ev("segment_alloc", p=addr, r=size, e=1)
        self.segments[addr] = size
        self.peak_reserved = max(self.peak_reserved, sum(self.segments.values()))
        self.ev("alloc", p=addr, r=size, e=1)
        self.live[addr] = size
        return addr

    def cuda_free(self, addr):
        """cudaFree: the shim keeps the segment cached."""
        size = self.live.pop(addr)
        self.ev("free_requested", p=addr, r=size, e=2)
        self.ev("free_completed", p=addr, r=size, e=2)

    def fail(self, size):
        """cudaMalloc over the cap: the shim releases its idle segments, retries once, fails."""
        for addr in sorted(a for a in self.segments if a not in self.live):
            self.ev("segment_free", p=addr, r=self.segments.pop(addr), e=1)
        self.retries += 1
        self.failures += 1
        reserved = sum(self.segments.values())
        self.ev("oom", r=size, e=1, free=T4 - reserved, retries=self.retries)

    def write(self, name):
        self.lines.append(json.dumps({
            "a": "trailer", "t": self.t + 1000, "events": len(self.lines) - 1, "dropped": 0, "counts": self.counts,
            "devices": [{"device": 0, "stats": {"reserved_bytes.all.peak": self.peak_reserved,
                                                "num_ooms": self.failures, "num_alloc_retries": self.retries}}]},
            separators=(",", ":")))
        with open(os.path.join(HERE, name), "w") as f:
            f.write("\n".join(self.lines) + "\n")


s = ShimTrace(["python3", "train.py"])
params = [s.malloc(3 * GiB) for _ in range(3)]  # 9 GiB of PyTorch's segments
a = s.malloc(2 * GiB)
b = s.malloc(2 * GiB)
s.fail(2 * GiB)  # 13 GiB + 2 GiB > 14.58 GiB: PyTorch frees its cached segment b and calls again
s.cuda_free(b)
s.ev("alloc", p=b, r=2 * GiB, e=1)  # served from the shim's cache: the request succeeded
s.live[b] = 2 * GiB
s.fail(1792 * MiB)  # survived once more: PyTorch frees a, and the call is served from its segment
s.cuda_free(a)
s.ev("alloc", p=a, r=1792 * MiB, e=1)
s.live[a] = 1792 * MiB
s.fail(2 * GiB)  # the final request: fails, PyTorch releases what it caches (nothing), fails again
s.fail(2 * GiB)
s.write("retries.vramtrace.jsonl")

p = ShimTrace(["./saxpy"])
p.malloc(12 * GiB)
p.fail(4 * GiB)
p.write("plain_oom.vramtrace.jsonl")
