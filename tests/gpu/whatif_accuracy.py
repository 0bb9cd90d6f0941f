#!/usr/bin/env python3
"""GPU measurement: how far a what-if replay's peak reserved memory is from the real program's
under the same allocator setting (the error bound of `vramtrace oom`'s verdicts: Note [what-if
error bound] in reporter/analyses/oom/verdict.h).

For each workload:
  1. the program under the default `vramtrace run` (no cap, default settings): its tensor-level
     snapshot (PyTorch's allocator history, `<trace>.torch.pickle`) and its real peak reserved;
  2. the program alone, without vramtrace and without a cap, under each setting
     (PYTORCH_CUDA_ALLOC_CONF): its real peak reserved (torch.cuda.max_memory_reserved());
  3. `vramtrace replay` of the default run's snapshot with each setting (--conf, on a capacity far
     above the need, so that no replay runs out): its replayed peak reserved.
It prints replay peak vs real peak per (workload, setting), the difference in MiB and in % of the
real peak, and the largest differences, and writes everything to $OUT/whatif-accuracy.json.

Workloads (--workloads, comma-separated; cheapest first by default):
  bert     tests/gpu/bert_varlen.py (BERT-base MLM, fp32, batch 24, lengths 32..512: fragmentation)
  encoder  tests/gpu/encoder_cap.py (8-layer encoder, random lengths 64..2048)
  gpt2     tests/gpu/torch_train.py --model gpt2 (124M, bf16 autocast, batch 8 x 1024)
  llama    tests/gpu/torch_train.py --model llama (1.1B, gradient checkpointing)
Settings (--settings, ';'-separated; '' = defaults): the ones `vramtrace oom` tries.

Usage: whatif_accuracy.py --build DIR [--out DIR] [--workloads bert,gpt2] [--budget SECONDS]
Exit: 0 when every measured row has a replay and a real figure, 1 otherwise, 77 without a GPU.
"""
import argparse
import glob
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SETTINGS = ["", "expandable_segments:True", "max_split_size_mb:20", "max_split_size_mb:128",
            "max_split_size_mb:512", "roundup_power2_divisions:4"]


def workload_argv(name):
    py = sys.executable
    if name == "bert":
        return [py, os.path.join(HERE, "bert_varlen.py"), "--steps", "8"]
    if name == "encoder":
        return [py, os.path.join(HERE, "encoder_cap.py"), "--steps", "4"]
    if name == "gpt2":
        return [py, os.path.join(HERE, "torch_train.py"), "--model", "gpt2", "--steps", "3", "--warmup", "1"]
    if name == "llama":
        return [py, os.path.join(HERE, "torch_train.py"), "--model", "llama", "--steps", "2", "--warmup", "1"]
    raise SystemExit(f"unknown workload {name}")


def run(argv, env=None, timeout=600):
    e = dict(os.environ)
    e.update(env or {})
    t0 = time.time()
    try:
        p = subprocess.run(argv, env=e, capture_output=True, text=True, timeout=timeout)
        rc, out, err = p.returncode, p.stdout, p.stderr
    except subprocess.TimeoutExpired as x:
        rc, out, err = 124, x.stdout or "", x.stderr or ""
        out = out.decode() if isinstance(out, bytes) else out
        err = err.decode() if isinstance(err, bytes) else err
    result = None
    for line in out.splitlines():
        if line.startswith("RESULT "):
            try:
                result = json.loads(line[7:])
            except ValueError:
                pass
    return {"argv": argv, "rc": rc, "seconds": round(time.time() - t0, 1), "result": result,
            "stdout_tail": out[-1500:], "stderr_tail": err[-2000:]}


def real_peak(res):
    r = res.get("result") or {}
    return r.get("peak_reserved")


def require_cuda():
    """Exits 77 (ctest's skip code) without CUDA PyTorch."""
    try:
        import torch
        if not torch.cuda.is_available():
            print("no CUDA device: skipped")
            sys.exit(77)
    except ImportError:
        print("no torch: skipped")
        sys.exit(77)


def mib(b):
    return b / 2**20


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", required=True)
    ap.add_argument("--out", default=os.environ.get("OUT", "whatif-accuracy-out"))
    ap.add_argument("--workloads", default="bert,encoder,gpt2,llama")
    ap.add_argument("--settings", default=";".join(SETTINGS))
    ap.add_argument("--budget", type=float, default=1500, help="seconds; no new workload starts after it")
    args = ap.parse_args()
    require_cuda()
    os.makedirs(args.out, exist_ok=True)
    vt = os.path.join(args.build, "bin", "vramtrace")
    settings = args.settings.split(";")
    start = time.time()
    report = {"settings": settings, "workloads": {}, "rows": []}
    ok = True
    for name in args.workloads.split(","):
        if time.time() - start > args.budget:
            print(f"budget spent: {name} not measured", flush=True)
            report["workloads"][name] = {"skipped": "budget"}
            continue
        argv = workload_argv(name)
        out = os.path.join(args.out, name)
        os.makedirs(out, exist_ok=True)
        w = {"argv": argv, "real": {}, "replay": {}}
        # 1. The default vramtrace run: the tensor-level snapshot to replay.
        traced = run([vt, "run", "-o", os.path.join(out, "t.%p.jsonl"), "--"] + argv)
        snaps = sorted(glob.glob(os.path.join(out, "t.*.torch.pickle")))
        w["traced"] = {k: traced[k] for k in ("rc", "seconds", "result", "stderr_tail")}
        print(f"\n== {name}: traced run rc {traced['rc']} ({traced['seconds']} s), peak reserved "
              f"{real_peak(traced)}, snapshots {snaps}", flush=True)
        if traced["rc"] != 0 or not snaps:
            print(traced["stderr_tail"], flush=True)
            ok = False
            report["workloads"][name] = w
            continue
        snap = snaps[0]
        w["snapshot"] = snap
        # 2. The real program under each setting, alone.
        for s in settings:
            env = {"PYTORCH_CUDA_ALLOC_CONF": s} if s else {"PYTORCH_CUDA_ALLOC_CONF": ""}
            r = run(argv, env)
            w["real"][s] = {"rc": r["rc"], "seconds": r["seconds"], "peak_reserved": real_peak(r),
                            "peak_allocated": (r["result"] or {}).get("peak_allocated")}
            print(f"  real   {s or '(defaults)':<28} rc {r['rc']} peak reserved {real_peak(r)} ({r['seconds']} s)",
                  flush=True)
            if r["rc"] != 0:
                print(r["stderr_tail"][-800:], flush=True)
        # 3. The replays of the default run's history, one pass for every setting.
        cmd = [vt, "replay", snap, "--capacity", "1TiB", "--json"]
        for s in settings:
            cmd += ["--conf", s]
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
        try:
            doc = json.loads(p.stdout)
            for res in doc["results"]:
                w["replay"][res["settings"]] = {"peak_reserved": res["stats"]["reserved_bytes.all.peak"],
                                                "peak_allocated": res["stats"]["allocated_bytes.all.peak"]}
        except (ValueError, KeyError) as e:
            print(f"  replay failed (rc {p.returncode}): {e}\n{p.stderr[-1500:]}", flush=True)
            ok = False
        report["workloads"][name] = w
        for s in settings:
            real = w["real"].get(s, {}).get("peak_reserved")
            rep = w["replay"].get(s, {}).get("peak_reserved")
            row = {"workload": name, "settings": s, "real_peak_reserved": real, "replay_peak_reserved": rep}
            if real and rep:
                row["diff_bytes"] = rep - real
                row["diff_pct_of_real"] = 100.0 * (rep - real) / real
            else:
                ok = False
            report["rows"].append(row)

    print("\n| workload | settings | real peak reserved | replay peak reserved | replay - real | % of real |")
    print("|---|---|---|---|---|---|")
    for r in report["rows"]:
        real, rep = r["real_peak_reserved"], r["replay_peak_reserved"]
        if real and rep:
            print(f"| {r['workload']} | {r['settings'] or '(defaults)'} | {mib(real):.2f} MiB | {mib(rep):.2f} MiB "
                  f"| {mib(rep - real):+.2f} MiB | {r['diff_pct_of_real']:+.3f} % |")
        else:
            print(f"| {r['workload']} | {r['settings'] or '(defaults)'} | {real} | {rep} | - | - |")
    measured = [r for r in report["rows"] if "diff_bytes" in r]
    if measured:
        worst_abs = max(measured, key=lambda r: abs(r["diff_bytes"]))
        worst_rel = max(measured, key=lambda r: abs(r["diff_pct_of_real"]))
        # Underestimates are what make a "fits" wrong: the replay reserves less than the program.
        under = [r for r in measured if r["diff_bytes"] < 0]
        report["worst_abs"] = worst_abs
        report["worst_rel"] = worst_rel
        print(f"\nlargest |replay - real|: {mib(abs(worst_abs['diff_bytes'])):.2f} MiB "
              f"({worst_abs['workload']}, {worst_abs['settings'] or '(defaults)'})")
        print(f"largest |replay - real| relative: {abs(worst_rel['diff_pct_of_real']):.3f} % "
              f"({worst_rel['workload']}, {worst_rel['settings'] or '(defaults)'})")
        if under:
            w = min(under, key=lambda r: r["diff_bytes"])
            print(f"largest underestimate: {mib(-w['diff_bytes']):.2f} MiB = {-w['diff_pct_of_real']:.3f} % "
                  f"({w['workload']}, {w['settings'] or '(defaults)'})")
        print("The error bound (verdict.h) must cover the underestimates, relative to the capacity and in bytes.")
    with open(os.path.join(args.out, "whatif-accuracy.json"), "w") as f:
        json.dump(report, f, indent=1)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
