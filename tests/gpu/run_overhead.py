#!/usr/bin/env python3
"""Step time of the real `vramtrace run` against the program run alone, interleaved
(docs/benchmarks.md, "the tensor level under vramtrace run").

Each round runs every variant once, in an order rotated from round to round:
  native    python3 torch_train.py --model M ...
  run       vramtrace run -o DIR/M-%p.jsonl -- python3 torch_train.py ...   (the default: shim in
            front of PyTorch's allocator, its trace, PyTorch's history with allocation stacks)
  no_torch  the same with --no-torch (device level only)
  run_nostacks  `run` with VRAMTRACE_TORCH_CONTEXT=none (PyTorch's history without Python stacks)
  run_noshimstacks  `run` with VRAMTRACE_STACKS=none (the shim's trace without call stacks)
  run_nonestacks    `run` with both: no call stack recorded at either level
  native_history    the program alone with PyTorch's history turned on in-process as `run` turns it
            on (with_history.py: allocation stacks, Python frames): PyTorch's own share of the cost
  shim_history      `run --no-torch` of with_history.py: the shim and its trace under PyTorch's
            history, without vramtrace's Python start-up hook
  hook_only         the Python start-up hook alone (PYTHONPATH and VRAMTRACE_TORCH_OUT as `run`
            sets them), no shim preloaded: the hook's share
Every process is pinned to the same CPUs (--cpus, default 2-9) so that the scheduler's placement
is not one more variable, and the GPU's SM clock and throttle reasons are sampled once a second
while it runs. Per process: the median of its timed steps; per variant: the median over rounds,
and its ratio to native's. GPT-2 step times on the H200 fall into two clusters from process to
process (about 63 and 72-80 ms, native included), so the per-process medians are printed too.

Usage: run_overhead.py --build DIR [--models gpt2,llama] [--rounds N] [--steps N] [--budget S]
Writes $OUT/run-overhead.json.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
T0 = time.time()


def sampler(stop, samples):
    while not stop.is_set():
        try:
            p = subprocess.run(["nvidia-smi", "--query-gpu=clocks.sm,clocks_throttle_reasons.active",
                                "--format=csv,noheader,nounits"], capture_output=True, text=True, timeout=5)
            samples.append(p.stdout.strip())
        except Exception:  # noqa: BLE001 - sampling is best effort
            pass
        stop.wait(1.0)


def parse_cpus(spec):
    cpus = set()
    for part in spec.split(","):
        a, _, b = part.partition("-")
        cpus.update(range(int(a), int(b or a) + 1))
    return cpus


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", required=True)
    ap.add_argument("--models", default="gpt2")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--cpus", default="2-9")
    ap.add_argument("--budget", type=float, default=540)
    ap.add_argument("--variants", default="native,run,no_torch")
    args = ap.parse_args()
    out = os.environ.get("OUT") or "."
    vt = os.path.join(os.path.abspath(args.build), "bin", "vramtrace")
    tdir = os.path.join(out, "traces")
    os.makedirs(tdir, exist_ok=True)
    cpus = parse_cpus(args.cpus)
    # Where `vramtrace run` finds its start-up hook in a build or install tree (cmd_run.cpp).
    boot = next((d for d in (os.path.join(os.path.abspath(args.build), "share", "vramtrace", "python", "vramtrace", "_boot"),
                             os.path.join(os.path.dirname(os.path.dirname(HERE)), "python", "vramtrace", "_boot"))
                 if os.path.isdir(d)), "")
    env = {k: v for k, v in os.environ.items() if not k.startswith("VRAMTRACE_") and k != "LD_PRELOAD"}
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    warm = {"gpt2": 3, "llama": 2}
    results = []
    names = args.variants.split(",")
    for rnd in range(args.rounds):
        for model in args.models.split(","):
            prog = [sys.executable, os.path.join(HERE, "torch_train.py"), "--model", model,
                    "--steps", str(args.steps if model == "gpt2" else max(4, args.steps // 3)),
                    "--warmup", str(warm.get(model, 2))]
            order = names[rnd % len(names):] + names[:rnd % len(names)]
            for v in order:
                if time.time() - T0 > args.budget - 45:
                    print(f"budget: stopped before round {rnd} {model} {v}", flush=True)
                    break
                trace = os.path.join(tdir, f"{model}-{v}-r{rnd}-%p.jsonl")
                run = [vt, "run", "-o", trace, "--"] + prog
                argv = {"native": prog, "run": run,
                        "no_torch": [vt, "run", "--no-torch", "-o", trace, "--"] + prog,
                        "run_nostacks": run, "run_noshimstacks": run, "run_nonestacks": run,
                        "native_history": [sys.executable, os.path.join(HERE, "with_history.py")] + prog[1:],
                        "shim_history": [vt, "run", "--no-torch", "-o", trace, "--", sys.executable,
                                         os.path.join(HERE, "with_history.py")] + prog[1:],
                        "hook_only": prog}[v]
                venv = dict(env, **{"run_nostacks": {"VRAMTRACE_TORCH_CONTEXT": "none"},
                                    "run_noshimstacks": {"VRAMTRACE_STACKS": "none"},
                                    "run_nonestacks": {"VRAMTRACE_TORCH_CONTEXT": "none",
                                                       "VRAMTRACE_STACKS": "none"},
                                    "hook_only": {"PYTHONPATH": boot, "VRAMTRACE_TORCH_OUT":
                                                  os.path.join(tdir, f"{model}-hook-r{rnd}-%p.torch.pickle")},
                                    }.get(v, {}))
                stop, samples = threading.Event(), []
                th = threading.Thread(target=sampler, args=(stop, samples), daemon=True)
                th.start()
                t = time.time()
                p = subprocess.run(argv, env=venv, capture_output=True, text=True, timeout=300,
                                   preexec_fn=lambda: os.sched_setaffinity(0, cpus))
                stop.set()
                th.join()
                res = None
                for line in p.stdout.splitlines():
                    if line.startswith("RESULT "):
                        res = json.loads(line[7:])
                row = {"round": rnd, "model": model, "variant": v, "rc": p.returncode,
                       "wall_s": round(time.time() - t, 1),
                       "step_ms_median": res and res["step_ms_median"],
                       "step_ms": res and [round(x, 2) for x in res["step_ms"]],
                       "peak_reserved": res and res["peak_reserved"], "clocks": samples,
                       "err": p.stderr[-400:] if p.returncode else ""}
                results.append(row)
                print(f"round {rnd} {model} {v}: rc={p.returncode} median={row['step_ms_median']} "
                      f"wall={row['wall_s']} clocks={sorted(set(samples))[:4]}", flush=True)
                for f in os.listdir(tdir):  # keep the disk small: only the figures matter here
                    os.remove(os.path.join(tdir, f))
    summary = {}
    for model in args.models.split(","):
        meds = {v: [r["step_ms_median"] for r in results if r["model"] == model and r["variant"] == v
                    and r["step_ms_median"]] for v in names}
        base = statistics.median(meds["native"]) if meds.get("native") else None
        for v, m in meds.items():
            if not m:
                continue
            med = statistics.median(m)
            summary[f"{model}/{v}"] = {"median_ms": round(med, 2), "ratio": round(med / base, 4) if base else None,
                                       "min_ms": round(min(m), 2), "per_process": [round(x, 2) for x in m]}
    for k, s in summary.items():
        print(k, s)
    with open(os.path.join(out, "run-overhead.json"), "w") as f:
        json.dump({"args": vars(args), "summary": summary, "runs": results}, f, indent=1)


if __name__ == "__main__":
    main()
