#!/usr/bin/env python3
"""Writes a long PyTorch-format allocator trace (JSON lines) in the shape of an LLM's decode loop.

SECONDS seconds of decode steps, one every 20 ms: each step allocates a 4 MiB activation and frees
it 1 ms later, and grows a KV cache by 256 KiB, the cache's oldest 256 KiB freed once it holds 100
of them. At 61.8 % of the run, a burst: 64 allocations of 64 KiB to 4 MiB within 400 us, freed
within the next 400 us, so that the run's peak lies in a window far below the page's bucket width
at full view (the case of a deep zoom into a long run).

Usage: gen_long_trace.py OUT.jsonl [SECONDS]   (default 600)
"""
import json
import sys

MiB, KiB = 1 << 20, 1 << 10


def main():
    out_path = sys.argv[1]
    seconds = float(sys.argv[2]) if len(sys.argv) > 2 else 600.0
    t0 = 1_000_000_000
    seg, seg_size = 0x7F0000000000, 512 * MiB
    act = seg  # the activation of each step: the first 4 MiB
    kv = seg + 4 * MiB  # the KV cache's blocks, 256 KiB each, in a ring of 100
    burst = seg + 64 * MiB  # the burst, after the KV ring
    events = [("segment_alloc", seg, seg_size, t0)]
    steps = int(seconds * 1000 / 20)
    burst_t = t0 + int(seconds * 1e6 * 0.618)
    burst_done = False
    for k in range(steps):
        t = t0 + 10 + k * 20_000
        if not burst_done and t > burst_t:
            addr = burst
            for j in range(64):
                size = 64 * KiB * (1 + j % 64)
                events.append(("alloc", addr + 0, size, burst_t + j * 6))
                addr += size
            addr = burst
            for j in range(64):
                size = 64 * KiB * (1 + j % 64)
                events.append(("free_requested", addr, size, burst_t + 400 + j * 6))
                events.append(("free_completed", addr, size, burst_t + 401 + j * 6))
                addr += size
            burst_done = True
        events.append(("alloc", act, 4 * MiB, t))
        slot = kv + (k % 100) * 256 * KiB
        if k >= 100:
            events.append(("free_requested", slot, 256 * KiB, t + 1))
            events.append(("free_completed", slot, 256 * KiB, t + 2))
        events.append(("alloc", slot, 256 * KiB, t + 3))
        events.append(("free_requested", act, 4 * MiB, t + 1000))
        events.append(("free_completed", act, 4 * MiB, t + 1001))
    events.sort(key=lambda e: e[3])  # stable: each time's events keep their order
    header = {"kind": "header", "source": "gen_long_trace.py", "workload": "long decode, %g s" % seconds}
    with open(out_path, "w") as out:
        out.write(json.dumps(header) + "\n")
        for a, addr, size, t in events:
            out.write('{"action": "%s", "addr": %d, "size": %d, "stream": 0, "time_us": %d}\n' % (a, addr, size, t))


if __name__ == "__main__":
    main()
