#!/usr/bin/env python3
"""GPU check of the tensor level (python/vramtrace/torch_level.py) with a real PyTorch.

Runs short child programs under PYTHONPATH=python/vramtrace/_boot with VRAMTRACE_TORCH_OUT set,
as `vramtrace run` does, and checks what they wrote:

  train   GPT-2 124M training from GPT2Config() (no download; bf16 autocast, batch 8 x 1024, AdamW,
          --steps steps; tests/gpu/gpt2_step.py, shared with history_cost.py): the history's alloc count equals memory_stats' allocation.all.allocated,
          the peaks replayed from the history equal requested_bytes.all.peak and
          reserved_bytes.all.peak, nothing was initialised at import; the same run without vramtrace
          gives the step time to compare (informational)
  oom     set_per_process_memory_fraction(0.02), tensors until an OutOfMemoryError: the pickle and
          sidecar exist inside the except block and hold the OOM, then the error is re-raised
          (exit status 1, the final write at exit)
  sigint  an uncaught KeyboardInterrupt: exit status -SIGINT, as without vramtrace
  sigterm SIGTERM: exit status -SIGTERM, the write says "signal SIGTERM"

Needs torch with CUDA, a GPU and transformers; takes about a minute on an H200. Prints a PASS/FAIL
table; exit 0 when every row passes, 1 otherwise, 77 when torch, CUDA or transformers is missing.

Usage: python3 tests/gpu/torch_level_check.py [--steps 6] [--keep DIR]
"""
import argparse
import json
import os
import pickle
import shutil
import signal
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BOOT = os.path.join(ROOT, "python", "vramtrace", "_boot")

# --- the child programs (run as `torch_level_check.py --child NAME`) -------------------------------


def child_train(steps):
    import resource

    import torch
    from gpt2_step import gpt2_trainer  # imports transformers too

    initialised_at_import = torch.cuda.is_initialized()
    step = gpt2_trainer()
    times = [step() for _ in range(steps)]
    stats = torch.cuda.memory_stats()
    print("RESULT " + json.dumps({
        "initialised_at_import": initialised_at_import,
        "torch": torch.__version__,
        "step_ms": times,
        "allocations": stats.get("allocation.all.allocated"),
        "peak_allocated": stats.get("allocated_bytes.all.peak"),
        "peak_requested": stats.get("requested_bytes.all.peak"),
        "peak_reserved": stats.get("reserved_bytes.all.peak"),
        "max_rss_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
    }), flush=True)


def child_oom():
    import torch

    torch.cuda.set_per_process_memory_fraction(0.02)
    keep = []
    out = os.environ.get("VRAMTRACE_TORCH_OUT", "").replace("%p", str(os.getpid()))
    try:
        while True:
            keep.append(torch.empty(256 << 20, dtype=torch.uint8, device="cuda"))
    except torch.OutOfMemoryError:
        seen = {"tensors": len(keep)}
        if out:
            with open(out, "rb") as f:
                snap = pickle.load(f)
            with open(out + ".json") as f:
                side = json.load(f)
            seen["reason"] = side["reason"]
            seen["ooms"] = len(side["ooms"])
            seen["oom_actions"] = sum(1 for t in snap["device_traces"] for e in t if e["action"] == "oom")
        print("SEEN " + json.dumps(seen), flush=True)
        raise


def child_signal(name):
    import torch

    keep = [torch.empty(1 << 20, device="cuda") for _ in range(4)]
    sys.stdout.flush()
    os.kill(os.getpid(), getattr(signal, name))
    time.sleep(30)
    print("not reached", len(keep))


# --- the parent ------------------------------------------------------------------------------------

ROWS = []


def row(name, ok, detail):
    ROWS.append((name, "PASS" if ok else "FAIL", detail))


def run_child(workdir, mode, traced, args=(), env_extra=None, timeout=300):
    env = dict(os.environ)
    env.pop("VRAMTRACE_TORCH_OUT", None)
    if traced:
        env["PYTHONPATH"] = os.pathsep.join([BOOT] + [p for p in [env.get("PYTHONPATH")] if p])
        env["VRAMTRACE_TORCH_OUT"] = os.path.join(workdir, mode + ".%p.pickle")
    env.update(env_extra or {})
    t0 = time.time()
    proc = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", mode] + list(args),
                          cwd=workdir, env=env, capture_output=True, text=True, timeout=timeout)
    with open(os.path.join(workdir, "%s%s.log" % (mode, "" if traced else "-untraced")), "w") as f:
        f.write("rc=%d wall=%.1fs\n--- stdout\n%s\n--- stderr\n%s" % (
            proc.returncode, time.time() - t0, proc.stdout, proc.stderr))
    return proc


def tagged(stdout, tag):
    for line in stdout.splitlines():
        if line.startswith(tag + " "):
            return json.loads(line[len(tag) + 1:])
    return None


def written(workdir, mode):
    pickles = sorted(p for p in os.listdir(workdir) if p.startswith(mode + ".") and p.endswith(".pickle"))
    if len(pickles) != 1:
        return None, None
    path = os.path.join(workdir, pickles[0])
    with open(path, "rb") as f:
        snap = pickle.load(f)
    with open(path + ".json") as f:
        side = json.load(f)
    return snap, side


def replay_peaks(trace):
    """Peak requested bytes (alloc/free_requested) and peak reserved (segment events) of a trace."""
    requested = peak_requested = reserved = peak_reserved = 0
    for e in trace:
        a = e["action"]
        if a == "alloc":
            requested += e["size"]
            peak_requested = max(peak_requested, requested)
        elif a == "free_requested":
            requested -= e["size"]
        elif a in ("segment_alloc", "segment_map"):
            reserved += e["size"]
            peak_reserved = max(peak_reserved, reserved)
        elif a in ("segment_free", "segment_unmap"):
            reserved -= e["size"]
    return peak_requested, peak_reserved


def gib(n):
    return "%.3f GiB" % (n / 2**30) if isinstance(n, (int, float)) else str(n)


def check_train(workdir, steps):
    plain = run_child(workdir, "train", traced=False, args=["--steps", str(steps)])
    traced = run_child(workdir, "train", traced=True, args=["--steps", str(steps)])
    res, base = tagged(traced.stdout, "RESULT"), tagged(plain.stdout, "RESULT")
    row("train: exit status 0, traced and not", traced.returncode == 0 and plain.returncode == 0,
        "rc %d / %d" % (traced.returncode, plain.returncode))
    if res is None:
        row("train: result line", False, traced.stderr.strip().splitlines()[-1:] or "no output")
        return
    row("train: CUDA not initialised at import", res["initialised_at_import"] is False, "")
    lines = [l for l in traced.stderr.splitlines() if l.startswith("vramtrace: ")]
    row("train: no vramtrace line on stderr", not lines, "; ".join(lines))
    snap, side = written(workdir, "train")
    row("train: pickle and sidecar written at exit", side is not None and side["reason"] == "exit",
        side and side["reason"])
    if side is None:
        return
    rec = side["recording"]
    row("train: recording on, new API", rec["state"] == "on" and rec["api"] == "new",
        "%s %s, observer %s" % (rec["state"], rec["api"], rec["oom_observer"]))
    hist = side["history"]
    row("train: ring did not wrap", not hist["wrapped"], "%d entries of %d" % (hist["entries"], hist["max_entries"]))
    allocs = sum(1 for t in snap["device_traces"] for e in t if e["action"] == "alloc")
    stat_allocs = sum(d["memory_stats"].get("allocation.all.allocated", 0) for d in side["devices"])
    row("train: history alloc count == allocation.all.allocated", allocs == stat_allocs == res["allocations"],
        "history %d, sidecar stats %d, program %d" % (allocs, stat_allocs, res["allocations"]))
    dev = side["devices"][0]
    peak_req, peak_res = replay_peaks(snap["device_traces"][dev["device"]])
    stats = dev["memory_stats"]
    row("train: replayed peak requested == requested_bytes.all.peak",
        peak_req == stats.get("requested_bytes.all.peak"),
        "%s vs %s" % (gib(peak_req), gib(stats.get("requested_bytes.all.peak"))))
    row("train: replayed peak reserved == reserved_bytes.all.peak",
        peak_res == stats.get("reserved_bytes.all.peak"),
        "%s vs %s" % (gib(peak_res), gib(stats.get("reserved_bytes.all.peak"))))
    row("train: mem_get_info at exit", bool(dev.get("mem_get_info")), str(dev.get("mem_get_info")))
    med = lambda xs: sorted(xs)[len(xs) // 2]  # noqa: E731
    t_on = med(res["step_ms"][1:] or res["step_ms"])
    t_off = med(base["step_ms"][1:] or base["step_ms"]) if base else float("nan")
    pkl = os.path.getsize(os.path.join(workdir, side["snapshot"]))
    print("train: torch %s; peaks allocated %s, requested %s, reserved %s; %d history entries "
          "(%.1f per step); exit snapshot %.2f s, %.1f MB; step %.1f ms traced vs %.1f ms not (%.3fx); "
          "max RSS %.0f MB vs %.0f MB" % (
              res["torch"], gib(res["peak_allocated"]), gib(res["peak_requested"]),
              gib(res["peak_reserved"]), hist["entries"], hist["entries"] / max(1, steps),
              side.get("snapshot_s") or 0, pkl / 1e6, t_on, t_off, t_on / t_off,
              res["max_rss_kb"] / 1e3, (base or {}).get("max_rss_kb", 0) / 1e3))


def check_oom(workdir):
    proc = run_child(workdir, "oom", traced=True)
    seen = tagged(proc.stdout, "SEEN") or {}
    row("oom: the re-raised OutOfMemoryError ends the program (exit 1)", proc.returncode == 1,
        "rc %d" % proc.returncode)
    row("oom: snapshot and sidecar written before the exception reached the program",
        seen.get("reason") == "oom" and seen.get("ooms") == 1 and seen.get("oom_actions", 0) >= 1,
        json.dumps(seen))
    snap, side = written(workdir, "oom")
    ok = side is not None and side["reason"] == "exit" and len(side["ooms"]) == 1
    detail = "no files"
    if side is not None:
        oom = side["ooms"][0] if side["ooms"] else {}
        detail = "final %s, %d OOM(s): alloc %s, device_free %s, num_ooms %s" % (
            side["reason"], len(side["ooms"]), gib(oom.get("alloc_bytes")), gib(oom.get("device_free")),
            (oom.get("stats") or {}).get("num_ooms"))
    row("oom: final write at exit keeps the OOM record", ok, detail)


def check_signal(workdir, name):
    signum = getattr(signal, name)
    plain = run_child(workdir, name.lower(), traced=False, args=["--signal", name], timeout=120)
    traced = run_child(workdir, name.lower(), traced=True, args=["--signal", name], timeout=120)
    row("%s: exit status as without vramtrace" % name,
        traced.returncode == plain.returncode == -signum,
        "rc %d traced, %d not" % (traced.returncode, plain.returncode))
    snap, side = written(workdir, name.lower())
    want = "exit" if name == "SIGINT" else "signal " + name
    row("%s: written (%s)" % (name, want), side is not None and side["reason"] == want,
        side["reason"] if side else "no files")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--child")
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--signal", default="SIGINT")
    ap.add_argument("--keep", help="keep the children's files and logs in this directory")
    args = ap.parse_args()
    if args.child == "train":
        return child_train(args.steps)
    if args.child == "oom":
        return child_oom()
    if args.child in ("sigint", "sigterm"):
        return child_signal(args.signal)

    try:
        import torch  # noqa: F401 - the parent never initialises CUDA
        import transformers  # noqa: F401
    except ImportError as e:
        print("SKIP: %s" % e)
        return 77
    if not torch.cuda.is_available():
        print("SKIP: no CUDA device")
        return 77
    workdir = args.keep or tempfile.mkdtemp(prefix="vt-torch-level-gpu-")
    os.makedirs(workdir, exist_ok=True)
    t0 = time.time()
    try:
        check_train(workdir, args.steps)
        check_oom(workdir)
        check_signal(workdir, "SIGINT")
        check_signal(workdir, "SIGTERM")
    finally:
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
    width = max(len(r[0]) for r in ROWS)
    print("\n%-*s  result  detail" % (width, "check"))
    for name, result, detail in ROWS:
        print("%-*s  %-6s  %s" % (width, name, result, detail))
    failed = [r for r in ROWS if r[1] != "PASS"]
    print("\n%d of %d checks passed in %.0f s%s" % (len(ROWS) - len(failed), len(ROWS), time.time() - t0,
                                                    "" if args.keep else " (files removed; --keep DIR keeps them)"))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
