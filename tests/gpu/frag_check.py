#!/usr/bin/env python3
"""GPU check: an OOM caused by fragmentation inside PyTorch's caching allocator is diagnosed as
such from a default `vramtrace run`, and the setting vramtrace ranks first really fits.

1. tests/gpu/bert_varlen.py without vramtrace and without a cap: its peak allocated A and peak
   reserved R (PyTorch's max_memory_allocated / max_memory_reserved).
2. The cap: the largest of --cap-ratios x A (default 1.15, 1.10, 1.06) under which the workload
   with default settings runs out of memory under `vramtrace run --limit CAP` (PyTorch survives a
   failed cudaMalloc by freeing its cache and retrying, so a cap below R alone is not enough);
   none: exit 77. Then `vramtrace oom` of the tensor-level snapshot and of the device-level trace.
4. The same run with PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (and any setting the
   report names), to see which settings really fit under the cap.

Usage: frag_check.py --build DIR [--out DIR] [--cap-ratios 1.15,1.10,1.06]
Prints every command's output; writes $OUT/frag-check.json.
"""
import argparse
import glob
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def run(argv, env=None, timeout=300):
    e = dict(os.environ)
    e.update(env or {})
    t0 = time.time()
    p = subprocess.run(argv, env=e, capture_output=True, text=True, timeout=timeout)
    result = None
    for line in p.stdout.splitlines():
        if line.startswith("RESULT "):
            result = json.loads(line[7:])
    return {"argv": argv, "rc": p.returncode, "seconds": round(time.time() - t0, 1), "result": result,
            "stdout_tail": p.stdout[-1500:], "stderr_tail": p.stderr[-3000:]}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", required=True)
    ap.add_argument("--out", default=os.environ.get("OUT", "frag-check-out"))
    ap.add_argument("--cap-ratios", default="1.15,1.10,1.06")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    vt = os.path.join(args.build, "bin", "vramtrace")
    work = [sys.executable, os.path.join(HERE, "bert_varlen.py")]
    report = {}

    native = run(work)
    report["native"] = native
    print("native:", native["rc"], native["result"], flush=True)
    if not native["result"] or not native["result"].get("ok"):
        print(native["stderr_tail"])
        sys.exit(1)
    a, r = native["result"]["peak_allocated"], native["result"]["peak_reserved"]
    print(f"peak allocated {a / 2**30:.2f} GiB, peak reserved {r / 2**30:.2f} GiB (ratio {r / a:.3f})", flush=True)
    def traced(tag, conf=None):
        out = os.path.join(args.out, f"{tag}-{cap_mib}")
        os.makedirs(out, exist_ok=True)
        env = {"PYTORCH_CUDA_ALLOC_CONF": conf} if conf else {}
        res = run([vt, "run", "--limit", f"{cap_mib}MiB", "-o", os.path.join(out, "t.%p.jsonl"), "--"] + work, env)
        res["traces"] = sorted(glob.glob(os.path.join(out, "t.*.jsonl")))
        res["snapshots"] = sorted(glob.glob(os.path.join(out, "t.*.torch.pickle")))
        print(f"\n== {tag} ({conf or 'default settings'}) under {cap_mib} MiB: rc {res['rc']} "
              f"{res['result']}", flush=True)
        print(res["stderr_tail"][-1500:], flush=True)
        return res

    cap_mib = 0
    default = None
    for ratio in (float(x) for x in args.cap_ratios.split(",")):
        cap_mib = int(a * ratio / 2**20)
        if cap_mib * 2**20 >= r:
            continue
        default = traced("default")
        report[f"default-{cap_mib}"] = default
        if default["rc"] == 3:
            break
    if default is None or default["rc"] != 3:
        print("no cap of --cap-ratios makes the default run fail")
        sys.exit(77)
    report["cap_mib"] = cap_mib
    for kind, files in (("tensor level", default["snapshots"]), ("device level", default["traces"])):
        for f in files[:1]:
            p = subprocess.run([vt, "oom", f], capture_output=True, text=True, timeout=300)
            print(f"\n== vramtrace oom ({kind}) {f}: rc {p.returncode}\n{p.stdout[-6000:]}\n{p.stderr[-1000:]}",
                  flush=True)
            report[f"oom_{kind.split()[0]}"] = {"rc": p.returncode, "stdout": p.stdout[-6000:]}
            pj = subprocess.run([vt, "oom", "--json", f], capture_output=True, text=True, timeout=300)
            try:
                report[f"oom_{kind.split()[0]}_json"] = json.loads(pj.stdout)
            except ValueError:
                pass
    for conf in ("expandable_segments:True", "max_split_size_mb:128", "garbage_collection_threshold:0.8"):
        report[conf] = traced(conf.split(":")[0], conf)
    with open(os.path.join(args.out, "frag-check.json"), "w") as f:
        json.dump(report, f, indent=1)
    print("\nSUMMARY: default rc", default["rc"], "| " + " | ".join(
        f"{c}: rc {report[c]['rc']}" for c in ("expandable_segments:True", "max_split_size_mb:128",
                                                "garbage_collection_threshold:0.8")))


if __name__ == "__main__":
    main()
