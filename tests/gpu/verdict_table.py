#!/usr/bin/env python3
"""Compares the verdicts of `vramtrace oom` and `vramtrace replay` with the real program's outcome
under the same cap (`vramtrace tune`), from the output of tests/gpu/verdict_check.sh.

A firm verdict must hold: "fits" only where the real run fitted, "does_not_fit" only where it ran
out of memory. "marginal" and a withheld verdict (null) promise nothing and are listed, not judged.

With --vramtrace BIN, `oom --json` and `replay --json` are run again here on the recorded traces
(the verdicts are a pure function of the trace, so a newer binary can be checked on the recordings
of an earlier GPU session); otherwise the JSON files the GPU run wrote are read.

Usage: verdict_table.py OUT [--vramtrace BIN] [--markdown FILE]
Exit 0 when every firm verdict agrees with the real run, 1 otherwise.
"""
import argparse
import glob
import json
import os
import subprocess
import sys


def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def real_outcomes(tune):
    out = {}
    for r in (tune or {}).get("runs", []):
        out[r.get("settings", "")] = r.get("result")
    return out


def recompute(vt, d, level, settings):
    """oom and replay of one recording with binary `vt`; returns (oom_json, replay_json)."""
    folder = os.path.join(d, level)
    oom = subprocess.run([vt, "oom", "--json", folder], capture_output=True, text=True)
    files = sorted(glob.glob(os.path.join(folder, "*.torch.pickle"))) or sorted(
        glob.glob(os.path.join(folder, "*.jsonl.zst")))
    rep = None
    if files:
        argv = [vt, "replay", "--json", files[0]]
        for s in [""] + settings:
            argv += ["--conf", s]
        p = subprocess.run(argv, capture_output=True, text=True)
        rep = json.loads(p.stdout) if p.returncode == 0 and p.stdout.strip() else None
    return (json.loads(oom.stdout) if oom.returncode == 0 and oom.stdout.strip() else None), rep


def verdict_rows(oom, rep):
    """(command, settings, verdict, figure) for every replayed setting of both commands."""
    rows = []
    traces = (oom or {}).get("traces") or ([oom] if oom else [])
    for t in traces:
        for r in t.get("replays", []):
            fig = r.get("margin_bytes") if r.get("margin_bytes") is not None else r.get("shortfall_bytes")
            rows.append(("oom", r.get("settings", ""), r.get("verdict"), fig, r.get("withheld")))
    for r in (rep or {}).get("results", []):
        fig = r.get("margin_bytes") if r.get("margin_bytes") is not None else r.get("shortfall_bytes")
        rows.append(("replay", r.get("settings", ""), r.get("verdict"), fig, r.get("withheld")))
    return rows


def mib(b):
    return "-" if b is None else f"{b / 2**20:.0f} MiB"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--vramtrace")
    ap.add_argument("--markdown")
    args = ap.parse_args()
    lines = ["| workload | level | command | setting | verdict | spare / short | real run | agrees |",
             "|---|---|---|---|---|---|---|---|"]
    bad = firm = 0
    for d in sorted(glob.glob(os.path.join(args.out, "*"))):
        tune = load(os.path.join(d, "tune.json"))
        if not tune:
            continue
        real = real_outcomes(tune)
        settings = [s for s in real if s]
        name = os.path.basename(d)
        for level in ("tensor", "segment"):
            if args.vramtrace:
                oom, rep = recompute(args.vramtrace, d, level, settings)
            else:
                oom = load(os.path.join(d, f"oom.{level}.json"))
                rep = load(os.path.join(d, f"replay.{level}.json"))
            for cmd, s, verdict, fig, withheld in verdict_rows(oom, rep):
                outcome = real.get(s)
                if outcome is None and s == "" and cmd == "replay":
                    outcome = real.get("")
                agrees = "-"
                if verdict in ("fits", "does_not_fit") and outcome in ("fits", "OOM"):
                    firm += 1
                    ok = (verdict == "fits") == (outcome == "fits")
                    agrees = "yes" if ok else "**NO**"
                    bad += not ok
                shown = verdict if verdict else f"withheld ({(withheld or '')[:60]})"
                lines.append(f"| {name} | {level} | {cmd} | {s or '(own)'} | {shown} | {mib(fig)} | "
                             f"{outcome or '-'} | {agrees} |")
    lines.append("")
    lines.append(f"{firm} firm verdicts, {bad} disagree with the real run")
    text = "\n".join(lines)
    print(text)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(text + "\n")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
