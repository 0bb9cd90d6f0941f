#!/usr/bin/env python3
"""Runs the portable vramtrace command inside an older root file system and the normal build on
this machine, on every bundled trace, and fails on any difference in exit status, standard
output, standard error or written file.

The two builds differ only in how they are linked (cmake/portable) and in two optional
libraries left out of the portable one (ISA-L, which only changes gzip's speed, and libdw, which
adds source lines to native frames of binaries present on this machine; the bundled traces'
binaries are not). Any other difference is a bug of the portable build.

Usage: compare_command.py --root ROOT --checkout DIR --normal BIN --portable BIN
The checkout is bind-mounted at its own path inside ROOT (needs root: unshare, mount, chroot;
VRAMTRACE_SUDO names a prefix such as sudo). Exit status 0 when every command matched.
"""
import argparse
import glob
import os
import shlex
import shutil
import subprocess
import sys

TRACE_SUFFIXES = (".jsonl", ".jsonl.gz", ".pickle", ".pickle.gz", ".pickle.zst")


def commands(checkout):
    """The commands to compare: (name, argv after the binary, output file or None)."""
    data = os.path.join(checkout, "tests", "data")
    traces = sorted(p for p in glob.glob(os.path.join(data, "**", "*"), recursive=True)
                    if p.endswith(TRACE_SUFFIXES) and os.path.isfile(p))
    rel = [os.path.relpath(p, checkout) for p in traces]
    cmds = [("help", ["--help"], None), ("version", ["--version"], None)]
    for t in rel:
        cmds.append((f"summary {t}", ["summary", t], None))
        cmds.append((f"summary --json {t}", ["summary", "--json", t], None))
        cmds.append((f"oom {t}", ["oom", t], None))
    gz = [t for t in rel if t.endswith(".jsonl.gz")]
    for t in gz:
        cmds.append((f"replay {t}", ["replay", t, "--conf", "", "--conf", "expandable_segments:True"], None))
        cmds.append((f"check {t}", ["check", t, "--max-peak-reserved", "10GiB"], None))
        cmds.append((f"report {t}", ["report", t, "-o", "OUT.html"], "OUT.html"))
    for t in [t for t in rel if t.endswith((".jsonl.gz", ".pickle", ".pickle.gz"))][:6]:
        cmds.append((f"export memory-viz {t}", ["export", t, "--format", "memory-viz", "-o", "OUT.html"], "OUT.html"))
        cmds.append((f"export perfetto {t}", ["export", t, "--format", "perfetto", "-o", "OUT.html"], "OUT.html"))
    if len(gz) >= 2:
        cmds.append(("diff", ["diff", gz[0], gz[1]], None))
    cmds.append(("explain", ["explain", "CUDA out of memory. Tried to allocate 26.16 GiB. GPU 0 has a total "
                             "capacity of 79.15 GiB of which 1.32 GiB is free. Of the allocated memory 9.41 GiB "
                             "is allocated by PyTorch, and 12.25 GiB is reserved by PyTorch but unallocated."], None))
    cmds.append(("missing file", ["summary", "tests/data/no-such-trace.jsonl"], None))
    cmds.append(("not a trace", ["summary", "tests/data/oom/make_oom_fixtures.py"], None))
    return cmds


def script(binary, cmds, outdir):
    lines = ["set -u"]
    for i, (_, argv, outfile) in enumerate(cmds):
        args = [a.replace("OUT.html", os.path.join(outdir, f"{i}.file")) for a in argv]
        lines.append(f"{shlex.quote(binary)} {' '.join(shlex.quote(a) for a in args)} "
                     f">{outdir}/{i}.stdout 2>{outdir}/{i}.stderr; echo $? >{outdir}/{i}.rc")
    return "\n".join(lines) + "\n"


def read(path):
    try:
        with open(path, "rb") as f:
            return f.read()
    except FileNotFoundError:
        return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--root", required=True)
    ap.add_argument("--checkout", required=True)
    ap.add_argument("--normal", required=True)
    ap.add_argument("--portable", required=True)
    args = ap.parse_args()
    checkout = os.path.abspath(args.checkout)
    work = os.path.join(checkout, "build-portable", "compare")
    shutil.rmtree(work, ignore_errors=True)
    sides = {"normal": os.path.join(work, "normal"), "portable": os.path.join(work, "portable")}
    for d in sides.values():
        os.makedirs(d)
    cmds = commands(checkout)

    with open(os.path.join(work, "normal.sh"), "w") as f:
        f.write(script(os.path.abspath(args.normal), cmds, sides["normal"]))
    with open(os.path.join(work, "portable.sh"), "w") as f:
        f.write(script(os.path.abspath(args.portable), cmds, sides["portable"]))
    subprocess.run(["sh", os.path.join(work, "normal.sh")], cwd=checkout, check=True)
    root = os.path.abspath(args.root)
    sudo = shlex.split(os.environ.get("VRAMTRACE_SUDO", ""))
    mounts = (f"mount --bind /proc {shlex.quote(root + '/proc')} && "
              f"mkdir -p {shlex.quote(root + checkout)} && "
              f"mount --bind {shlex.quote(checkout)} {shlex.quote(root + checkout)} && "
              f"chroot {shlex.quote(root)} /bin/sh -c "
              + shlex.quote(f"cd {shlex.quote(checkout)} && sh {shlex.quote(os.path.join(work, 'portable.sh'))}"))
    subprocess.run(sudo + ["unshare", "-m", "sh", "-c", mounts], check=True)

    # The two sides differ, by design, in the binary's own path (usage lines name argv[0]) and in
    # the directory each writes into; both are replaced by one name before comparing.
    binaries = {"normal": os.path.abspath(args.normal), "portable": os.path.abspath(args.portable)}

    def normalised(side, data):
        if data is None:
            return None
        return data.replace(binaries[side].encode(), b"<vramtrace>").replace(sides[side].encode(), b"<out>")

    diffs = 0
    for i, (name, _, outfile) in enumerate(cmds):
        for part in ("rc", "stdout", "stderr") + (("file",) if outfile else ()):
            a = normalised("normal", read(os.path.join(sides["normal"], f"{i}.{part}")))
            b = normalised("portable", read(os.path.join(sides["portable"], f"{i}.{part}")))
            if a is None or a != b:
                diffs += 1
                print(f"DIFFERENT: {name}: {part} (compare {sides['normal']}/{i}.{part} "
                      f"with {sides['portable']}/{i}.{part})")
    print(f"{len(cmds)} commands compared, {diffs} differences")
    return 1 if diffs else 0


if __name__ == "__main__":
    sys.exit(main())
