#!/usr/bin/env python3
"""Writes a job of many ranks as vramtrace traces (format 1.2), with the figures they must give.

Each rank is one process on device 0 of a 16 GiB GPU. It allocates its weights once
(train/model.py:12 in build), then for each step its activations (train/model.py:40 in forward,
freed at the step's end, their segment returned) and an entry of a cache that is never freed
(train/cache.py:7 in remember). Every allocation has a segment of its own, so allocated and
reserved memory are equal and the figures are plain sums:

    peak reserved = weights + activations + steps * cache_entry

One rank (--imbalanced-rank) has activations three times as large; --capacity-oom-ranks fail a
request larger than the free memory of the device; --outside-oom-ranks fail one while the device
says far less memory is free than the process does not hold (memory held outside the allocator).
truth() gives the figures a query must find; `python3 make_job.py DIR --ranks N ...` writes the
traces (DIR/rank<N>.jsonl[.zst|.gz]) and prints truth() as JSON.

For large jobs (--steps in the thousands, --compress zst) the body of each kind of rank is
encoded and compressed once and every rank's file is its own header frame, that body and its
trailer frame: the readers take concatenated zstd frames and gzip members.
"""
import argparse
import gzip
import json
import os
import subprocess
import sys

GiB = 1 << 30
MiB = 1 << 20
TOTAL = 16 * GiB
WEIGHTS = 2 * GiB
ACTIVATIONS = 1 * GiB
CACHE_ENTRY = {"a": 16 * MiB, "b": 64 * MiB}
SITES = {"weights": "train/model.py:12 in build", "activations": "train/model.py:40 in forward",
         "cache": "train/cache.py:7 in remember"}
T0 = 1796020000000000000


def cache_entry(p):
    return p.get("cache_entry") or CACHE_ENTRY[p["variant"]]


def rank_kind(rank, p):
    if rank in p["capacity_oom_ranks"]:
        return "capacity"
    if rank in p["outside_oom_ranks"]:
        return "outside"
    if rank == p["imbalanced_rank"]:
        return "imbalanced"
    return "normal"


def activations_of(kind):
    return 3 * ACTIVATIONS if kind == "imbalanced" else ACTIVATIONS


def truth(p):
    """Per rank: peak reserved and allocated bytes, bytes per site at the peak, the OOM if any."""
    out = {}
    cache = cache_entry(p)
    for rank in range(p["ranks"]):
        kind = rank_kind(rank, p)
        act = activations_of(kind)
        peak = WEIGHTS + act + p["steps"] * cache
        t = {"peak_reserved_bytes": peak, "peak_allocated_bytes": peak,
             "sites_at_peak": {SITES["weights"]: WEIGHTS, SITES["activations"]: act,
                               SITES["cache"]: p["steps"] * cache},
             "end_bytes": WEIGHTS + p["steps"] * cache, "oom": None}
        if kind == "capacity":
            t["oom"] = {"diagnosis": "capacity", "request_bytes": TOTAL - t["end_bytes"] + GiB}
        elif kind == "outside":
            t["oom"] = {"diagnosis": "outside_allocator", "request_bytes": 4 * GiB}
        lines, _, _ = body_lines(kind, p)
        actions = {}
        for line in lines:
            rec = json.loads(line)
            if "t" in rec:  # an event, not a string or stack record
                n, b = actions.get(rec["a"], (0, 0))
                actions[rec["a"]] = (n + 1, b + rec["r"])
        t["actions"] = actions  # action -> (events, sum of their "r" bytes)
        out[rank] = t
    return out


def body_lines(kind, p):
    """The events of one rank after its header, and the counts for its trailer."""
    cache = cache_entry(p)
    act = activations_of(kind)
    lines = []
    counts = {}
    t = [1000]

    def ev(rec):
        rec = dict(rec)
        rec["t"] = t[0]
        t[0] += 1000
        lines.append(json.dumps(rec, separators=(",", ":")))
        counts[rec["a"]] = counts.get(rec["a"], 0) + 1

    files = ["train/model.py", "build", "forward", "train/cache.py", "remember"]
    for i, text in enumerate(files, 1):
        lines.append(json.dumps({"a": "string", "id": i, "text": text}, separators=(",", ":")))
    for sid, (f, line, n) in enumerate([(1, 12, 2), (1, 40, 3), (4, 7, 5)], 1):
        lines.append(json.dumps({"a": "stack", "id": sid, "frames": [{"f": f, "l": line, "n": n}]},
                                separators=(",", ":")))
    base = 0x7f0000000000
    th = 4711
    ev({"a": "segment_alloc", "p": base, "r": WEIGHTS, "th": th, "e": 1, "st": 1})
    ev({"a": "alloc", "p": base, "r": WEIGHTS, "th": th, "e": 1, "st": 1})
    act_addr = base + 64 * GiB
    cache_addr = base + 128 * GiB
    for step in range(p["steps"]):
        ev({"a": "segment_alloc", "p": act_addr, "r": act, "th": th, "e": 1, "st": 2})
        ev({"a": "alloc", "p": act_addr, "r": act, "th": th, "e": 1, "st": 2})
        a = cache_addr + step * cache
        ev({"a": "segment_alloc", "p": a, "r": cache, "th": th, "e": 1, "st": 3})
        ev({"a": "alloc", "p": a, "r": cache, "th": th, "e": 1, "st": 3})
        ev({"a": "free_requested", "p": act_addr, "r": act, "th": th, "e": 2})
        ev({"a": "free_completed", "p": act_addr, "r": act, "th": th, "e": 2})
        ev({"a": "segment_free", "p": act_addr, "r": act, "th": th, "e": 2})
    end = WEIGHTS + p["steps"] * cache
    if kind == "capacity":
        ev({"a": "oom", "r": TOTAL - end + GiB, "th": th, "e": 1, "free": TOTAL - end, "retries": 1, "st": 2})
    elif kind == "outside":
        ev({"a": "oom", "r": 4 * GiB, "th": th, "e": 1, "free": 1 * GiB, "retries": 1, "st": 2})
    return lines, counts, t[0]


def header_line(rank, p):
    return json.dumps({
        "a": "header", "format": "vramtrace", "version": "1.2", "tool_version": "0.1.0",
        "pid": 10000 + rank, "ppid": 1, "host": "node-%03d" % (rank // 8), "rank": str(rank),
        "local_rank": str(rank % 8), "command_line": ["python3", "train.py"], "start_unix_ns": T0,
        "clock": "CLOCK_MONOTONIC", "origin_monotonic_ns": 1000, "cuda_driver_version": 13000,
        "cuda_runtime_version": 13000,
        "devices": [{"id": 0, "name": "NVIDIA H200", "total_bytes": TOTAL}], "allocator_settings": "",
        "settings": {"reuse": "lazy_sync", "stacks": "python"}, "entry_points": ["", "cudaMalloc", "cudaFree"],
        "trace": {"buffer_events": 16384, "on_full": "wait", "flush_interval_ms": 100, "compression": "none"},
    }, separators=(",", ":"))


def trailer_line(counts, t, kind, p):
    peak = WEIGHTS + activations_of(kind) + p["steps"] * cache_entry(p)
    ooms = 1 if kind in ("capacity", "outside") else 0
    return json.dumps({"a": "trailer", "t": t, "events": sum(counts.values()), "dropped": 0, "counts": counts,
                       "devices": [{"device": 0, "stats": {"reserved_bytes.all.peak": peak,
                                                           "allocated_bytes.all.peak": peak,
                                                           "num_ooms": ooms, "num_alloc_retries": ooms}}]},
                      separators=(",", ":"))


def compress(data, how):
    if how == "zst":
        return subprocess.run(["zstd", "-1", "-q", "-c"], input=data, stdout=subprocess.PIPE, check=True).stdout
    if how == "gz":
        return gzip.compress(data, compresslevel=1)
    return data


def write_job(out_dir, p, compress_as="none"):
    os.makedirs(out_dir, exist_ok=True)
    suffix = {"none": "", "zst": ".zst", "gz": ".gz"}[compress_as]
    bodies = {}
    for rank in range(p["ranks"]):
        kind = rank_kind(rank, p)
        if kind not in bodies:
            lines, counts, t = body_lines(kind, p)
            bodies[kind] = (compress(("\n".join(lines) + "\n").encode(), compress_as),
                            compress((trailer_line(counts, t, kind, p) + "\n").encode(), compress_as))
        body, trailer = bodies[kind]
        with open(os.path.join(out_dir, "rank%04d.jsonl%s" % (rank, suffix)), "wb") as f:
            f.write(compress((header_line(rank, p) + "\n").encode(), compress_as))
            f.write(body)
            f.write(trailer)


def params(ranks=256, variant="a", steps=20, imbalanced_rank=77, capacity_oom_ranks=(17, 101),
           outside_oom_ranks=(202,), cache_entry_bytes=None):
    return {"cache_entry": cache_entry_bytes, "ranks": ranks, "variant": variant, "steps": steps,
            "imbalanced_rank": imbalanced_rank, "capacity_oom_ranks": set(capacity_oom_ranks),
            "outside_oom_ranks": set(outside_oom_ranks)}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out_dir")
    ap.add_argument("--ranks", type=int, default=256)
    ap.add_argument("--variant", choices=["a", "b"], default="a", help="job a or b: b's cache entries are 4x a's")
    ap.add_argument("--steps", type=int, default=20, help="7 events each")
    ap.add_argument("--compress", choices=["none", "zst", "gz"], default="none")
    ap.add_argument("--cache-entry-bytes", type=int, help="instead of the variant's (for long runs)")
    ap.add_argument("--no-truth", action="store_true", help="print nothing (truth() reads every body again)")
    args = ap.parse_args()
    p = params(args.ranks, args.variant, args.steps, cache_entry_bytes=args.cache_entry_bytes)
    write_job(args.out_dir, p, args.compress)
    if args.no_truth:
        return
    json.dump({str(k): v for k, v in truth(p).items()}, sys.stdout)
    print()


if __name__ == "__main__":
    main()
