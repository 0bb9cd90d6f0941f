#!/usr/bin/env python3
"""Runs a Python script with PyTorch's allocator history turned on by the process itself, as a
user does without vramtrace: `_record_memory_history(enabled="all", context="alloc",
stacks="python", max_entries=N)` (what `vramtrace run` turns on by default), then the script.
For run_overhead.py's `native_history` variant: the cost of PyTorch's own recording, apart from
the shim, its trace and vramtrace's start-up hook.

Usage: with_history.py [--max-entries N] SCRIPT [ARGS...]
"""
import runpy
import sys

import torch

args = sys.argv[1:]
max_entries = 1_000_000  # vramtrace run's default (torch_level.py)
if args[:1] == ["--max-entries"]:
    max_entries = int(args[1])
    args = args[2:]
torch.cuda.memory._record_memory_history(enabled="all", context="alloc", stacks="python",
                                         max_entries=max_entries)
sys.argv = args
runpy.run_path(args[0], run_name="__main__")
