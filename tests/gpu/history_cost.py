#!/usr/bin/env python3
"""What PyTorch's allocator history costs per training step, by recording setting, in one process
(so that every setting runs on the same model, interleaved, round after round).

GPT-2 124M training (bf16 autocast, batch 8 x 1024, AdamW: tests/gpu/gpt2_step.py, the step that
tests/gpu/torch_level_check.py times too).
Settings: off; context="all" / "alloc" / "state" with stacks="python"; context=None (actions
only). Each round runs every setting for --steps steps after one untimed step, in an order
rotated from round to round; a setting's figure is the median over rounds of each run's median
step time. Prints one table and `RESULT {json}`.

Usage: history_cost.py [--rounds 3] [--steps 10]
"""
import argparse
import json
import statistics

import torch

from gpt2_step import gpt2_trainer


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=10)
    args = ap.parse_args()
    step = gpt2_trainer()

    record = torch.cuda.memory._record_memory_history
    settings = {
        "off": None,
        "all/python": dict(enabled="all", context="all", stacks="python", max_entries=1_000_000),
        "alloc/python": dict(enabled="all", context="alloc", stacks="python", max_entries=1_000_000),
        "state/python": dict(enabled="state", context="all", stacks="python"),
        "actions only": dict(enabled="all", context=None, max_entries=1_000_000),
        "all/python 100k": dict(enabled="all", context="all", stacks="python", max_entries=100_000),
    }
    names = list(settings)
    for _ in range(3):
        step()
    runs = {n: [] for n in names}
    for rnd in range(args.rounds):
        order = names[rnd % len(names):] + names[:rnd % len(names)]
        for n in order:
            record(enabled=None)
            if settings[n] is not None:
                record(**settings[n])
            step()
            times = [step() for _ in range(args.steps)]
            record(enabled=None)
            runs[n].append(statistics.median(times))
            print(f"round {rnd} {n}: {runs[n][-1]:.2f} ms", flush=True)
    base = statistics.median(runs["off"])
    print(f"\n| setting | step ms (median of rounds) | ratio | runs |\n|---|---|---|---|")
    for n in names:
        m = statistics.median(runs[n])
        print(f"| {n} | {m:.2f} | {m / base:.4f} | {', '.join(f'{x:.2f}' for x in runs[n])} |")
    print("RESULT " + json.dumps({n: runs[n] for n in names}), flush=True)


if __name__ == "__main__":
    main()
