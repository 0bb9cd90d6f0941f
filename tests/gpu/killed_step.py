#!/usr/bin/env python3
"""A small PyTorch training that kills itself with SIGKILL, as the OOM killer or a scheduler would.

--at mid:      in the middle of step --step, after its forward pass (activations alive, gradients
               not yet made), with the GPU's work finished (synchronize) so that the trace holds
               every allocation of that moment;
--at boundary: right after step --step ended cleanly (optimizer step, zero_grad, synchronize).

Every step is marked with vramtrace_mark where the marks API is importable (vramtrace run puts it
on the path with the tensor level), so the trace shows the step boundaries.

Usage: killed_step.py [--at mid|boundary] [--step 3] [--width 4096] [--batch 512]
Never returns normally: the process dies of SIGKILL (exit status -9 / 137).
"""
import argparse
import os
import signal

import torch

try:
    from vramtrace_mark import mark
except ImportError:  # the marks API is optional
    def mark(_name):
        pass


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--at", choices=("mid", "boundary"), default="mid")
    ap.add_argument("--step", type=int, default=3)
    ap.add_argument("--width", type=int, default=4096)
    ap.add_argument("--batch", type=int, default=512)
    args = ap.parse_args()
    torch.manual_seed(0)
    dev = torch.device("cuda")
    layers = [torch.nn.Linear(args.width, args.width) for _ in range(6)]
    model = torch.nn.Sequential(*[m for layer in layers for m in (layer, torch.nn.GELU())]).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    for step in range(1, 100):
        mark(f"step {step}")
        x = torch.randn(args.batch, args.width, device=dev)
        loss = model(x).square().mean()
        if step == args.step and args.at == "mid":
            torch.cuda.synchronize()
            os.kill(os.getpid(), signal.SIGKILL)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if step == args.step and args.at == "boundary":
            torch.cuda.synchronize()
            os.kill(os.getpid(), signal.SIGKILL)


if __name__ == "__main__":
    main()
