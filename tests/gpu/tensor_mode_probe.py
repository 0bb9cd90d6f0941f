"""GPT-2 124M training steps (tests/gpu/gpt2_step.py) timed in whatever mode the environment sets,
for comparing tensor mode's reuse policies with the shim's statistics file beside it.

Usage: python3 tensor_mode_probe.py [STEPS]   prints "median_ms X" over the steps after two warm-up steps
"""
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpt2_step import gpt2_trainer  # noqa: E402

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 12
step = gpt2_trainer()
times = [step() for _ in range(steps)]
print("median_ms %.2f" % statistics.median(times[2:]), flush=True)
