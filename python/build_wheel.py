#!/usr/bin/env python3
"""Builds the binary wheel of vramtrace: the portable `vramtrace` command and libvramtrace.so
(scripts/portable.sh builds them against glibc 2.31), the Python start-up hook that `vramtrace
run` needs, the marks API and the pytest plugin, in one wheel that pip installs offline into any
Python 3.8+ on x86_64 Linux with glibc 2.31 or newer.

Layout inside site-packages (the command finds the library and the hook relative to itself, as
in `cmake --install`):
    vramtrace/__init__.py, vramtrace/__main__.py    `python -m vramtrace`, the console script
    vramtrace/bin/vramtrace                         the command
    vramtrace/lib/libvramtrace.so                   the shim
    vramtrace/share/vramtrace/python/vramtrace/     torch_level.py, _boot/sitecustomize.py
    vramtrace_mark.py, pytest_vramtrace.py

The tag is manylinux_2_31_x86_64 (PEP 600: glibc 2.31 or newer) with py3-none: the wheel holds
no Python extension, so it fits every CPython 3. Before writing, it checks both binaries with
scripts/check-glibc.py and refuses binaries above the baseline, so the tag is never a lie.

Usage: build_wheel.py --shim PATH --command PATH [--out DIR]   (prints the wheel's path)
"""
import argparse
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import build_backend  # noqa: E402 - the stdlib-only backend beside this file

BASELINE = "2.31"
TAG = "py3-none-manylinux_%s_x86_64" % BASELINE.replace(".", "_")
HOOK_FILES = ["vramtrace/torch_level.py", "vramtrace/_boot/sitecustomize.py"]


def _read(path):
    with open(path, "rb") as f:
        return f.read()


def _stripped(path):
    """The binary without its DWARF debug information (a tenth of its size), symbols kept so that
    a crash report still names functions. Unchanged when binutils' strip is missing."""
    import shutil
    import tempfile

    strip = shutil.which("strip")
    if strip is None:
        return _read(path)
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, os.path.basename(path))
        subprocess.run([strip, "--strip-debug", "-o", out, path], check=True)
        return _read(out)


def main():
    ap = argparse.ArgumentParser(description="Builds vramtrace's binary wheel")
    ap.add_argument("--shim", required=True, help="libvramtrace.so of the portable build")
    ap.add_argument("--command", required=True, help="vramtrace of the portable build")
    ap.add_argument("--out", default="dist", help="directory for the wheel (default dist)")
    args = ap.parse_args()
    check = os.path.join(HERE, "..", "scripts", "check-glibc.py")
    for kind, path in (("library", args.shim), ("executable", args.command)):
        rc = subprocess.run([sys.executable, check, "--max", BASELINE, "--only-glibc", "--kind", kind, path]).returncode
        if rc == 1:
            print("build_wheel: %s is above the manylinux_%s baseline: build it with scripts/portable.sh"
                  % (path, BASELINE), file=sys.stderr)
        if rc != 0:
            return 1
    _, modules = build_backend._project()
    files = [(m + ".py", _read(os.path.join(HERE, m + ".py"))) for m in modules]
    files += [("vramtrace/" + n, _read(os.path.join(HERE, "vramtrace", n)))
              for n in ("__init__.py", "__main__.py")]
    files.append(("vramtrace/bin/vramtrace", _stripped(args.command), 0o755))
    files.append(("vramtrace/lib/libvramtrace.so", _stripped(args.shim), 0o755))
    files += [("vramtrace/share/vramtrace/python/" + f, _read(os.path.join(HERE, f))) for f in HOOK_FILES]
    os.makedirs(args.out, exist_ok=True)
    wheel = build_backend._write_wheel(args.out, files, tag=TAG,
                                       entry_points={"console_scripts": {"vramtrace": "vramtrace.__main__:main"}})
    print(os.path.join(args.out, wheel))
    return 0


if __name__ == "__main__":
    sys.exit(main())
