#!/usr/bin/env python3
"""Step-time benchmarks of libvramtrace.so on the GPU, side by side and interleaved
(step `bench` of scripts/gpu-check.sh; figures in docs/benchmarks.md).

Each round runs every variant once, in an order rotated from round to round, so that clock and
thermal drift spread over all variants; a variant's figure is the median over rounds of each
run's median step time, and its ratio is that over the native figure of the same model. The
paired ratio is the median over rounds of a run's total step time over the native run's of the
same round: every run takes the same steps with the same shapes, so where step times vary from
step to step (BERT's variable lengths) the pairing cancels what a median of step medians keeps.

Variants (torch_train.py: GPT-2 124M, Llama-style 1.1B and BERT-base with variable lengths, training steps;
models gpt2, llama, bert, bert-fixed (a control at one length), each also as MODEL_side):
  native          PyTorch's own caching allocator, no shim
  front           the shim in front of PyTorch's allocator (target <= 1.01x native)
  tensor          tensor mode: PYTORCH_NO_CUDA_MEMORY_CACHING=1 under the shim, reuse:lazy_sync
                  (the default; target <= 1.03x native, peak reserved <= native)
  tensor_ordered  the same with reuse:stream_ordered
  tensor_device   the same with reuse:device_sync (GPT-2 only)
  tensor_barrier  the same with reuse:lazy_barrier (a GPU-side barrier instead of each lazy synchronisation)
  tensor_traced   tensor mode with the full trace written (VRAMTRACE_OUTPUT, plain JSON Lines as `vramtrace run`
                  writes by default; target <= 1.03x the untraced tensor run)
  tensor_ordered_traced
                  tensor_ordered with the full trace written: the tracing cost without the lazy
                  synchronisations, whose run-to-run spread (5-20 %) hides a 3 % effect
                  (target <= 1.03x tensor_ordered)
  torch_level     PyTorch's own allocator history with Python stacks of allocations
                  (python/vramtrace/_boot on PYTHONPATH, VRAMTRACE_TORCH_OUT), no shim
  torch_level_all the same with the stacks of frees too (VRAMTRACE_TORCH_CONTEXT=all)
  front_stacks    the shim in front of PyTorch's allocator with its trace written and call stacks
                  (the default VRAMTRACE_STACKS=native,python; target <= 1.01x native)
  front_nostacks  the same with VRAMTRACE_STACKS=none: the stacks' own cost is the ratio between them
  tensor_ordered_nostacks
                  tensor_ordered_traced with VRAMTRACE_STACKS=none (tensor mode: ~1,500 stacks per
                  GPT-2 step; tensor_ordered_traced has them)
  run             what `vramtrace run` does by default: the shim in front of PyTorch's allocator
                  with its trace written, plus the tensor level (target <= 1.02x native); the
                  snapshot's alloc count and peaks are checked against the sidecar's memory_stats
Peak reserved: PyTorch's max_memory_reserved for native; for the shim runs the allocator's peak,
which also holds what libraries allocate with cudaMalloc outside PyTorch's allocator (so the
front run's shim peak is the like-for-like native figure for the tensor runs).

Usage: gpu_bench.py [--rounds N] [--budget SECONDS] [--build DIR] [--models gpt2,llama]
                    [--variants native,front,...] [--gpt2-steps N] [--steps MODEL=N ...]
Writes $OUT/gpu-bench.md and gpu-bench.json (logs under $OUT/logs).
"""
import argparse
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpu_compat as gc  # noqa: E402

NOCACHE = {"PYTORCH_NO_CUDA_MEMORY_CACHING": "1"}


BOOT = os.path.join(gc.ROOT, "python", "vramtrace", "_boot")


def torch_level_env(trace_dir, model, tag):
    pythonpath = BOOT + (":" + os.environ["PYTHONPATH"] if os.environ.get("PYTHONPATH") else "")
    return {"PYTHONPATH": pythonpath, "VRAMTRACE_TORCH_OUT": os.path.join(trace_dir, f"{model}-{tag}-%p.torch.pickle")}


# The figures the tensor level must give exactly as PyTorch counts them (torch.cuda.memory_stats()).
EXACT_STATS = ("allocation.all.allocated", "allocated_bytes.all.peak", "reserved_bytes.all.peak",
               "active_bytes.all.peak", "requested_bytes.all.peak")


def flat(d, prefix=""):
    out = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(flat(v, prefix + k + "."))
        else:
            out[prefix + k] = v
    return out


def check_snapshot(build, trace_dir, model, tag):
    """The newest snapshot of a variant, read by `vramtrace summary --json`, against its sidecar's
    memory_stats of device 0 (written by PyTorch at exit): EXACT_STATS, each equal or not. None
    when there is no snapshot."""
    import subprocess
    names = sorted((f for f in os.listdir(trace_dir) if f.startswith(f"{model}-{tag}-") and f.endswith(".torch.pickle")),
                   key=lambda f: os.path.getmtime(os.path.join(trace_dir, f)))
    if not names:
        return None
    path = os.path.join(trace_dir, names[-1])
    with open(path + ".json") as f:
        side = json.load(f)
    native = side["devices"][0]["memory_stats"] if side.get("devices") else {}
    p = subprocess.run([os.path.join(build, "bin", "vramtrace"), "summary", "--json", path], capture_output=True,
                       text=True, timeout=120)
    ours = {}
    if p.returncode == 0:
        ours = flat(json.loads(p.stdout)["traces"][0]["devices"][0].get("stats", {}))
    out = {"reason": side.get("reason"), "snapshot_bytes": os.path.getsize(path), "summary_rc": p.returncode,
           "summary_err": p.stderr[-300:] if p.returncode else ""}
    for k in EXACT_STATS:
        out[k] = [ours.get(k), native.get(k)]
    out["equal"] = p.returncode == 0 and all(ours.get(k) == native.get(k) and native.get(k) is not None
                                             for k in EXACT_STATS)
    return out


def variants(model, trace_dir):
    v = [("native", False, {}),
         ("torch_level", False, torch_level_env(trace_dir, model, "tl")),
         ("torch_level_all", False, dict(torch_level_env(trace_dir, model, "tla"), VRAMTRACE_TORCH_CONTEXT="all")),
         ("run", True, dict(torch_level_env(trace_dir, model, "run"),
                            VRAMTRACE_OUTPUT=os.path.join(trace_dir, f"{model}-run-%p.jsonl"))),
         ("front", True, {}),
         ("tensor", True, dict(NOCACHE)),
         ("tensor_ordered", True, dict(NOCACHE, VRAMTRACE_CONF="reuse:stream_ordered")),
         ("tensor_barrier", True, dict(NOCACHE, VRAMTRACE_CONF="reuse:lazy_barrier")),
         ("tensor_traced", True, dict(NOCACHE, VRAMTRACE_OUTPUT=os.path.join(trace_dir, f"{model}-%p.jsonl"))),
         ("tensor_ordered_traced", True, dict(NOCACHE, VRAMTRACE_CONF="reuse:stream_ordered",
                                              VRAMTRACE_OUTPUT=os.path.join(trace_dir, f"{model}-ordered-%p.jsonl")))]
    stacks = os.path.join(trace_dir, "stacks")  # traces of the stack variants, one at a time
    v += [("front_stacks", True, dict(VRAMTRACE_OUTPUT=os.path.join(stacks, f"{model}-front-%p.jsonl"))),
          ("front_nostacks", True, dict(VRAMTRACE_STACKS="none",
                                        VRAMTRACE_OUTPUT=os.path.join(stacks, f"{model}-nostacks-%p.jsonl"))),
          ("tensor_ordered_nostacks", True, dict(NOCACHE, VRAMTRACE_CONF="reuse:stream_ordered", VRAMTRACE_STACKS="none",
                                                 VRAMTRACE_OUTPUT=os.path.join(stacks, f"{model}-ordered-nostacks-%p.jsonl")))]
    if model.startswith("gpt2"):
        v.append(("tensor_device", True, dict(NOCACHE, VRAMTRACE_CONF="reuse:device_sync")))
    return v


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--budget", type=float, default=540.0)
    ap.add_argument("--build")
    ap.add_argument("--models", default="gpt2,llama,bert")
    ap.add_argument("--variants", help="comma-separated subset of the variants (default: all)")
    ap.add_argument("--gpt2-steps", type=int, default=12, help="timed GPT-2 steps per run")
    ap.add_argument("--steps", action="append", default=[], metavar="MODEL=N",
                    help="timed steps per run of one model (repeatable), e.g. bert=40")
    args = ap.parse_args()
    wanted = set(args.variants.split(",")) if args.variants else None
    build = gc.find_build(args.build)
    out = os.environ.get("OUT") or os.path.join(gc.ROOT, "gpu-bench-out")
    R = gc.Runner(os.path.join(build, "shim", "libvramtrace.so"), out, args.budget)
    trace_dir = os.path.join(out, "traces")
    os.makedirs(trace_dir, exist_ok=True)
    script = os.path.join(gc.GPU_DIR, "torch_train.py")
    plans = {"gpt2": ["--steps", str(args.gpt2_steps), "--warmup", "3"], "llama": ["--steps", "6", "--warmup", "2"],
             "bert": ["--steps", "12", "--warmup", "3"], "bert-fixed": ["--steps", "12", "--warmup", "3"]}
    for item in args.steps:
        m, _, n = item.partition("=")
        if m not in plans or not n.isdigit():
            raise SystemExit(f"--steps {item}: expected MODEL=N with MODEL one of {', '.join(plans)}")
        plans[m] = ["--steps", n] + plans[m][2:]
    # The same models with DDP-like gradient work on a side stream during backward (torch_train.py).
    for m in list(plans):
        plans[m + "_side"] = plans[m] + ["--side-stream"]
    runs = {}  # (model, variant) -> list of run dicts
    for rnd in range(args.rounds):
        for model in args.models.split(","):
            vs = [v for v in variants(model, trace_dir) if wanted is None or v[0] in wanted]
            k = rnd % len(vs)
            for name, shim, env in vs[k:] + vs[:k]:
                if name == "tensor_device" and rnd > 0:
                    continue  # slow and not a target: one run is enough
                stack_dir = os.path.join(trace_dir, "stacks")
                os.makedirs(stack_dir, exist_ok=True)
                for f in os.listdir(stack_dir):  # the stack variants' earlier traces: keep the disk small
                    os.remove(os.path.join(stack_dir, f))
                if name.endswith("_traced"):  # this variant's earlier trace: keep the disk small
                    for f in os.listdir(trace_dir):
                        if f.startswith(model) and ("-ordered-" in f) == (name == "tensor_ordered_traced") \
                                and ".torch." not in f and "-run-" not in f:
                            os.remove(os.path.join(trace_dir, f))
                r = R.run(f"{model}_{name}_r{rnd}",
                          [sys.executable, script, "--model", model.removesuffix("_side")] + plans[model],
                          shim, env, timeout=240)
                r["round"] = rnd
                res = r["result"] or {}
                print(f"  round {rnd} {model} {name}: rc={r['rc']} step={res.get('step_ms_median')} "
                      f"lazy_syncs={r['stats'].get('shim.lazy_syncs')} "
                      f"gpu_barriers={r['stats'].get('shim.gpu_barriers')} "
                      f"other_streams={r['stats'].get('shim.other_streams_seen')} "
                      f"fast={r['stats'].get('shim.runtime_fast_allocs')}" + gc.why(r), flush=True)
                if name in ("run", "torch_level", "torch_level_all"):
                    tag = {"run": "run", "torch_level": "tl", "torch_level_all": "tla"}[name]
                    r["snapshot"] = check_snapshot(build, trace_dir, model, tag)
                    print(f"    snapshot: {r['snapshot']}", flush=True)
                runs.setdefault((model, name), []).append(r)

    rows = []
    for model in args.models.split(","):
        def fig(name):
            ms = [(r["result"] or {}).get("step_ms_median") for r in runs.get((model, name), [])]
            ms = [m for m in ms if m]
            return (statistics.median(ms), ms) if ms else (None, ms)

        base, base_all = fig("native")

        def paired(name):
            """The run's total step time over the native run's of the same round (same steps, same
            shapes, so variable lengths cancel), per round, and their median."""
            nat_by_round = {r["round"]: (r["result"] or {}).get("step_ms") for r in runs.get((model, "native"), [])}
            out = []
            for r in runs.get((model, name), []):
                mine = (r["result"] or {}).get("step_ms")
                theirs = nat_by_round.get(r["round"])
                if mine and theirs and len(mine) == len(theirs):
                    out.append(sum(mine) / sum(theirs))
            return (statistics.median(out), out) if out else (None, out)
        nat = [r for r in runs.get((model, "native"), []) if r["result"]]
        native_peak = nat[0]["result"].get("peak_reserved") if nat else None
        front_peak = None
        for r in runs.get((model, "front"), []):
            front_peak = r["stats"].get("allocator.reserved_bytes.all.peak") or front_peak
        untraced, _ = fig("tensor")
        untraced_ordered, _ = fig("tensor_ordered")
        for name, _, _ in variants(model, trace_dir):
            if wanted is not None and name not in wanted:
                continue
            m, allm = fig(name)
            rs = runs.get((model, name), [])
            st = rs[-1]["stats"] if rs else {}
            losses = {json.dumps((r["result"] or {}).get("losses")) for r in rs + nat if r["result"]}
            # Only a model whose native rounds agree with each other can be compared bit for bit.
            native_losses = {json.dumps(r["result"].get("losses")) for r in nat}
            target = {"front": 1.01, "tensor": 1.03, "run": 1.02, "front_stacks": 1.01}.get(name)
            ratio = m / base if m and base else None
            pr, pr_all = paired(name)
            row = {"model": model, "variant": name, "step_ms": round(m, 2) if m else None,
                   "runs_ms": [round(x, 2) for x in allm], "ratio": round(ratio, 4) if ratio else None,
                   "paired_ratio": round(pr, 4) if pr else None, "round_ratios": [round(x, 3) for x in pr_all],
                   "target": target, "ok": all(gc.ok(r) for r in rs),
                   "losses_identical_to_native": len(losses) == 1 if len(native_losses) == 1 else None,
                   "peak_reserved": native_peak if name == "native" else st.get("allocator.reserved_bytes.all.peak"),
                   "lazy_syncs": st.get("shim.lazy_syncs"), "gpu_barriers": st.get("shim.gpu_barriers"),
                   "other_streams_seen": st.get("shim.other_streams_seen"),
                   "runtime_fast_allocs": st.get("shim.runtime_fast_allocs"), "calls_cudaMalloc": st.get("calls.cudaMalloc")}
            # The stacks' own cost: the run with them over the same run without.
            nostacks = {"front_stacks": "front_nostacks", "tensor_ordered_traced": "tensor_ordered_nostacks"}.get(name)
            if nostacks and m and fig(nostacks)[0]:
                row["ratio_vs_nostacks"] = round(m / fig(nostacks)[0], 4)
            ref = {"tensor_traced": untraced, "tensor_ordered_traced": untraced_ordered}.get(name)
            if ref and m:
                row["ratio_vs_untraced"] = round(m / ref, 4)
                row["trace_bytes"] = sum(os.path.getsize(os.path.join(trace_dir, f)) for f in os.listdir(trace_dir)
                                         if f.startswith(model) and ("-ordered-" in f) == (name == "tensor_ordered_traced"))
            if name.startswith("tensor"):
                row["front_shim_peak_reserved"] = front_peak
            snaps = [r.get("snapshot") for r in rs if r.get("snapshot")]
            if snaps:
                row["snapshot_matches_stats"] = all(sn["equal"] for sn in snaps)
                row["snapshot"] = snaps[-1]
            rows.append(row)

    head = (f"GPU benchmark, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {args.rounds} rounds, "
            f"{round(time.time() - gc.T0)} s; command: tests/gpu/gpu_bench.py {' '.join(sys.argv[1:])}")
    keys = ["model", "variant", "step_ms", "ratio", "paired_ratio", "round_ratios", "target", "runs_ms", "peak_reserved", "front_shim_peak_reserved",
            "ratio_vs_untraced", "ratio_vs_nostacks", "trace_bytes", "lazy_syncs", "gpu_barriers", "other_streams_seen", "runtime_fast_allocs",
            "calls_cudaMalloc", "losses_identical_to_native", "snapshot_matches_stats", "ok"]
    lines = ["| " + " | ".join(keys) + " |", "|" + "---|" * len(keys)]
    for r in rows:
        lines.append("| " + " | ".join("" if r.get(k) is None else str(r.get(k)) for k in keys) + " |")
    text = head + "\n\n" + "\n".join(lines) + "\n"
    print("\n" + text)
    with open(os.path.join(out, "gpu-bench.md"), "w") as f:
        f.write(text)
    # Every run's step times too, for a look at a round that stands out.
    steps = {f"{m}/{n}/r{r['round']}": (r["result"] or {}).get("step_ms") for (m, n), rs in runs.items() for r in rs}
    with open(os.path.join(out, "gpu-bench.json"), "w") as f:
        json.dump({"rows": rows, "step_ms": steps}, f, indent=1)


if __name__ == "__main__":
    main()
