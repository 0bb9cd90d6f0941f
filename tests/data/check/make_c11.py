#!/usr/bin/env python3
"""Writes the case C11 traces (docs/cases.md, marin-community/marin 7115) in PyTorch's
allocator-history JSON-lines form (the torchtrace layout of tests/data/torch-h200/README.md):

  c11_fresh.torchtrace.jsonl    a fresh run: ten 2 GiB parameters, each in its own segment, laid out
                                back to back; then three steps that allocate and free 14.30 GiB.
  c11_resumed.torchtrace.jsonl  a resumed run: each parameter is read through a 3 GiB temporary load
                                buffer that is freed before the parameter is allocated, so the
                                parameter is split out of the buffer's cached segment and leaves a
                                1 GiB hole behind; the 14.30 GiB request then finds no block big enough,
                                cudaMalloc fails (40 GiB device, 30 GiB reserved) and nothing can be
                                released: an OOM with the same 20 GiB live as the fresh run.

The events follow PyTorch's native policy (best fit, split of large blocks when the remainder is
over 1 MiB, a new segment of the rounded size when no cached block fits, release of unused
cached segments before an OOM). Deterministic; run it from anywhere:
    python3 tests/data/check/make_c11.py
"""
import json
import os

GiB = 1 << 30
MiB = 1 << 20
TOTAL = 40 * GiB
PARAM = 2 * GiB
LOAD_BUFFER = 3 * GiB
REQUEST = 14644 * MiB  # 14.30 GiB
HERE = os.path.dirname(os.path.abspath(__file__))


class Trace:
    def __init__(self, workload):
        self.t = 1_796_000_000_000_000
        self.lines = [json.dumps({"kind": "header", "source": "tests/data/check/make_c11.py", "workload": workload,
                                  "conf": "", "total": TOTAL})]
        self.next_addr = 0x7F0000000000

    def ev(self, action, addr=None, size=0, **extra):
        self.t += 50
        e = {"action": action}
        if addr is not None:
            e["addr"] = addr
        e.update({"size": size, "stream": 0, "time_us": self.t})
        e.update(extra)
        self.lines.append(json.dumps(e))

    def segment(self, size):
        addr = self.next_addr
        self.next_addr += size + 2 * MiB  # the driver leaves gaps between allocations
        self.ev("segment_alloc", addr, size)
        return addr

    def free(self, addr, size):
        self.ev("free_requested", addr, size)
        self.ev("free_completed", addr, size)

    def write(self, name):
        with open(os.path.join(HERE, name), "w") as f:
            f.write("\n".join(self.lines) + "\n")


def fresh():
    t = Trace("c11 fresh run")
    for _ in range(10):
        t.ev("alloc", t.segment(PARAM), PARAM)
    big = None
    for step in range(3):
        t.ev("mark", size=0)
        if big is None:
            big = t.segment(REQUEST)  # 20 + 14.30 GiB reserved: fits in 40 GiB
        t.ev("alloc", big, REQUEST)
        t.free(big, REQUEST)
    t.write("c11_fresh.torchtrace.jsonl")


def resumed():
    t = Trace("c11 resumed run")
    for _ in range(10):
        # The temporary load buffer needs a new segment: every cached hole is 1 GiB.
        seg = t.segment(LOAD_BUFFER)
        t.ev("alloc", seg, LOAD_BUFFER)
        t.free(seg, LOAD_BUFFER)
        # Best fit: the parameter is split out of the buffer's cached 3 GiB block.
        t.ev("alloc", seg, PARAM)
    t.ev("mark", size=0)
    # 30 GiB reserved, 10 GiB left on the device: cudaMalloc(14.30 GiB) fails, no segment is
    # wholly free to release, so the allocator reports an OOM.
    t.ev("oom", size=REQUEST, device_free=TOTAL - 30 * GiB)
    t.write("c11_resumed.torchtrace.jsonl")


if __name__ == "__main__":
    fresh()
    resumed()
