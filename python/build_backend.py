"""A PEP 517 build backend in the standard library only, so that `pip install ./python` works
without fetching setuptools: a pure-Python wheel of the top-level modules listed in
pyproject.toml ([tool.vramtrace-build] modules), with the metadata and entry points of its
[project] table. Editable installs put this directory on sys.path through a .pth file.

pyproject.toml is read with tomllib (Python 3.11+); older interpreters use the small reader
below, which understands only what that file uses: tables, and `key = "string"` or
`key = ["string", ...]` on one line.
"""

import base64
import hashlib
import io
import os
import re
import tarfile
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))


def _read_pyproject():
    path = os.path.join(HERE, "pyproject.toml")
    try:
        import tomllib
    except ImportError:
        tomllib = None
    if tomllib is not None:
        with open(path, "rb") as f:
            return tomllib.load(f)
    doc, table = {}, {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.split("#", 1)[0].strip()
            if not line:
                continue
            m = re.fullmatch(r"\[([^\]]+)\]", line)
            if m:
                table = doc
                for part in m.group(1).split("."):
                    table = table.setdefault(part.strip(), {})
                continue
            key, value = (s.strip() for s in line.split("=", 1))
            table[key.strip('"')] = re.findall(r'"([^"]*)"', value) if value.startswith("[") else value.strip('"')
    return doc


def _project():
    doc = _read_pyproject()
    p = doc["project"]
    return p, doc["tool"]["vramtrace-build"]["modules"]


def _dist_info(p):
    return "%s-%s.dist-info" % (p["name"].replace("-", "_"), p["version"])


def _metadata(p):
    lines = ["Metadata-Version: 2.1", "Name: " + p["name"], "Version: " + p["version"]]
    if p.get("description"):
        lines.append("Summary: " + p["description"])
    if p.get("requires-python"):
        lines.append("Requires-Python: " + p["requires-python"])
    return "\n".join(lines) + "\n"


def _entry_points(p):
    out = []
    for group, entries in sorted(p.get("entry-points", {}).items()):
        out.append("[%s]" % group)
        out += ["%s = %s" % (k, v) for k, v in sorted(entries.items())]
        out.append("")
    return "\n".join(out)


def _write_wheel(wheel_directory, files, tag="py3-none-any", entry_points=None):
    """Writes a wheel and returns its file name.

    files: (archive name, bytes) or (archive name, bytes, POSIX mode) tuples; a mode with an
    execute bit is kept in the archive, where pip restores it. tag: the wheel's compatibility tag
    (PEP 425); anything but py3-none-any makes a platform wheel (Root-Is-Purelib: false).
    entry_points: extra {group: {name: target}} merged with those of pyproject.toml.
    Adds METADATA, WHEEL, entry_points.txt and RECORD."""
    p, _ = _project()
    p = dict(p)
    if entry_points:
        merged = {g: dict(e) for g, e in p.get("entry-points", {}).items()}
        for group, entries in entry_points.items():
            merged.setdefault(group, {}).update(entries)
        p["entry-points"] = merged
    di = _dist_info(p)
    purelib = "true" if tag == "py3-none-any" else "false"
    files = [f if len(f) == 3 else (f[0], f[1], 0o644) for f in files] + [
        (di + "/METADATA", _metadata(p).encode(), 0o644),
        (di + "/WHEEL", ("Wheel-Version: 1.0\nGenerator: vramtrace build_backend\nRoot-Is-Purelib: %s\nTag: %s\n"
                         % (purelib, tag)).encode(), 0o644),
        (di + "/entry_points.txt", _entry_points(p).encode(), 0o644),
    ]
    record = []
    for name, data, _ in files:
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append("%s,sha256=%s,%d" % (name, digest, len(data)))
    record.append(di + "/RECORD,,")
    files.append((di + "/RECORD", ("\n".join(record) + "\n").encode(), 0o644))
    wheel = "%s-%s-%s.whl" % (p["name"].replace("-", "_"), p["version"], tag)
    path = os.path.join(wheel_directory, wheel)
    with zipfile.ZipFile(path + ".part", "w", zipfile.ZIP_DEFLATED) as z:
        for name, data, mode in files:
            info = zipfile.ZipInfo(name, date_time=(2020, 1, 1, 0, 0, 0))
            info.external_attr = (0o100000 | mode) << 16  # a regular file with its permission bits
            info.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(info, data)
    os.replace(path + ".part", path)
    return wheel


def _module_files(modules):
    for m in modules:
        with open(os.path.join(HERE, m + ".py"), "rb") as f:
            yield m + ".py", f.read()


def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def get_requires_for_build_editable(config_settings=None):
    return []


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    _, modules = _project()
    return _write_wheel(wheel_directory, _module_files(modules))


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    return _write_wheel(wheel_directory, [("vramtrace.pth", (HERE + "\n").encode())])


def build_sdist(sdist_directory, config_settings=None):
    p, modules = _project()
    base = "%s-%s" % (p["name"].replace("-", "_"), p["version"])
    names = ["pyproject.toml", "build_backend.py"] + [m + ".py" for m in modules]
    pkg_info = _metadata(p).encode()
    path = os.path.join(sdist_directory, base + ".tar.gz")
    with tarfile.open(path, "w:gz", format=tarfile.PAX_FORMAT) as t:
        for n in names:
            t.add(os.path.join(HERE, n), arcname=base + "/" + n)
        info = tarfile.TarInfo(base + "/PKG-INFO")
        info.size = len(pkg_info)
        t.addfile(info, io.BytesIO(pkg_info))
    return base + ".tar.gz"
