#!/usr/bin/env python3
"""Writes a large PyTorch-format allocator trace (JSON lines) by repeating a real one.

Each repetition shifts every address by rep * 2**37 (the gpt2 trace spans less than 2**36 bytes)
and every time by the trace's duration; at the end of a repetition every block still live is
freed and every segment released, so repetitions do not pile up. The first line is the source's
header with its "stats" removed (they describe one repetition only).

Usage: gen_repeated_trace.py SOURCE.torchtrace.jsonl.gz OUT.jsonl EVENTS
"""
import gzip
import json
import sys


def main():
    src, out_path, target = sys.argv[1], sys.argv[2], int(sys.argv[3])
    with gzip.open(src, "rt") as f:
        lines = f.read().splitlines()
    header = json.loads(lines[0])
    header.pop("stats", None)
    header["workload"] = header.get("workload", "") + f" repeated to {target} events"
    events = [json.loads(l) for l in lines[1:]]
    t0 = events[0]["time_us"]
    span = events[-1]["time_us"] - t0 + 1000
    # What is live at the end of one repetition: blocks and segments, to release.
    live, segs = {}, {}
    for e in events:
        a = e["action"]
        if a == "alloc":
            live[e["addr"]] = e["size"]
        elif a == "free_completed":
            live.pop(e["addr"], None)
        elif a == "segment_alloc":
            segs[e["addr"]] = e["size"]
        elif a == "segment_free":
            segs.pop(e["addr"], None)
    tail = []
    for addr, size in sorted(live.items()):
        tail.append({"action": "free_requested", "addr": addr, "size": size, "stream": 0})
        tail.append({"action": "free_completed", "addr": addr, "size": size, "stream": 0})
    for addr, size in sorted(segs.items()):
        tail.append({"action": "segment_free", "addr": addr, "size": size, "stream": 0})
    last_t = events[-1]["time_us"]
    for i, e in enumerate(tail):
        e["time_us"] = last_t + 1 + i
    rep_events = events + tail
    n = 0
    with open(out_path, "w") as out:
        out.write(json.dumps(header) + "\n")
        rep = 0
        while n < target:
            shift, tshift = rep << 37, rep * (span + len(tail))
            chunk = []
            for e in rep_events:
                if n >= target:
                    break
                chunk.append('{"action": "%s", "addr": %d, "size": %d, "stream": %d, "time_us": %d}\n'
                             % (e["action"], e["addr"] + shift, e["size"], e["stream"], e["time_us"] + tshift))
                n += 1
            out.write("".join(chunk))
            rep += 1
    print(f"wrote {n} events in {rep} repetitions to {out_path}", file=sys.stderr)


if __name__ == "__main__":
    main()
