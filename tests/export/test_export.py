"""`vramtrace export` end to end, with the standard library only.

MemoryViz: the pickle loads with `pickle` and has the structure pytorch.org/memory_viz and
`python -m torch.cuda._memory_viz` read: every key they look up, blocks that tile their segment,
and a history that the segment view can replay backwards from the end state without meeting a
block or segment it does not know (MemoryViz.js, simulate_memory, would throw).
Perfetto: valid JSON, counters never negative, every async begin ended, and the counters' peak
equal to `vramtrace summary --json`.
Errors: a bad trace writes nothing, an existing output is kept without --force, `-o -` is stdout.
"""
import json
import os
import pickle
import shutil
import subprocess
import tempfile
import unittest

EXE = os.environ.get("VRAMTRACE_EXE", "vramtrace")
DATA = os.environ.get("VRAMTRACE_TEST_DATA", os.path.join(os.path.dirname(__file__), "..", "data"))

TRACES = [
    "torch-h200/gpt2_train.torchtrace.jsonl.gz",
    "torch-h200/encoder_varlen.snapshot.pickle",
    "pickle/late_start.snapshot.pickle.gz",
    "pickle/sites.snapshot.pickle",
    "ledger/run.4242.jsonl",
    "oom/retries.vramtrace.jsonl",
    "oom/plain_oom.vramtrace.jsonl",
]
ACTIONS = {"alloc", "free_requested", "free_completed", "segment_alloc", "segment_free", "oom",
           "segment_map", "segment_unmap", "snapshot"}
BLOCK_STATES = {"active_allocated", "active_pending_free", "inactive"}


def run(*args, check=True):
    p = subprocess.run([EXE, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    if check and p.returncode != 0:
        raise AssertionError(f"vramtrace {' '.join(args)}: exit {p.returncode}\n{p.stderr.decode()}")
    return p


class Scratch(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="vt-export-")

    def tearDown(self):
        shutil.rmtree(self.dir, ignore_errors=True)

    def path(self, name):
        return os.path.join(self.dir, name)


def check_frames(test, frames):
    test.assertIsInstance(frames, list)
    for f in frames:
        test.assertEqual(set(f), {"filename", "line", "name"})
        test.assertIsInstance(f["filename"], str)
        test.assertIsInstance(f["line"], int)
        test.assertIsInstance(f["name"], str)


def replay_backwards(test, snap, device, stop):
    """The segment view's walk (MemoryViz.js simulate_memory): undo the events after `stop`,
    newest first, from the end state; every block must be known when its free is undone, and
    every block left must lie in a segment."""
    segments = [[s["address"], s["total_size"], s["stream"]] for s in snap["segments"] if s["device"] == device]
    blocks = {}
    for s in snap["segments"]:
        if s["device"] != device:
            continue
        addr = s["address"]
        for b in s["blocks"]:
            if b["state"] in ("active_allocated", "active_pending_free"):
                blocks[addr] = b["size"]
            addr += b["size"]
    events = snap["device_traces"][device]
    # annotate_snapshot: a free_requested right before its free_completed becomes one "free".
    merged = []
    for e in events:
        if (e["action"] == "free_completed" and merged and merged[-1]["action"] == "free_requested"
                and merged[-1]["addr"] == e["addr"]):
            merged[-1] = dict(merged[-1], action="free")
            continue
        merged.append(e)
    for i in range(len(merged) - 1, stop, -1):
        e = merged[i]
        a = e["action"]
        if a in ("free", "free_completed"):
            blocks[e["addr"]] = e["size"]
        elif a == "free_requested":
            test.assertIn(e["addr"], blocks, f"device {device} event {i}: free_requested of an unknown block")
        elif a == "alloc":
            blocks.pop(e["addr"], None)
        elif a == "segment_free":
            segments.append([e["addr"], e["size"], e["stream"]])
        elif a == "segment_alloc":
            found = [s for s in segments if s[0] == e["addr"]]
            test.assertTrue(found, f"device {device} event {i}: segment_alloc of a segment the end state lacks")
            segments.remove(found[0])
    for addr in blocks:
        test.assertTrue(any(s[0] <= addr < s[0] + s[1] for s in segments),
                        f"device {device} at event {stop}: block {addr:#x} in no segment")


class MemoryViz(Scratch):
    def export(self, trace, *extra):
        out = self.path(os.path.basename(trace) + ".snap.pickle")
        run("export", os.path.join(DATA, trace), "--format", "memory-viz", "-o", out, *extra)
        with open(out, "rb") as f:
            raw = f.read()
        self.assertEqual(raw[:2], b"\x80\x04")  # protocol 4: the viewer takes 2 to 4
        return pickle.loads(raw)

    def check_snapshot(self, snap):
        self.assertEqual(set(snap), {"segments", "device_traces", "allocator_settings"})
        self.assertIsInstance(snap["allocator_settings"], dict)
        self.assertIsInstance(snap["device_traces"], list)
        for seg in snap["segments"]:
            for key in ("device", "address", "total_size", "allocated_size", "active_size", "requested_size",
                        "stream", "segment_type", "segment_pool_id", "is_expandable", "frames", "blocks"):
                self.assertIn(key, seg)
            self.assertIn(seg["segment_type"], ("large", "small"))
            self.assertLess(seg["device"], len(snap["device_traces"]))
            addr, allocated, active, requested = seg["address"], 0, 0, 0
            for b in seg["blocks"]:
                self.assertEqual(b["address"], addr)  # blocks tile the segment, in address order
                self.assertIn(b["state"], BLOCK_STATES)
                self.assertLessEqual(b["requested_size"], b["size"])
                check_frames(self, b["frames"])
                addr += b["size"]
                if b["state"] == "active_allocated":
                    allocated += b["size"]
                    requested += b["requested_size"]
                if b["state"] != "inactive":
                    active += b["size"]
            self.assertEqual(addr, seg["address"] + seg["total_size"])
            self.assertEqual(seg["allocated_size"], allocated)
            self.assertEqual(seg["active_size"], active)
        for trace in snap["device_traces"]:
            self.assertIsInstance(trace, list)
            last = None
            for e in trace:
                self.assertIn(e["action"], ACTIONS)
                self.assertIn("addr" if e["action"] != "oom" else "device_free", e)
                for key in ("size", "stream", "time_us"):
                    self.assertIsInstance(e[key], int)
                check_frames(self, e["frames"])
                if last is not None:
                    self.assertGreaterEqual(e["time_us"], last - 10_000_000)  # roughly in order
                last = e["time_us"]
        for device in range(len(snap["device_traces"])):
            n = len(snap["device_traces"][device])
            for stop in sorted({-1, n // 3, n // 2, n - 1}):
                replay_backwards(self, snap, device, stop)

    def test_bundled_traces(self):
        for trace in TRACES:
            with self.subTest(trace=trace):
                snap = self.export(trace)
                self.check_snapshot(snap)
                self.assertTrue(snap["segments"] or any(snap["device_traces"]))

    def test_snapshot_keeps_its_segments(self):
        with open(os.path.join(DATA, "torch-h200/encoder_varlen.snapshot.pickle"), "rb") as f:
            original = pickle.load(f)
        snap = self.export("torch-h200/encoder_varlen.snapshot.pickle")
        strip = lambda segs: [(s["device"], s["address"], s["total_size"], s["allocated_size"],
                               [(b["size"], b["state"], b["requested_size"]) for b in s["blocks"]]) for s in segs]
        self.assertEqual(sorted(strip(snap["segments"])), sorted(strip(original["segments"])))
        for d, trace in enumerate(original["device_traces"]):
            self.assertEqual([(e["action"], e["size"]) for e in trace],
                             [(e["action"], e["size"]) for e in snap["device_traces"][d]])

    def test_stacks_are_frames(self):
        snap = self.export("pickle/sites.snapshot.pickle")
        allocs = [e for t in snap["device_traces"] for e in t if e["action"] == "alloc"]
        self.assertTrue(allocs)
        self.assertTrue(any(e["frames"] for e in allocs))
        self.assertTrue(any(b["frames"] for s in snap["segments"] for b in s["blocks"]))

    def test_device_level(self):
        snap = self.export("ledger/run.4242.jsonl", "--level", "device")
        self.check_snapshot(snap)
        actions = {e["action"] for t in snap["device_traces"] for e in t}
        self.assertIn("segment_map", actions)

    def test_stdout(self):
        p = run("export", os.path.join(DATA, "pickle/sites.snapshot.pickle"), "--format", "memory-viz", "-o", "-")
        self.check_snapshot(pickle.loads(p.stdout))


class Perfetto(Scratch):
    def test_counters_slices_and_peak(self):
        for trace in TRACES:
            with self.subTest(trace=trace):
                src = os.path.join(DATA, trace)
                out = self.path("trace.json")
                run("export", src, "--format", "perfetto", "-o", out, "--force")
                with open(out, encoding="utf-8") as f:
                    doc = json.load(f)
                self.assertEqual(doc["displayTimeUnit"], "ns")
                counters, depth, names = {}, {}, set()
                for e in doc["traceEvents"]:
                    if e["ph"] == "M":
                        names.add(e["name"])
                    elif e["ph"] == "C":
                        for k, v in e["args"].items():
                            self.assertGreaterEqual(v, 0)
                            counters.setdefault((e["name"], k), []).append((e["ts"], v))
                    elif e["ph"] in ("b", "e"):
                        self.assertEqual(e["cat"], "alloc")
                        key = (e["pid"], e["id"])
                        depth[key] = depth.get(key, 0) + (1 if e["ph"] == "b" else -1)
                        self.assertIn(depth[key], (0, 1))
                self.assertEqual(names, {"process_name", "thread_name"})
                self.assertTrue(all(v == 0 for v in depth.values()), "a slice without its end")
                summary = json.loads(run("summary", src, "--json").stdout)
                for dev in summary["traces"][0]["devices"]:
                    if "peak" not in dev:
                        continue
                    name = f"cuda:{dev['device']}"
                    alloc = counters[(name, "allocated")]
                    peak = max(v for _, v in alloc)
                    self.assertEqual(peak, dev["stats"]["allocated_bytes.all.peak"])
                    self.assertEqual(peak, dev["peak"]["allocated_bytes"])
                    ts = next(t for t, v in alloc if v == peak)
                    self.assertIn((ts, dev["peak"]["reserved_bytes"]), counters[(name, "reserved")])

    def test_processes(self):
        out = self.path("all.json")
        run("export", os.path.join(DATA, "ledger/run.4242.jsonl"), os.path.join(DATA, "oom/retries.vramtrace.jsonl"),
            "--format", "perfetto", "-o", out)
        with open(out, encoding="utf-8") as f:
            doc = json.load(f)
        pids = {e["pid"] for e in doc["traceEvents"] if e["ph"] == "M" and e["name"] == "process_name"}
        self.assertEqual(len(pids), 2)


class Errors(Scratch):
    def test_malformed_trace_writes_nothing(self):
        bad = self.path("bad.jsonl")
        with open(bad, "w") as f:
            f.write('{"action":"alloc","addr":1,"size":10}\nnot json at all\n{"action":"alloc","addr":2,"size":5}\n')
        out = self.path("out.pickle")
        for fmt in ("memory-viz", "perfetto"):
            p = run("export", bad, "--format", fmt, "-o", out, check=False)
            self.assertEqual(p.returncode, 2, p.stderr)
            self.assertIn(b"vramtrace export:", p.stderr)
            self.assertIn(b"bad.jsonl", p.stderr)
            self.assertEqual(sorted(os.listdir(self.dir)), ["bad.jsonl"])  # no output, no temporary

    def test_missing_trace(self):
        p = run("export", self.path("none.jsonl"), "--format", "perfetto", "-o", self.path("o.json"), check=False)
        self.assertEqual(p.returncode, 2)
        self.assertFalse(os.path.exists(self.path("o.json")))

    def test_existing_output_needs_force(self):
        out = self.path("snap.pickle")
        with open(out, "w") as f:
            f.write("keep me")
        src = os.path.join(DATA, "pickle/sites.snapshot.pickle")
        p = run("export", src, "--format", "memory-viz", "-o", out, check=False)
        self.assertEqual(p.returncode, 2)
        self.assertIn(b"--force", p.stderr)
        with open(out) as f:
            self.assertEqual(f.read(), "keep me")
        run("export", src, "--format", "memory-viz", "-o", out, "--force")
        with open(out, "rb") as f:
            self.assertIn("segments", pickle.load(f))
        self.assertEqual(os.listdir(self.dir), ["snap.pickle"])

    def test_memory_viz_takes_one_process(self):
        p = run("export", os.path.join(DATA, "ledger/run.4242.jsonl"), os.path.join(DATA, "oom/retries.vramtrace.jsonl"),
                "--format", "memory-viz", "-o", self.path("x.pickle"), check=False)
        self.assertEqual(p.returncode, 2)
        self.assertIn(b"one process", p.stderr)
        self.assertFalse(os.path.exists(self.path("x.pickle")))

    def test_usage(self):
        src = os.path.join(DATA, "pickle/sites.snapshot.pickle")
        self.assertEqual(run("export", src, "--format", "svg", "-o", self.path("x"), check=False).returncode, 2)
        self.assertEqual(run("export", src, "--format", "perfetto", check=False).returncode, 2)


if __name__ == "__main__":
    unittest.main()
