#!/usr/bin/env python3
"""A program written to run out of memory by fragmentation inside PyTorch's caching allocator.

Each of --layers layers allocates a temporary of --temp-mib, frees it, then allocates a weight of
--weight-mib that it keeps (the loading pattern of vllm-project/vllm PR 41268; ../shared/cases.md
C1). Under PyTorch's defaults each weight is split from the cached temporary's segment, so the
next temporary finds only the remainder and needs a segment of its own: reserved memory grows by
--temp-mib a layer while allocated memory grows by --weight-mib, and the free remainders (inactive
split blocks) cannot be released. With max_split_size_mb below --temp-mib the temporary's block is
never split and is reused by the next temporary; with expandable_segments:True free pages serve
any request. After the layers, --final-mib is allocated and freed --steps times (an activation
buffer), and the program prints one line "RESULT {json}" with PyTorch's own figures.

Usage: split_waste.py [--layers 36] [--temp-mib 530] [--weight-mib 270] [--final-mib 1024] [--steps 3]
Exit 0 on success; an OutOfMemoryError propagates (exit 1) so that a run under a cap dies of it.
"""
import argparse
import json

import torch

MiB = 1 << 20


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", type=int, default=36)
    ap.add_argument("--temp-mib", type=int, default=530)
    ap.add_argument("--weight-mib", type=int, default=270)
    ap.add_argument("--final-mib", type=int, default=1024)
    ap.add_argument("--steps", type=int, default=3)
    args = ap.parse_args()
    dev = torch.device("cuda")
    weights = []
    for _ in range(args.layers):
        t = torch.empty(args.temp_mib * MiB, dtype=torch.uint8, device=dev)
        t.fill_(1)
        del t
        w = torch.empty(args.weight_mib * MiB, dtype=torch.uint8, device=dev)
        w.fill_(2)
        weights.append(w)
    checksum = 0
    for _ in range(args.steps):
        x = torch.empty(args.final_mib * MiB, dtype=torch.uint8, device=dev)
        x.fill_(3)
        checksum += int(x[:16].sum().item())
        del x
    torch.cuda.synchronize()
    s = torch.cuda.memory_stats()
    print("RESULT " + json.dumps({
        "ok": True,
        "checksum": checksum,
        "peak_allocated": s["allocated_bytes.all.peak"],
        "peak_reserved": s["reserved_bytes.all.peak"],
        "num_ooms": s["num_ooms"],
        "num_alloc_retries": s["num_alloc_retries"],
    }), flush=True)


if __name__ == "__main__":
    main()
