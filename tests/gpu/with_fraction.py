#!/usr/bin/env python3
"""Runs a Python program under PyTorch's per-process memory cap.

Usage: with_fraction.py FRACTION SCRIPT [ARGS...]
Calls torch.cuda.set_per_process_memory_fraction(FRACTION) on the current device (the
allocator may then reserve at most FRACTION x the device's total memory), then runs SCRIPT as
__main__ with ARGS, as `python SCRIPT ARGS` would.
"""
import runpy
import sys

import torch


def main():
    if len(sys.argv) < 3:
        raise SystemExit("usage: with_fraction.py FRACTION SCRIPT [ARGS...]")
    torch.cuda.set_per_process_memory_fraction(float(sys.argv[1]))
    script = sys.argv[2]
    sys.argv = [script] + sys.argv[3:]
    runpy.run_path(script, run_name="__main__")


if __name__ == "__main__":
    main()
