"""One process, two GPUs (step `multi` of scripts/gpu-check.sh): the first half of an MLP on cuda:0,
the second half on cuda:1 (manual model parallelism), a few training steps. vramtrace must trace
each device's memory separately in the one trace.

Prints `RESULT {json}` with PyTorch's peak allocated bytes per device.
"""
import argparse
import json

import torch
import torch.nn as nn


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=5)
    args = ap.parse_args()
    assert torch.cuda.device_count() >= 2, "needs two GPUs"
    d0, d1 = torch.device("cuda:0"), torch.device("cuda:1")
    first = nn.Sequential(nn.Linear(2048, 8192), nn.GELU(), nn.Linear(8192, 2048)).to(d0)
    # The second half is larger, so that the two devices hold clearly different amounts.
    second = nn.Sequential(nn.Linear(2048, 16384), nn.GELU(), nn.Linear(16384, 16384), nn.GELU(),
                           nn.Linear(16384, 2048)).to(d1)
    opt = torch.optim.AdamW(list(first.parameters()) + list(second.parameters()), lr=1e-4)
    loss = None
    for _ in range(args.steps):
        x = torch.randn(64, 2048, device=d0)
        y = torch.randn(64, 2048, device=d1)
        h = first(x).to(d1)
        loss = nn.functional.mse_loss(second(h), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    torch.cuda.synchronize(d0)
    torch.cuda.synchronize(d1)
    print("RESULT " + json.dumps({
        "loss": float(loss.item()),
        "max_memory_allocated": [torch.cuda.max_memory_allocated(d0), torch.cuda.max_memory_allocated(d1)],
    }), flush=True)


if __name__ == "__main__":
    main()
