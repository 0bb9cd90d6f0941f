#!/usr/bin/env python3
"""GPU check of the memory ledger (docs/reports.md, "The memory ledger"): both levels of a default
`vramtrace run` of PyTorch read together.

  context   the CUDA context's size, measured natively: torch.cuda.mem_get_info() used memory
            right after the first CUDA call, before any tensor (the GPU should be otherwise idle)
  train     GPT-2 124M training (tests/gpu/torch_train.py's model: GPT2Config(), bf16 autocast,
            batch 8 x 1024, AdamW) under `vramtrace run`: the ledger's rows at the end add up to
            its used memory, which equals what torch.cuda.mem_get_info() said at the end of the
            program (within 16 MiB: the exit write reads it a moment later), the device level is
            there, and the context row is within the context's size measured above
  outside   a 256 MiB cuMemAlloc_v2 through ctypes (a library that bypasses PyTorch's allocator)
            next to a PyTorch tensor: the outside row equals the 256 MiB exactly, the rows add up
  oom       1 GiB through ctypes, then a PyTorch request larger than the device's free memory: the
            ledger at the OOM adds up to total - free at the OOM and its outside row holds the 1 GiB

Prints the ledger rows next to PyTorch's used memory, then a PASS/FAIL table; exit 0 when every
row passes, 1 otherwise, 77 when torch, CUDA or transformers is missing. About a minute on an H200.

Usage: python3 tests/gpu/ledger_check.py BUILD OUTDIR [--steps 4]
  BUILD: a carry or build directory (bin/vramtrace, with share/vramtrace/python beside it)
"""
import argparse
import ctypes
import glob
import json
import os
import subprocess
import sys
import time

MiB = 1 << 20
HERE = os.path.abspath(__file__)
CONTEXT_SLACK = 32 * MiB  # the context row may hold module images loaded before the first allocation


# --- the child programs (run as `ledger_check.py --child NAME`) -----------------------------------


def used_now(torch):
    free, total = torch.cuda.mem_get_info()
    return total - free


def child_context():
    import torch

    torch.cuda.init()
    torch.cuda.set_device(0)
    print("RESULT " + json.dumps({"used": used_now(torch)}), flush=True)


def child_train(steps):
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    cfg = GPT2Config()
    model = GPT2LMHeadModel(cfg).cuda().train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=False, foreach=True)
    gen = torch.Generator(device="cuda").manual_seed(1)
    for _ in range(steps):
        ids = torch.randint(0, cfg.vocab_size, (8, 1024), device="cuda", generator=gen)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            out = model(input_ids=ids, labels=ids)
        out.loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        out.loss.item()
    torch.cuda.synchronize()
    print("RESULT " + json.dumps({"used": used_now(torch),
                                  "reserved": torch.cuda.memory_reserved()}), flush=True)


def cu_mem_alloc(size):
    """cuMemAlloc_v2 in the current context (PyTorch's primary context), as a library would."""
    cuda = ctypes.CDLL("libcuda.so.1")
    ptr = ctypes.c_uint64(0)
    rc = cuda.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(size))
    if rc != 0:
        raise SystemExit("cuMemAlloc_v2 failed: %d" % rc)
    return ptr.value


def child_outside():
    import torch

    x = torch.ones(1 << 20, device="cuda")  # PyTorch's context current, one segment
    ptr = cu_mem_alloc(256 * MiB)  # kept until exit
    torch.cuda.synchronize()
    print("RESULT " + json.dumps({"used": used_now(torch), "ptr": ptr, "x": float(x.sum())}), flush=True)


def child_oom():
    import torch

    x = torch.ones(1 << 20, device="cuda")
    cu_mem_alloc(1 << 30)
    free, _ = torch.cuda.mem_get_info()
    try:
        torch.empty(free + (4 << 30), dtype=torch.uint8, device="cuda")
        oom = False
    except torch.OutOfMemoryError:
        oom = True
    print("RESULT " + json.dumps({"oom": oom, "used": used_now(torch), "x": float(x.sum())}), flush=True)


# --- the checks ----------------------------------------------------------------------------------


def result_of(out):
    for line in out.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[7:])
    return None


def run_child(cmd, timeout=600):
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    return p.returncode, p.stdout, p.stderr


def traced(vt, out_dir, name, extra=()):
    """Runs the child NAME under the default `vramtrace run`; returns (rc, result, trace path, stderr)."""
    pattern = os.path.join(out_dir, name + ".%p.jsonl")
    rc, out, err = run_child([vt, "run", "-o", pattern, "--", sys.executable, HERE, "--child", name, *extra])
    with open(os.path.join(out_dir, name + ".run.err"), "w") as f:
        f.write(err)
    traces = sorted(glob.glob(os.path.join(out_dir, name + ".*.jsonl")))
    return rc, result_of(out), (traces[0] if traces else None), err


def ledger_of(vt, trace, out_dir, name):
    p = subprocess.run([vt, "summary", "--json", trace], capture_output=True, text=True, timeout=300)
    with open(os.path.join(out_dir, name + ".summary.json"), "w") as f:
        f.write(p.stdout)
    with open(os.path.join(out_dir, name + ".summary.err"), "w") as f:
        f.write(p.stderr)
    if p.returncode != 0:
        return None, p.stderr
    doc = json.loads(p.stdout)
    return doc["traces"][0].get("ledger"), p.stderr


def moment(ledger, device, kind):
    for d in ledger["devices"]:
        if d["device"] != device:
            continue
        for m in d["moments"]:
            if m["moment"] == kind:
                return m
    return None


def rows_sum(m):
    """allocated + cache + outside + rounding + rest, or None when a row is unknown."""
    parts = [m["allocated_bytes"], m["cache_bytes"], m["outside_bytes"], m["rounding_bytes"], m["rest_bytes"]]
    return None if any(p is None for p in parts) else sum(parts)


def show(name, m, pytorch_used=None):
    fmt = lambda v: "unknown" if v is None else "%.2f MiB" % (v / MiB)
    print("[%s] %s: allocated %s, cache %s, reserved %s, outside %s %s, rounding %s, rest %s (context %s), used %s%s" % (
        name, m["moment"], fmt(m["allocated_bytes"]), fmt(m["cache_bytes"]), fmt(m["reserved_bytes"]),
        fmt(m["outside_bytes"]), json.dumps(m["outside_by_kind"]), fmt(m["rounding_bytes"]), fmt(m["rest_bytes"]),
        fmt(m["context_bytes"]), fmt(m["used_bytes"]),
        "" if pytorch_used is None else "; torch.cuda.mem_get_info() used %s" % fmt(pytorch_used)))
    for n in m.get("notes", []):
        print("    note: " + n)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build", nargs="?")
    ap.add_argument("out", nargs="?")
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--child")
    args = ap.parse_args()
    if args.child:
        {"context": child_context, "train": lambda: child_train(args.steps), "outside": child_outside,
         "oom": child_oom}[args.child]()
        return 0
    try:
        import torch
        import transformers  # noqa: F401
    except ImportError as e:
        print("SKIP: %s" % e)
        return 77
    if not torch.cuda.is_available():
        print("SKIP: no CUDA device")
        return 77
    if not args.build or not args.out:
        ap.error("BUILD and OUTDIR are required")
    vt = os.path.join(args.build, "bin", "vramtrace")
    os.makedirs(args.out, exist_ok=True)
    rows = []

    def check(name, ok, detail):
        rows.append((name, ok, detail))
        print("%s  %s: %s" % ("PASS" if ok else "FAIL", name, detail), flush=True)

    # The context's size, natively (no vramtrace), on the GPU as it is now.
    rc, out, err = run_child([sys.executable, HERE, "--child", "context"])
    ctx = result_of(out)
    context_size = ctx["used"] if ctx else None
    check("context measured", rc == 0 and ctx is not None,
          "used right after the first CUDA call: %s" % ("%.2f MiB" % (context_size / MiB) if ctx else err[-300:]))

    # GPT-2 training.
    t0 = time.time()
    rc, res, trace, err = traced(vt, args.out, "train", ["--steps", str(args.steps)])
    check("train ran", rc == 0 and res is not None and trace is not None,
          "rc %d in %.0f s, trace %s" % (rc, time.time() - t0, trace))
    if trace:
        ledger, serr = ledger_of(vt, trace, args.out, "train")
        check("train: the reports read both levels", ledger is not None and ledger["device_trace"] is not None,
              (ledger or {}).get("levels", serr[-300:]))
        end = moment(ledger, 0, "end") if ledger else None
        if end:
            show("train", end, res["used"] if res else None)
            total = rows_sum(end)
            check("train: the rows add up to the used memory at exit",
                  total is not None and total == end["used_bytes"],
                  "sum %s, used %s" % (total, end["used_bytes"]))
            if res:
                diff = abs(end["used_bytes"] - res["used"]) if end["used_bytes"] is not None else None
                check("train: used = torch.cuda.mem_get_info() at the end", diff is not None and diff <= 16 * MiB,
                      "ledger %s, PyTorch %s" % (end["used_bytes"], res["used"]))
            c = end["context_bytes"]
            check("train: the context row is within the context's size",
                  c is not None and context_size is not None and 0 < c <= context_size + CONTEXT_SLACK
                  and end["rest_bytes"] is not None and c <= end["rest_bytes"] + CONTEXT_SLACK,
                  "context row %s, measured %s, rest %s" % (c, context_size, end["rest_bytes"]))
        else:
            check("train: a ledger at the end", False, "none")

    # A library's cuMemAlloc_v2 outside PyTorch's allocator.
    rc, res, trace, err = traced(vt, args.out, "outside")
    check("outside ran", rc == 0 and res is not None and trace is not None, "rc %d, trace %s" % (rc, trace))
    if trace:
        ledger, serr = ledger_of(vt, trace, args.out, "outside")
        end = moment(ledger, 0, "end") if ledger else None
        if end:
            show("outside", end, res["used"] if res else None)
            check("outside: the outside row is the 256 MiB allocated",
                  end["outside_bytes"] == 256 * MiB and (end["outside_by_kind"] or {}).get("device") == 256 * MiB,
                  "outside %s %s" % (end["outside_bytes"], json.dumps(end["outside_by_kind"])))
            total = rows_sum(end)
            check("outside: the rows add up", total is not None and total == end["used_bytes"],
                  "sum %s, used %s" % (total, end["used_bytes"]))
        else:
            check("outside: a ledger at the end", False, serr[-300:])

    # An OOM with 1 GiB outside PyTorch's allocator.
    rc, res, trace, err = traced(vt, args.out, "oom")
    check("oom ran", rc == 0 and res is not None and res.get("oom") is True and trace is not None,
          "rc %d, result %s" % (rc, res))
    if trace:
        ledger, serr = ledger_of(vt, trace, args.out, "oom")
        at = moment(ledger, 0, "oom") if ledger else None
        if at:
            show("oom", at)
            total = rows_sum(at)
            check("oom: the rows add up to total - free at the OOM", total is not None and total == at["used_bytes"],
                  "sum %s, used %s" % (total, at["used_bytes"]))
            check("oom: the outside row holds the 1 GiB", at["outside_bytes"] == 1 << 30,
                  "outside %s" % at["outside_bytes"])
        else:
            check("oom: a ledger at the OOM", False, serr[-300:])

    print("\n| check | result | detail |\n|---|---|---|")
    for name, ok, detail in rows:
        print("| %s | %s | %s |" % (name, "PASS" if ok else "FAIL", str(detail).replace("|", "/")))
    failed = sum(1 for _, ok, _ in rows if not ok)
    print("\n%d of %d pass" % (len(rows) - failed, len(rows)))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
