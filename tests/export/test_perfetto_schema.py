"""`vramtrace export --format perfetto` checked against the Trace Event Format's own rules.

trace_processor cannot be installed here (no PyPI, no web); DevTools' trace engine from npm
(@paulirish/trace_engine) parses the format but has no handler for generic counter tracks, so it
would check nothing of ours. Instead perfetto/trace_event.schema.json states the format's rules
(written from the format's document: the phases, the fields each phase requires, counters whose
every argument is a number, the metadata names) and ajv, a well-kept JSON Schema validator,
checks our output of every bundled trace against it. ajv comes from npm's registry through
`npm ci` with perfetto/package-lock.json, which pins each package's sha512; it is installed once
into the user's cache. Without node, npm or the registry the suite reports itself skipped.

What this does not check (docs/export.md): that a "b" has its "e" and the counters equal
`summary` (test_export.Perfetto does), and anything trace_processor itself would say.
"""
import hashlib
import json
import os
import shutil
import subprocess
import tempfile
import unittest

from test_export import DATA, TRACES, run

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "perfetto")
LOCK = os.path.join(HERE, "package-lock.json")


def ajv_dir():
    """The folder whose node_modules holds the pinned ajv, installing it on first use; None (and
    why) when node, npm or the registry is missing."""
    if not shutil.which("node") or not shutil.which("npm"):
        return None, "no node or npm"
    with open(LOCK, "rb") as f:
        key = hashlib.sha256(f.read()).hexdigest()[:16]
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    target = os.path.join(cache, "vramtrace", "ajv", key)
    if os.path.isfile(os.path.join(target, "node_modules", "ajv", "package.json")):
        return target, ""
    tmp = tempfile.mkdtemp(prefix="vt-ajv-")
    try:
        for name in ("package.json", "package-lock.json"):
            shutil.copy(os.path.join(HERE, name), tmp)
        # npm ci installs exactly the lock's packages and fails on any sha512 that differs.
        p = subprocess.run(["npm", "ci", "--ignore-scripts", "--no-audit", "--no-fund", "--loglevel=error"],
                           cwd=tmp, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=300)
        if p.returncode != 0:
            lines = [ln for ln in p.stdout.decode(errors="replace").splitlines() if ln.strip()]
            return None, "npm ci failed (registry unreachable?): " + (lines[0] if lines else "no output")
        os.makedirs(os.path.dirname(target), exist_ok=True)
        try:
            os.rename(tmp, target)
        except OSError:  # another run installed it meanwhile
            pass
        return target, ""
    except subprocess.TimeoutExpired:
        return None, "npm ci timed out (registry unreachable?)"
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


AJV, WHY = ajv_dir()


def validate(*files):
    env = dict(os.environ, VRAMTRACE_AJV_DIR=AJV)
    return subprocess.run(["node", os.path.join(HERE, "validate.mjs"), *files], env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


@unittest.skipIf(AJV is None, "skipped: no ajv from npm: %s" % WHY)
class PerfettoSchema(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="vt-perfetto-")

    def tearDown(self):
        shutil.rmtree(self.dir, ignore_errors=True)

    def export(self, name, *traces):
        out = os.path.join(self.dir, name)
        run("export", *traces, "--format", "perfetto", "-o", out, "--force")
        return out

    def test_bundled_traces_follow_the_format(self):
        files = [self.export(f"t{i}.json", os.path.join(DATA, t)) for i, t in enumerate(TRACES)]
        files.append(self.export("two.json", os.path.join(DATA, "ledger/run.4242.jsonl"),
                                 os.path.join(DATA, "oom/retries.vramtrace.jsonl")))
        p = validate(*files)
        self.assertEqual(p.returncode, 0, p.stdout.decode())
        self.assertEqual(p.stdout.decode().count("valid: "), len(files))

    def test_a_broken_export_is_refused(self):
        # Each of these breaks one rule of the format in a real export; the schema must see it.
        src = self.export("good.json", os.path.join(DATA, "oom/retries.vramtrace.jsonl"))
        with open(src, encoding="utf-8") as f:
            good = json.load(f)

        def first(doc, ph):
            return next(e for e in doc["traceEvents"] if e["ph"] == ph)

        breaks = {
            "counter value not a number": lambda d: first(d, "C")["args"].update(allocated="12"),
            "counter without args": lambda d: first(d, "C").pop("args"),
            "async begin without id": lambda d: first(d, "b").pop("id"),
            "async end without cat": lambda d: first(d, "e").pop("cat"),
            "unknown phase": lambda d: first(d, "n").update(ph="Q"),
            "no timestamp": lambda d: first(d, "b").pop("ts"),
            "timestamp as a string": lambda d: first(d, "C").update(ts="0.0"),
            "pid not an integer": lambda d: first(d, "b").update(pid="4242"),
            "unknown metadata": lambda d: first(d, "M").update(name="process_title"),
            "process name not a string": lambda d: first(d, "M")["args"].update(name=7),
            "bad time unit": lambda d: d.update(displayTimeUnit="us"),
            "no traceEvents": lambda d: d.pop("traceEvents"),
        }
        for what, breaker in breaks.items():
            with self.subTest(what=what):
                doc = json.loads(json.dumps(good))
                breaker(doc)
                bad = os.path.join(self.dir, "bad.json")
                with open(bad, "w", encoding="utf-8") as f:
                    json.dump(doc, f)
                p = validate(bad)
                self.assertEqual(p.returncode, 1, f"{what}: accepted\n{p.stdout.decode()}")
                self.assertIn("INVALID", p.stdout.decode())


if __name__ == "__main__":
    unittest.main()
