#!/usr/bin/env python3
"""Checks the include graph against the layer rule of docs/design.md ("Layers").

The rule is the fenced block that follows the line "<!-- layers -->" in docs/design.md: one line a
folder, "FOLDER: FOLDER FOLDER ...", naming the folders whose headers FOLDER's files may include
besides its own. Every quoted #include of every file under a listed folder is resolved the way the
build resolves it (the includer's folder, then the project's include roots); an include that
resolves to a file of another listed folder must be allowed by the rule. Includes that resolve to
no project file (system and third-party headers) are not checked.

Usage: scripts/check-layers.py [REPO]   (exit 0: clean; 1: violations, one per line; 2: bad rule)
"""
import os
import re
import sys

ROOTS = ["allocator/include", "trace/include", "shim/include", "shim/src", "reporter"]
EXTS = (".h", ".hpp", ".cpp", ".cc", ".c", ".def", ".inc", ".S")
INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"', re.M)


def read_rule(repo):
    text = open(os.path.join(repo, "docs", "design.md"), encoding="utf-8").read()
    m = re.search(r"<!-- layers -->\s*```[a-z]*\n(.*?)```", text, re.S)
    if not m:
        sys.exit("check-layers: docs/design.md has no '<!-- layers -->' block")
    rule = {}
    for line in m.group(1).splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        folder, _, uses = line.partition(":")
        rule[folder.strip()] = uses.split()
    for folder, uses in rule.items():
        for u in uses:
            if u not in rule:
                print(f"check-layers: {folder} may use {u}, which the rule does not list", file=sys.stderr)
                sys.exit(2)
    return rule


def folder_of(path, folders):
    best = None
    for f in folders:
        if path == f or path.startswith(f + "/"):
            if best is None or len(f) > len(best):
                best = f
    return best


def main():
    repo = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), ".."))
    rule = read_rule(repo)
    bad = []
    checked = 0
    for folder in rule:
        for dirpath, _, names in os.walk(os.path.join(repo, folder)):
            for name in sorted(names):
                if not name.endswith(EXTS):
                    continue
                path = os.path.join(dirpath, name)
                rel = os.path.relpath(path, repo)
                if folder_of(rel, rule) != folder:
                    continue  # belongs to a more specific listed folder
                checked += 1
                src = open(path, encoding="utf-8", errors="replace").read()
                for inc in INCLUDE.findall(src):
                    target = None
                    for base in [os.path.dirname(rel)] + ROOTS:
                        cand = os.path.normpath(os.path.join(base, inc))
                        if os.path.isfile(os.path.join(repo, cand)):
                            target = cand
                            break
                    if target is None:
                        continue
                    tf = folder_of(target, rule)
                    if tf is None:
                        bad.append(f"{rel}: includes {inc} ({target}), which is in no listed folder")
                    elif tf != folder and tf not in rule[folder]:
                        bad.append(f"{rel}: includes {inc} from {tf}; {folder} may use only {' '.join(rule[folder]) or 'itself'}")
    for b in bad:
        print(b)
    if checked == 0:
        print("check-layers: no file checked", file=sys.stderr)
        return 2
    print(f"check-layers: {checked} files, {len(bad)} violations", file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
