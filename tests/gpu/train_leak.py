#!/usr/bin/env python3
"""A small PyTorch training loop for `tests/gpu/leak_check.sh`: an MLP trained on random data,
with a deliberate small leak when --leak is given (each step keeps a 1 MiB tensor and the loss
with its graph in a list that is never cleared, the classic "losses.append(loss)" bug).

It records the run two ways, so that both of vramtrace's inputs are exercised:
  --out FILE    PyTorch's own allocator history as JSON lines with a mark per step
                (python/pytest_vramtrace.py TorchHistory); no LD_PRELOAD needed.
  under `vramtrace run --tensors`, the shim's trace, with a mark per step through
                python/vramtrace_mark.py (a no-op without the shim).
"""
import argparse
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))  # or `pip install ./python`
import pytest_vramtrace  # noqa: E402  (TorchHistory)

try:
    import vramtrace_mark  # noqa: E402
except ImportError:
    vramtrace_mark = None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--leak", action="store_true", help="keep 1 MiB and the loss graph per step")
    ap.add_argument("--out", help="write PyTorch's allocator history here (JSON lines)")
    args = ap.parse_args()

    torch.manual_seed(0)
    dev = torch.device("cuda")
    model = torch.nn.Sequential(
        torch.nn.Linear(1024, 4096), torch.nn.ReLU(), torch.nn.Linear(4096, 4096), torch.nn.ReLU(),
        torch.nn.Linear(4096, 1024)).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    kept = []

    def step(i):
        if vramtrace_mark is not None:
            vramtrace_mark.mark("step %d" % i)
        x = torch.randn(512, 1024, device=dev)
        y = torch.randn(512, 1024, device=dev)
        loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if args.leak:
            kept.append(torch.empty(256 * 1024, dtype=torch.float32, device=dev))  # 1 MiB
            kept.append(loss)
        return loss.item()

    history = pytest_vramtrace.TorchHistory(workload="train_leak leak=%s" % args.leak) if args.out else None
    if history:
        history.__enter__()
    for i in range(args.steps):
        if history:
            history.mark("step %d" % i)
        step(i)
    if history:
        history.mark("end")
        history.__exit__(None, None, None)
        history.write(args.out)
        print("wrote", args.out)
    print("steps", args.steps, "leak", args.leak, "kept", len(kept),
          "allocated MiB", torch.cuda.memory_allocated() / 2**20)


if __name__ == "__main__":
    main()
