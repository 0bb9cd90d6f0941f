#!/usr/bin/env python3
"""Cost of call stacks per captured allocation, VRAMTRACE_STACKS none / native / python /
native,python interleaved over several rounds, with the fake CUDA of tests/shim and a trace file
being written. Prints per configuration the median ns per cudaMalloc+cudaFree pair and its excess
over `none`: the cost of one capture (frees capture nothing). Figures go to docs/benchmarks.md.

  python3 tests/bench/stacks_bench.py --build build --rounds 3
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

MODES = ["none", "native", "python", "native,python"]


def env_for(build, mode, out):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VRAMTRACE_", "LD_PRELOAD", "LD_LIBRARY_PATH"))}
    env["LD_LIBRARY_PATH"] = os.path.join(build, "tests/shim/fakelib")
    env["LD_PRELOAD"] = os.path.join(build, "shim/libvramtrace.so")
    env["VRAMTRACE_OUTPUT"] = out
    env["VRAMTRACE_STACKS"] = mode
    return env


def native_round(build, mode, tmp):
    out = os.path.join(tmp, f"native-{mode}.jsonl")
    if os.path.exists(out):
        os.remove(out)
    cmd = [os.path.join(build, "tests/shim/roads/bench_stacks"), "--benchmark_format=json",
           "--benchmark_min_time=0.3"]
    r = subprocess.run(cmd, env=env_for(build, mode, out), capture_output=True, text=True, check=True)
    return {b["name"]: b["cpu_time"] for b in json.loads(r.stdout)["benchmarks"]}


def python_round(build, mode, tmp, depth, pairs):
    out = os.path.join(tmp, f"py-{mode}-{depth}.jsonl")
    if os.path.exists(out):
        os.remove(out)
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bench_stacks.py")
    r = subprocess.run([sys.executable, "-B", script, str(depth), str(pairs)], env=env_for(build, mode, out),
                       capture_output=True, text=True, check=True)
    return float(r.stdout.split()[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default="build")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--pairs", type=int, default=20000)
    args = ap.parse_args()
    results = {}  # (name, mode) -> [ns per pair, one per round]
    with tempfile.TemporaryDirectory(prefix="vt-stacks-bench-") as tmp:
        for rnd in range(args.rounds):
            for mode in MODES:
                for name, ns in native_round(args.build, mode, tmp).items():
                    results.setdefault((name, mode), []).append(ns)
                for depth in (10, 40):
                    name = f"python pairs at Python depth {depth}"
                    results.setdefault((name, mode), []).append(python_round(args.build, mode, tmp, depth, args.pairs))
            print(f"round {rnd + 1} of {args.rounds} done", file=sys.stderr)
    names = sorted({n for n, _ in results})
    print(f"{'benchmark':<40} {'stacks':<14} {'ns/pair (median)':>17} {'rounds':>26} {'capture us':>11}")
    for name in names:
        base = statistics.median(results[(name, "none")])
        for mode in MODES:
            v = results[(name, mode)]
            med = statistics.median(v)
            rounds = ", ".join(f"{x:.0f}" for x in v)
            extra = "" if mode == "none" else f"{(med - base) / 1000:.2f}"
            print(f"{name:<40} {mode:<14} {med:>17.0f} {rounds:>26} {extra:>11}")


if __name__ == "__main__":
    main()
