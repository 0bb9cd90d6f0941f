#!/usr/bin/env python3
"""Fails when an ELF binary needs a newer glibc than the baseline, or a shared library beyond glibc.

Reads the version needs (.gnu.version_r) and NEEDED entries with binutils' readelf, so that what
is checked is what the dynamic loader checks: a binary whose highest GLIBC_x.y is above the
baseline does not load on a system with that glibc.

Usage: scripts/check-glibc.py [--max 2.31] [--only-glibc] [--kind executable|library] BINARY...
  --max V        highest glibc symbol version allowed (default 2.31: Debian 11)
  --only-glibc   also fail on a NEEDED entry that is not part of glibc (the shim's rule)
  --kind K       also require a dynamically linked executable, or a shared library
Anything but an x86-64 ELF executable or shared object (an archive, a 32-bit file) is an error.
Exit status: 0 when every binary is within the baseline, 1 otherwise, 2 on bad usage or an
unreadable binary. Prints one line per binary either way.
"""
import argparse
import re
import subprocess
import sys

# The libraries glibc itself installs: a NEEDED entry on any of these is satisfied by glibc.
GLIBC_LIBS = {"libc.so.6", "libm.so.6", "libdl.so.2", "libpthread.so.0", "librt.so.1",
              "ld-linux-x86-64.so.2", "libresolv.so.2", "libutil.so.1"}


def version_key(v):
    return tuple(int(x) for x in v.split("."))


def inspect(path, kind):
    """Returns (needed libraries, {library: set of versions}) of an x86-64 ELF executable or shared
    object; raises RuntimeError for anything else (an archive, a 32-bit or other-machine file, a
    relocatable object) or when readelf cannot read it. kind: "executable" also requires a
    program interpreter, "library" a shared object, None either."""
    if path.startswith("-"):
        path = "./" + path  # never an option of readelf
    out = subprocess.run(["readelf", "-W", "-h", "-l", "-d", "-V", path], capture_output=True, text=True)
    if out.returncode != 0 or "Error:" in out.stderr:
        raise RuntimeError(out.stderr.strip() or f"readelf exited with {out.returncode}")
    header = dict(re.findall(r"^\s*(Class|Machine|Type):\s*(.+?)\s*$", out.stdout, re.M))
    if header.get("Class") != "ELF64" or "X86-64" not in header.get("Machine", ""):
        raise RuntimeError(f"not an x86-64 ELF file ({header.get('Class', '?')}, {header.get('Machine', '?')})")
    elf_type = header.get("Type", "")
    if not elf_type.startswith(("EXEC", "DYN")):
        raise RuntimeError(f"not an executable or shared object ({elf_type or 'no ELF type'})")
    has_interp = "Requesting program interpreter" in out.stdout
    if kind == "executable" and not has_interp:
        raise RuntimeError("not a dynamically linked executable (no program interpreter)")
    if kind == "library" and (not elf_type.startswith("DYN") or has_interp):
        raise RuntimeError("not a shared library")
    needed = re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", out.stdout)
    versions = {}
    section = out.stdout.split("Version needs section", 1)
    current = None
    if len(section) == 2:
        for line in section[1].splitlines():
            m = re.search(r"File: (\S+)", line)
            if m:
                current = m.group(1)
                versions.setdefault(current, set())
                continue
            m = re.search(r"Name: (\S+)", line)
            if m and current:
                versions[current].add(m.group(1))
    return needed, versions


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--max", default="2.31")
    ap.add_argument("--only-glibc", action="store_true")
    ap.add_argument("--kind", choices=["executable", "library"], help="also require this kind of ELF file")
    ap.add_argument("binaries", nargs="+")
    args = ap.parse_args()
    try:
        limit = version_key(args.max)
    except ValueError:
        print(f"check-glibc: --max {args.max!r} is not a version like 2.31", file=sys.stderr)
        return 2
    failed = False
    for path in args.binaries:
        try:
            needed, versions = inspect(path, args.kind)
        except (OSError, RuntimeError) as e:
            print(f"{path}: cannot read: {e}", file=sys.stderr)
            return 2
        glibc = sorted({v[len("GLIBC_"):] for vs in versions.values() for v in vs
                        if re.fullmatch(r"GLIBC_\d+(\.\d+)*", v)}, key=version_key)
        highest = ("GLIBC_" + glibc[-1]) if glibc else "no glibc symbol version"
        problems = []
        if glibc and version_key(glibc[-1]) > limit:
            over = [f"GLIBC_{v}" for v in glibc if version_key(v) > limit]
            problems.append(f"needs {', '.join(over)} (baseline GLIBC_{args.max})")
        others = sorted(v for vs in versions.values() for v in vs if not v.startswith("GLIBC_"))
        if others:
            problems.append(f"needs versions of other libraries: {', '.join(others)}")
        if args.only_glibc:
            extra = [n for n in needed if n not in GLIBC_LIBS]
            if extra:
                problems.append(f"NEEDED beyond glibc: {', '.join(extra)}")
        status = "FAIL" if problems else "ok"
        print(f"{status}: {path}: highest {highest}; NEEDED {', '.join(needed) or 'none'}"
              + (f"; {'; '.join(problems)}" if problems else ""))
        failed |= bool(problems)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
