#!/usr/bin/env python3
"""Runs the compatibility checks of libvramtrace.so in one go (step `compat` of
scripts/gpu-check.sh) and prints a compact Markdown table; also writes it, a JSON file and all logs
under $OUT (or ./gpu-compat-out).

Each row runs a program without the shim and with it (LD_PRELOAD), and compares:
  - the program's results (exit code, checksums / loss values after N steps: bit-identical),
  - the calls the shim intercepted (its VRAMTRACE_TEST_STATS_FILE) with the program's own calls,
  - step or call timings (benchmarks), and peak reserved memory.
Nothing is built here except the two nvcc programs when the build directory lacks them.

Usage: gpu_compat.py [--ctest] [--budget SECONDS] [--build DIR]
  --ctest   only the nvcc rows and compute-sanitizer (quick); exit 1 if any fails
"""
import argparse
import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GPU_DIR = os.path.join(ROOT, "tests", "gpu")
T0 = time.time()


def find_build(explicit):
    cands = [explicit] if explicit else []
    if os.environ.get("VRAMTRACE_BUILD_DIR"):
        cands.append(os.environ["VRAMTRACE_BUILD_DIR"])
    cands += [os.path.join(ROOT, d) for d in ("build", "build-release", "build-shim")]
    for c in cands:
        if c and os.path.exists(os.path.join(c, "shim", "libvramtrace.so")):
            return os.path.abspath(c)
    sys.exit("gpu-compat: no build directory with shim/libvramtrace.so (set VRAMTRACE_BUILD_DIR)")


class Runner:
    def __init__(self, shim, out, budget):
        self.shim, self.out, self.budget = shim, out, budget
        os.makedirs(os.path.join(out, "logs"), exist_ok=True)
        self.stats_dir = tempfile.mkdtemp(prefix="vt-stats-")

    def left(self):
        return self.budget - (time.time() - T0)

    def run(self, name, argv, shim, env=None, timeout=120):
        """Runs argv; returns dict(rc, wall_s, out, err, result, program, stats)."""
        if self.left() < 15:
            return {"rc": None, "skipped": True, "wall_s": 0, "out": "", "err": "", "result": None,
                    "program": {}, "stats": {}}
        e = {k: v for k, v in os.environ.items()
             if not k.startswith(("VRAMTRACE_", "PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_NO_CUDA", "XLA_PYTHON"))
             and k != "LD_PRELOAD"}
        e["CUBLAS_WORKSPACE_CONFIG"] = ":4096:8"
        e["TOKENIZERS_PARALLELISM"] = "false"
        e["HF_HUB_OFFLINE"] = "1"
        e["TRANSFORMERS_OFFLINE"] = "1"
        tag = f"{name}.{'shim' if shim else 'plain'}"
        for f in glob.glob(os.path.join(self.stats_dir, tag + ".*")):
            os.remove(f)
        e["VRAMTRACE_TEST_STATS_FILE"] = os.path.join(self.stats_dir, tag + ".%p")
        if shim:
            e["LD_PRELOAD"] = self.shim
        e.update(env or {})
        t = time.time()
        limit = min(timeout, max(10, self.left() - 5))
        cut_short = False  # stopped by the step's budget, before the row's own limit: not a verdict
        try:
            p = subprocess.run(argv, env=e, capture_output=True, text=True, timeout=limit)
            rc, out, err = p.returncode, p.stdout, p.stderr
        except subprocess.TimeoutExpired as x:
            rc, out, err = "timeout", x.stdout or "", x.stderr or ""
            out = out.decode() if isinstance(out, bytes) else out
            err = err.decode() if isinstance(err, bytes) else err
            cut_short = limit < timeout
        wall = time.time() - t
        with open(os.path.join(self.out, "logs", tag + ".out"), "w") as f:
            f.write(out)
        with open(os.path.join(self.out, "logs", tag + ".err"), "w") as f:
            f.write(err)
        result = None
        program = {}
        for line in out.splitlines():
            if line.startswith("RESULT "):
                result = json.loads(line[7:])
            parts = line.split()
            if len(parts) == 2:
                try:
                    program[parts[0]] = float(parts[1])
                except ValueError:
                    pass
        stats = {}
        files = glob.glob(os.path.join(self.stats_dir, tag + ".*"))
        # the main process's file: the one with the most calls (python may fork helpers)
        best = None
        for fn in files:
            d = {}
            for line in open(fn):
                k, _, v = line.partition(" ")
                try:
                    d[k] = int(v)
                except ValueError:
                    pass
            score = sum(v for k, v in d.items() if k.startswith("calls."))
            if best is None or score > best[0]:
                best = (score, d)
        if best:
            stats = best[1]
        if cut_short:
            return {"rc": None, "skipped": True, "wall_s": round(wall, 1), "out": out, "err": err, "result": None,
                    "program": program, "stats": stats}
        return {"rc": rc, "wall_s": round(wall, 1), "out": out, "err": err, "result": result,
                "program": program, "stats": stats}


def shim_errors(r):
    return [l for l in r["err"].splitlines() if l.startswith("vramtrace:")]


def ok(r):
    return r["rc"] == 0 and not shim_errors(r)


def why(*runs):
    """The last stderr line of the first failing run (for the notes column)."""
    for r in runs:
        if r.get("rc") not in (0, None) or shim_errors(r):
            lines = [l.strip() for l in r["err"].splitlines() if l.strip()]
            return "; " + (lines[-1][:160] if lines else f"rc={r['rc']}")
    return ""


def fmt_rc(r):
    if r.get("skipped"):
        return "skipped (time)"
    return "ok" if r["rc"] == 0 else f"rc={r['rc']}"


ROWS = []


def row(**kw):
    ROWS.append(kw)
    print("  " + " | ".join(f"{k}={v}" for k, v in kw.items()), flush=True)


def calls(stats, *names):
    return sum(stats.get("calls." + n, 0) for n in names)


# --------------------------------------------------------------------------------- nvcc rows
def nvcc_programs(build):
    bins = {k: os.path.join(build, "gpu", "alloc_check_" + k) for k in ("static", "shared")}
    if all(os.path.exists(b) for b in bins.values()):
        return bins
    nvcc = shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"
    d = tempfile.mkdtemp(prefix="vt-nvcc-")
    src = os.path.join(GPU_DIR, "alloc_check.cu")
    bins = {"static": os.path.join(d, "alloc_check_static"), "shared": os.path.join(d, "alloc_check_shared")}
    subprocess.run([nvcc, "-O2", "-arch=native", src, "-o", bins["static"]], check=True)
    subprocess.run([nvcc, "-O2", "-arch=native", "-cudart", "shared", "-Xlinker",
                    "-rpath=" + os.path.dirname(os.path.dirname(nvcc)) + "/lib64", src, "-o", bins["shared"]],
                   check=True)
    return bins


def nvcc_rows(R, bins, quick):
    args = ["--quick"] if quick else []
    results = {}
    for kind, b in bins.items():
        p = R.run("nvcc_" + kind, [b] + args, False, timeout=120)
        s = R.run("nvcc_" + kind, [b] + args, True, timeout=120)
        st = s["stats"]
        if kind == "shared":
            seen = (calls(st, "cudaMalloc"), calls(st, "cudaFree"), calls(st, "cudaMallocAsync"))
        else:  # static cudart: only the driver level sees it
            seen = (calls(st, "cuMemAlloc_v2"), calls(st, "cuMemFree_v2"), calls(st, "cuMemAllocAsync"))
        prog = (s["program"].get("program.cudaMalloc"), s["program"].get("program.cudaFree"),
                s["program"].get("program.cudaMallocAsync"))
        same = bool(p["program"]) and {k: v for k, v in p["program"].items() if not k.startswith(("time.", "meminfo.free"))} == \
               {k: v for k, v in s["program"].items() if not k.startswith(("time.", "meminfo.free"))}
        good = ok(p) and ok(s) and same and tuple(int(x or -1) for x in prog) == seen
        results[kind] = good
        row(row=f"nvcc program, {kind} cudart", plain=fmt_rc(p), shim=fmt_rc(s),
            identical="yes" if same else "NO",
            intercepted=f"{seen[0]}/{seen[1]}/{seen[2]} of {prog[0]}/{prog[1]}/{prog[2]} (malloc/free/async)",
            timing=f"malloc+free 1 MiB: {p['program'].get('time.pair_us')} -> {s['program'].get('time.pair_us')} us",
            verdict="PASS" if good else "FAIL",
            notes=f"errors {s['program'].get('check.errors')}, lazy syncs {st.get('shim.lazy_syncs')}, "
                  f"resolver substitutions {st.get('shim.resolver_substitutions')}, "
                  f"unmapped {st.get('shim.resolver_unmapped')}" + why(p, s))
    return results


def sanitizer_row(R, bins):
    cs = shutil.which("compute-sanitizer") or "/usr/local/cuda/bin/compute-sanitizer"
    if not os.path.exists(cs):
        row(row="compute-sanitizer memcheck", verdict="SKIP", notes="no compute-sanitizer")
        return True
    s = R.run("sanitizer", [cs, "--tool", "memcheck", "--error-exitcode", "9", bins["static"], "--quick"], True,
              timeout=240)
    clean = s["rc"] == 0 and "ERROR SUMMARY: 0 errors" in s["out"] + s["err"]
    active = calls(s["stats"], "cuMemAlloc_v2") > 0
    row(row="compute-sanitizer memcheck (static nvcc program)", shim=fmt_rc(s),
        intercepted=f"cuMemAlloc_v2 {calls(s['stats'], 'cuMemAlloc_v2')}",
        verdict="PASS" if clean and active else "FAIL",
        notes=("" if active else "shim not active; ") + why(s))
    return clean and active


# --------------------------------------------------------------------------------- python rows
def torch_rows(R):
    py = sys.executable
    script = os.path.join(GPU_DIR, "torch_train.py")
    modes = [("default allocator (segment level)", {}, ("cudaMalloc",)),
             ("PYTORCH_NO_CUDA_MEMORY_CACHING=1 (tensor level)", {"PYTORCH_NO_CUDA_MEMORY_CACHING": "1"}, ("cudaMalloc",)),
             ("expandable_segments:True", {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}, ("cuMemCreate",)),
             ("backend:cudaMallocAsync", {"PYTORCH_CUDA_ALLOC_CONF": "backend:cudaMallocAsync"}, ("cudaMallocAsync",))]
    argv = [py, script, "--model", "gpt2-small", "--steps", "6", "--warmup", "0"]
    control = R.run("torch_control", argv, False)
    # An independent count of the program's runtime-level calls (tests/gpu/count_probe.c),
    # preloaded in front of the shim: PyTorch keeps no count in tensor mode or with cudaMallocAsync.
    probe = os.path.join(os.path.dirname(os.path.dirname(R.shim)), "gpu", "count_probe.so")
    for i, (label, env, hooks) in enumerate(modes):
        p = R.run(f"torch_{i}", argv, False, env)
        probe_env = dict(env)
        probe_file = os.path.join(R.stats_dir, f"probe_{i}.%p")
        if os.path.exists(probe):
            probe_env.update(LD_PRELOAD=probe + ":" + R.shim, COUNT_PROBE_FILE=probe_file)
        s = R.run(f"torch_{i}", argv, True, probe_env)
        counted = {}
        for fn in glob.glob(probe_file.replace("%p", "*")):
            for line in open(fn):
                k, _, v = line.partition(" ")
                counted[k] = counted.get(k, 0) + int(v)
        pl, sl = (p["result"] or {}).get("losses"), (s["result"] or {}).get("losses")
        same = pl is not None and pl == sl
        st = s["stats"]
        prog = (s["result"] or {}).get("num_device_alloc")
        source = "torch num_device_alloc"
        if "probe." + hooks[0] in counted and hooks[0] != "cuMemCreate":
            prog, source = counted["probe." + hooks[0]], "program's calls, counting probe"
        seen = calls(st, *hooks)
        count_ok = prog is None or hooks[0] == "cuMemCreate" or prog == seen
        good = ok(p) and ok(s) and same and seen > 0 and count_ok
        row(row=f"PyTorch, {label}", plain=fmt_rc(p), shim=fmt_rc(s), identical="yes" if same else "NO",
            intercepted=f"{'+'.join(hooks)} {seen} ({source} {prog})",
            verdict="PASS" if good else "FAIL",
            notes=f"cached allocs {st.get('shim.cached_allocs')}, unmapped {st.get('shim.resolver_unmapped')}" + why(p, s))
    cl = (control["result"] or {}).get("losses")
    cl2 = (R.run("torch_control2", argv, False)["result"] or {}).get("losses")
    row(row="PyTorch determinism control (two runs without the shim)",
        identical="yes" if cl is not None and cl == cl2 else "NO", notes="precondition for the bit-identical rows")


def simple_rows(R):
    py = sys.executable
    cases = [("CuPy, default memory pool", [py, os.path.join(GPU_DIR, "cupy_check.py")], {}),
             ("JAX, default allocator (BFC, preallocation)", [py, os.path.join(GPU_DIR, "jax_check.py")], {}),
             ("JAX, XLA_PYTHON_CLIENT_ALLOCATOR=platform", [py, os.path.join(GPU_DIR, "jax_check.py")],
              {"XLA_PYTHON_CLIENT_ALLOCATOR": "platform"})]
    for i, (label, argv, env) in enumerate(cases):
        p = R.run(f"py_{i}", argv, False, env)
        s = R.run(f"py_{i}", argv, True, env)
        same = p["result"] is not None and p["result"] == s["result"]
        st = s["stats"]
        seen = calls(st, "cuMemAlloc_v2")
        good = ok(p) and ok(s) and same and seen > 0
        row(row=label, plain=fmt_rc(p), shim=fmt_rc(s), identical="yes" if same else "NO",
            intercepted=f"cuMemAlloc_v2 {seen}, cuMemFree_v2 {calls(st, 'cuMemFree_v2')}",
            verdict="PASS" if good else "FAIL",
            notes=f"cached allocs {st.get('shim.cached_allocs')}, unmapped {st.get('shim.resolver_unmapped')}" + why(p, s))


def gb(x):
    return f"{x / 1e9:.3f} GB" if isinstance(x, (int, float)) and x else "n/a"


def bench_rows(R):
    """GPT-2 124M and Llama-style 1.1B training steps, one run of each (their step times are
    shown, not judged: step `bench` judges the targets over interleaved rounds):
    shim in front of PyTorch's default allocator (target <= 1.01x native), shim in tensor mode
    (PYTORCH_NO_CUDA_MEMORY_CACHING=1, target <= 1.03x) under each reuse policy, and the shim's
    peak reserved in tensor mode against the shim's peak in front of PyTorch's allocator (both count
    every device allocation of the process, PyTorch's and the libraries' own; PyTorch's own counter
    leaves the libraries out). The losses are not compared here: these models use autocast and
    fused attention and differ between two native runs; bit-identity is the rows above."""
    py = sys.executable
    script = os.path.join(GPU_DIR, "torch_train.py")
    nocache = {"PYTORCH_NO_CUDA_MEMORY_CACHING": "1"}
    plans = {
        "gpt2": ["--steps", "10", "--warmup", "3"],
        "llama": ["--steps", "6", "--warmup", "2"],
    }
    for model, extra in plans.items():
        argv = [py, script, "--model", model] + extra
        native = R.run(f"bench_{model}_native", argv, False)
        nres = native["result"] or {}
        base = nres.get("step_ms_median")
        native_peak = nres.get("peak_reserved")
        front_peak = None
        row(row=f"bench {model}: native PyTorch allocator, no shim", plain=fmt_rc(native),
            timing=f"step {base:.1f} ms" if base else "n/a", notes=f"peak reserved {gb(native_peak)}")
        variants = [("shim in front of PyTorch's allocator", True, {}, 1.01),
                    ("shim, tensor mode, reuse:lazy_sync", True, dict(nocache), 1.03),
                    ("shim, tensor mode, reuse:stream_ordered", True, dict(nocache, VRAMTRACE_CONF="reuse:stream_ordered"), 1.03),
                    ("shim, tensor mode, reuse:none", True, dict(nocache, VRAMTRACE_CONF="reuse:none"), None),
                    ("no shim, tensor mode (raw cudaMalloc)", False, dict(nocache), None)]
        if model == "llama":
            variants = variants[:3]
        for label, shim, env, target in variants:
            tag = f"bench_{model}_" + "".join(c if c.isalnum() else "_" for c in label)
            r = R.run(tag, argv, shim, env)
            res = r["result"] or {}
            ms = res.get("step_ms_median")
            ratio = ms / base if ms and base else None
            notes = []
            verdict = ""
            if shim:
                peak = r["stats"].get("allocator.reserved_bytes.all.peak")
                notes.append(f"shim peak reserved {gb(peak)}")
                notes.append(f"lazy syncs {r['stats'].get('shim.lazy_syncs')}, cached allocs {r['stats'].get('shim.cached_allocs')}")
                if label.startswith("shim in front"):
                    front_peak = peak
                ok_peak = "tensor mode" not in label or "none" in label or (
                    peak is not None and front_peak is not None and peak <= front_peak)
                if target is not None or "tensor mode" in label:
                    verdict = "SKIP" if r.get("skipped") else "PASS" if ok(r) and ok_peak else "FAIL"
            row(row=f"bench {model}: {label}", **({"shim": fmt_rc(r)} if shim else {"plain": fmt_rc(r)}),
                # One run of each, not interleaved: the step time is shown, not judged (the
                # targets are judged by step `bench`, interleaved rounds).
                timing=(f"step {ms:.1f} ms = {ratio:.3f}x native, one run" + (f" (target <= {target}x: step bench)" if target else ""))
                if ms and ratio else "n/a",
                notes="; ".join(notes) + why(r), verdict=verdict)


def write_table(out):
    keys = ["row", "plain", "shim", "identical", "intercepted", "timing", "verdict", "notes"]
    for r in ROWS:
        for k in r:
            if k not in keys:
                keys.append(k)
    lines = ["| " + " | ".join(keys) + " |", "|" + "---|" * len(keys)]
    for r in ROWS:
        lines.append("| " + " | ".join(str(r.get(k, "")) for k in keys) + " |")
    head = (f"GPU compatibility run, {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}, "
            f"{round(time.time() - T0)} s, command: tests/gpu/gpu_compat.py {' '.join(sys.argv[1:])}; "
            f"logs: {os.path.join(out, 'logs')}/<name>.<plain|shim>.<out|err>")
    try:
        head += "\n\n" + subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total",
                                         "--format=csv,noheader"], capture_output=True, text=True).stdout.strip()
    except OSError:
        pass
    text = head + "\n\n" + "\n".join(lines) + "\n"
    print("\n" + text)
    with open(os.path.join(out, "gpu-compat.md"), "w") as f:
        f.write(text)
    with open(os.path.join(out, "gpu-compat.json"), "w") as f:
        json.dump(ROWS, f, indent=1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ctest", action="store_true")
    ap.add_argument("--budget", type=float, default=460.0)
    ap.add_argument("--build")
    args = ap.parse_args()
    build = find_build(args.build)
    out = os.environ.get("OUT") or os.path.join(ROOT, "gpu-compat-out")
    R = Runner(os.path.join(build, "shim", "libvramtrace.so"), out, args.budget)
    print(f"gpu-compat: shim {R.shim}, output {out}", flush=True)
    bins = nvcc_programs(build)
    res = nvcc_rows(R, bins, quick=args.ctest)
    san = sanitizer_row(R, bins)
    if args.ctest:
        write_table(out)
        sys.exit(0 if all(res.values()) and san else 1)
    for part in (torch_rows, simple_rows, bench_rows):
        try:
            part(R)
        except Exception as x:  # keep going: one broken part must not hide the others
            row(row=part.__name__, verdict="ERROR", notes=f"{type(x).__name__}: {x}")
    write_table(out)


if __name__ == "__main__":
    main()
