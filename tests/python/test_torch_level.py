"""Tests of python/vramtrace/_boot/sitecustomize.py and python/vramtrace/torch_level.py.

No torch and no GPU: each test runs a child python3 with PYTHONPATH=<_boot>:<fake_torch>, where
fake_torch/ is a test double of the PyTorch APIs torch_level uses (fake_torch/README.md), and
checks the files it wrote, its stderr, and the fake's event log (FAKE_TORCH_LOG). Most tests also
run the same program without vramtrace (no _boot on PYTHONPATH, no VRAMTRACE_TORCH_OUT) and
check that the exit status and stdout are the same.

Run: python3 -B -m unittest discover -s tests/python -v   (ctest: the "python: torch level" test)
"""
import glob
import json
import os
import pickle
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
BOOT = os.path.join(ROOT, "python", "vramtrace", "_boot")
FAKE = os.path.join(HERE, "fake_torch")
TIMEOUT_S = 60
UNAVAILABLE = re.compile(r"^vramtrace: PyTorch (\d+\.\d+): tensor-level recording unavailable "
                         r"\((.+)\); the trace has device level only$")


class Result:
    def __init__(self, proc, workdir, log_path):
        self.rc = proc.returncode
        self.stdout = proc.stdout
        self.stderr = proc.stderr
        self.dir = workdir
        self.events = []
        if os.path.exists(log_path):
            with open(log_path) as f:
                self.events = [line.rstrip("\n").split(" ", 1) for line in f]

    def vramtrace_lines(self):
        return [line for line in self.stderr.splitlines() if line.startswith("vramtrace: ")]

    def pickles(self):
        return sorted(glob.glob(os.path.join(self.dir, "*.pickle")))

    def sidecars(self):
        return sorted(glob.glob(os.path.join(self.dir, "*.pickle.json")))

    def leftovers(self):
        return glob.glob(os.path.join(self.dir, "*.tmp-*"))

    def sidecar(self):
        paths = self.sidecars()
        assert len(paths) == 1, (paths, self.stderr)
        with open(paths[0]) as f:
            return json.load(f)

    def snapshot(self):
        paths = self.pickles()
        assert len(paths) == 1, (paths, self.stderr)
        with open(paths[0], "rb") as f:
            return pickle.load(f)

    def event_names(self, pid=None):
        return [e for p, e in self.events if pid is None or p == str(pid)]


class TorchLevelTest(unittest.TestCase):
    """Helpers: write a program, run it traced and untraced, read what it left."""

    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="vt-torch-level-")
        self.addCleanup(shutil.rmtree, self.tmp, True)
        self.runs = 0

    def child_env(self, traced, env, extra_path):
        base = {k: v for k, v in os.environ.items()
                if not k.startswith(("PYTHON", "VRAMTRACE_", "FAKE_TORCH_"))
                and k not in ("RANK", "LOCAL_RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID")}
        base["PYTHONDONTWRITEBYTECODE"] = "1"
        path = ([BOOT] if traced else []) + list(extra_path) + [FAKE]
        base["PYTHONPATH"] = os.pathsep.join(path)
        base.update(env)
        return base

    def run_program(self, source, traced=True, out="out.%p.pickle", env=None, extra_path=()):
        """Runs `source` in a fresh directory; traced: with _boot and VRAMTRACE_TORCH_OUT."""
        self.runs += 1
        workdir = os.path.join(self.tmp, "run%d%s" % (self.runs, "" if traced else "-untraced"))
        os.makedirs(workdir)
        prog = os.path.join(workdir, "prog.py")
        with open(prog, "w") as f:
            f.write(textwrap.dedent(source))
        log = os.path.join(workdir, "fake_torch.log")
        child_env = {"FAKE_TORCH_LOG": log}
        if traced and out is not None:
            child_env["VRAMTRACE_TORCH_OUT"] = os.path.join(workdir, out)
        child_env.update(env or {})
        proc = subprocess.run([sys.executable, prog], cwd=workdir, capture_output=True, text=True,
                              timeout=TIMEOUT_S, env=self.child_env(traced, child_env, extra_path))
        return Result(proc, workdir, log)

    def run_both(self, source, env=None, extra_path=(), out="out.%p.pickle"):
        """Runs traced and untraced; checks exit status and stdout are the same; returns traced."""
        plain = self.run_program(source, traced=False, env=env, extra_path=extra_path)
        traced = self.run_program(source, traced=True, env=env, extra_path=extra_path, out=out)
        self.assertEqual(plain.rc, traced.rc, "exit status changed\n" + traced.stderr)
        self.assertEqual(plain.stdout, traced.stdout, "stdout changed\n" + traced.stderr)
        self.assertEqual(plain.vramtrace_lines(), [])
        self.assertEqual(traced.leftovers(), [])
        return traced

    def assert_written(self, res, reason, final=True):
        self.assertEqual(len(res.pickles()), 1, res.stderr)
        side = res.sidecar()
        self.assertEqual(side["reason"], reason)
        self.assertEqual(side["final"], final)
        self.assertEqual(side["snapshot"], os.path.basename(res.pickles()[0]))
        return side


# A small training-like program: CUDA first used by torch.empty (C++'s device_lazy_init path).
ALLOCATE = """
import torch
torch._fake.log("program: before cuda")
keep = [torch.empty(1 << 20, device="cuda") for _ in range(4)]
del keep[1]
torch._fake.log("program: after cuda")
print("allocated", len(keep))
"""


class WithoutOutputVariable(TorchLevelTest):
    def test_nothing_happens_without_VRAMTRACE_TORCH_OUT(self):
        res = self.run_both(ALLOCATE + "print(sorted(m for m in __import__('sys').modules if 'vramtrace' in m))\n",
                            out=None)
        self.assertEqual(res.rc, 0)
        self.assertIn("[]", res.stdout)
        self.assertEqual(res.vramtrace_lines(), [])
        self.assertEqual(res.pickles() + res.sidecars(), [])
        events = res.event_names()
        self.assertNotIn("attach_oom_observer", events)
        self.assertFalse([e for e in events if e.startswith("record_history")], events)


class StartUp(TorchLevelTest):
    def test_no_torch_import_and_nothing_heavy_when_the_program_never_imports_torch(self):
        prog = """
        import sys
        print("\\n".join(sorted(m for m in sys.modules if "vramtrace" not in m and m != "sitecustomize")))
        print("torch" in sys.modules)
        """
        plain = self.run_program(prog, traced=False)
        traced = self.run_program(prog, traced=True)
        self.assertEqual(traced.rc, 0, traced.stderr)
        self.assertEqual(traced.stderr, "")
        extra = set(traced.stdout.split()) - set(plain.stdout.split())
        # Only what loading one file needs; no torch, json, pickle, signal, threading, socket.
        self.assertLessEqual(extra, {"importlib.util", "importlib._abc", "importlib.machinery"}, extra)
        self.assertTrue(traced.stdout.strip().endswith("False"))
        self.assertEqual(traced.pickles() + traced.sidecars(), [])
        self.assertEqual(traced.events, [])

    def test_importing_torch_does_not_initialise_cuda(self):
        res = self.run_both("""
        import torch
        print(torch.cuda.is_initialized(), torch._C._fake_state()["allocators"])
        """)
        self.assertEqual(res.stdout, "False 0\n")
        self.assertEqual(res.event_names(), ["import torch"])  # no cuda_init, no getDeviceCount
        self.assertEqual(res.pickles() + res.sidecars(), [])  # CUDA never used: nothing to say
        self.assertEqual(res.vramtrace_lines(), [])


class Chaining(TorchLevelTest):
    def other_site(self, body):
        other = os.path.join(self.tmp, "other-site")
        os.makedirs(other, exist_ok=True)
        with open(os.path.join(other, "sitecustomize.py"), "w") as f:
            f.write(textwrap.dedent(body))
        return other

    PROG = """
    import builtins, os, sys
    print("other ran:", getattr(builtins, "OTHER_SITE_RAN", False))
    print("sitecustomize module:", os.path.basename(os.path.dirname(sys.modules["sitecustomize"].__file__)))
    print("path has other:", any(p.endswith("other-site") for p in sys.path))
    print("extra entry kept:", "/added/by/other" in sys.path)
    """

    def test_existing_sitecustomize_runs_with_and_without_the_variable(self):
        other = self.other_site("""
        import builtins, sys
        builtins.OTHER_SITE_RAN = True
        sys.path.append("/added/by/other")
        """)
        for out in ("out.%p.pickle", None):
            plain = self.run_program(self.PROG, traced=False, extra_path=[other])
            traced = self.run_program(self.PROG, traced=True, extra_path=[other], out=out)
            self.assertIn("other ran: True", plain.stdout)
            self.assertEqual(plain.stdout, traced.stdout, traced.stderr)
            self.assertEqual(traced.stderr, "")
            self.assertIn("sitecustomize module: other-site", traced.stdout)

    def test_a_failing_sitecustomize_is_reported_as_site_does(self):
        # One difference stays: sys.modules["sitecustomize"] is then vramtrace's, not absent
        # (importlib needs the name there when vramtrace's sitecustomize returns).
        other = self.other_site("raise ValueError('boom')\n")
        prog = "import builtins\nprint(getattr(builtins, 'OTHER_SITE_RAN', False))\n"
        plain = self.run_program(prog, traced=False, extra_path=[other])
        traced = self.run_program(prog, traced=True, extra_path=[other])
        self.assertIn("Error in sitecustomize; set PYTHONVERBOSE for traceback:\nValueError: boom",
                      plain.stderr)
        self.assertEqual(plain.stderr, traced.stderr)
        self.assertEqual((plain.rc, plain.stdout), (traced.rc, traced.stdout))

    def test_the_other_sitecustomize_may_import_torch(self):
        other = self.other_site("import torch\n")
        res = self.run_both(ALLOCATE, extra_path=[other])
        self.assert_written(res, "exit")


class RecordingStart(TorchLevelTest):
    def test_recording_starts_at_the_first_lazy_init_and_not_before(self):
        res = self.run_both(ALLOCATE)
        events = res.event_names()
        first_cuda = events.index("program: before cuda")
        self.assertEqual(events[:first_cuda], ["import torch"])
        after = events[first_cuda + 1:]
        self.assertEqual(after[0], "cuda_init")
        self.assertEqual(after[1], "record_history new enabled=all context=alloc stacks=python "
                                   "max_entries=1000000 allocators=1")
        self.assertEqual(after[2], "attach_oom_observer")
        # after initialisation vramtrace asks the device count once (it never does before)
        self.assertEqual(after[3:], ["getDeviceCount", "program: after cuda", "snapshot",
                                     "getDeviceCount", "mem_get_info 0"])
        # every allocation of the program is in the history
        side = self.assert_written(res, "exit")
        actions = side["history"]["devices"][0]["actions"]
        stats = side["devices"][0]["memory_stats"]
        self.assertEqual(actions["alloc"], 4)
        self.assertEqual(actions["alloc"], stats["allocation.all.allocated"])
        self.assertEqual(actions["free_requested"], 1)

    def test_first_cuda_use_through_torch_cuda_memory(self):
        # torch.cuda.memory bound _lazy_init at import: the wrapper must be there too.
        res = self.run_both("""
        import torch
        torch.cuda.set_per_process_memory_fraction(0.5)
        torch._fake.log("program: fraction set")
        x = torch.empty(4096, device="cuda")
        print("ok")
        """)
        events = [e.split(" ")[0] for e in res.event_names()]
        self.assertEqual(events[:5], ["import", "cuda_init", "record_history", "attach_oom_observer",
                                      "getDeviceCount"])
        self.assertEqual(events[5], "program:")
        side = self.assert_written(res, "exit")
        self.assertEqual(side["history"]["devices"][0]["actions"]["alloc"], 1)

    def test_queued_calls_and_a_failed_first_init(self):
        # The program sees its own initialisation error unchanged; recording starts at the first
        # initialisation that succeeds, after the queued calls ran.
        res = self.run_both("""
        import torch
        torch.cuda.manual_seed_all(0)  # queued until initialisation
        real_init = torch._C._cuda_init
        def no_driver():
            raise RuntimeError("Found no NVIDIA driver on your system.")
        torch._C._cuda_init = no_driver
        try:
            torch.empty(10, device="cuda")
        except RuntimeError as e:
            print("program saw:", e)
        print(torch.cuda.is_initialized())
        torch._C._cuda_init = real_init
        x = torch.cuda.current_device()
        print("ok")
        """)
        self.assertEqual(res.stdout, "program saw: Found no NVIDIA driver on your system.\nFalse\nok\n")
        events = res.event_names()
        self.assertEqual(events[:3], ["import torch", "cuda_init", "seeded 0"])
        self.assertTrue(events[3].startswith("record_history new"), events)
        self.assert_written(res, "exit")

    def test_lazy_init_wrapper_is_removed_once_recording_started(self):
        res = self.run_both("""
        import torch
        x = torch.empty(10, device="cuda")
        import torch.cuda.memory as m
        print(torch.cuda._lazy_init is m._lazy_init, hasattr(torch.cuda._lazy_init, "_vramtrace_wrapped"))
        """)
        self.assertEqual(res.stdout, "True False\n")


class Inductor(TorchLevelTest):
    def test_the_snapshot_does_not_import_inductor_into_a_program_that_did_not(self):
        res = self.run_both(ALLOCATE + "import sys; print('torch._inductor' in sys.modules)\n")
        self.assertIn("False", res.stdout)
        self.assert_written(res, "exit")
        self.assertNotIn("import torch._inductor", res.event_names())
        # the program itself can still reach it afterwards
        res = self.run_both(ALLOCATE + """
import atexit, torch
atexit.register(lambda: print(hasattr(torch._inductor, "codecache")))  # after vramtrace's write
""")
        self.assertEqual(res.stdout.split()[-1], "True")

    def test_inductor_frames_are_mapped_when_the_program_uses_inductor(self):
        res = self.run_both("import torch._inductor\n" + ALLOCATE)
        self.assert_written(res, "exit")
        self.assertIn("stack_frames_for_code", res.event_names())

    def test_another_thread_sees_the_real_module_during_the_snapshot(self):
        res = self.run_both("""
import threading, torch
x = torch.empty(10, device="cuda")
seen = []
real_snapshot = torch._C._cuda_memorySnapshot
def snapshot_with_a_thread(*args):
    t = threading.Thread(target=lambda: seen.append(hasattr(torch._inductor, "codecache")))
    t.start(); t.join()
    return real_snapshot(*args)
torch._C._cuda_memorySnapshot = snapshot_with_a_thread
tl = __import__("sys").modules.get("_vramtrace_torch_level")
if tl is not None:
    tl.write_snapshot("test")
else:
    seen.append(True)
print(seen)
""")
        self.assertEqual(res.stdout, "[True]\n")


class Exits(TorchLevelTest):
    def test_normal_exit(self):
        res = self.run_both(ALLOCATE)
        self.assertEqual(res.rc, 0)
        self.assert_written(res, "exit")

    def test_sys_exit(self):
        res = self.run_both(ALLOCATE + "import sys; sys.exit(3)\n")
        self.assertEqual(res.rc, 3)
        self.assert_written(res, "exit")

    def test_uncaught_exception(self):
        res = self.run_both(ALLOCATE + "raise KeyError('the program failed')\n")
        self.assertEqual(res.rc, 1)
        self.assertIn("KeyError: 'the program failed'", res.stderr)
        self.assert_written(res, "exit")

    def test_os_exit(self):
        res = self.run_both(ALLOCATE + "import os, sys; sys.stdout.flush(); os._exit(7)\n")
        self.assertEqual(res.rc, 7)
        self.assert_written(res, "os._exit")

    def test_sigterm(self):
        res = self.run_both(ALLOCATE + """
import os, signal, sys, time
sys.stdout.flush()
os.kill(os.getpid(), signal.SIGTERM)
time.sleep(10)
print("not reached")
""")
        self.assertEqual(res.rc, -signal.SIGTERM)
        side = self.assert_written(res, "signal SIGTERM")
        self.assertIn("SIGTERM", side["recording"]["signals"])

    def test_sigint_with_pythons_handler(self):
        # KeyboardInterrupt ends in atexit; Python's own handler is left alone.
        res = self.run_both(ALLOCATE + """
import os, signal, sys, time
print(signal.getsignal(signal.SIGINT) is signal.default_int_handler)
sys.stdout.flush()
os.kill(os.getpid(), signal.SIGINT)
time.sleep(10)
""")
        self.assertEqual(res.rc, -signal.SIGINT)
        self.assertIn("KeyboardInterrupt", res.stderr)
        self.assertIn("True", res.stdout)
        self.assert_written(res, "exit")

    def test_sigint_with_the_default_disposition(self):
        res = self.run_both("""
import signal
signal.signal(signal.SIGINT, signal.SIG_DFL)
""" + ALLOCATE + """
import os, sys, time
sys.stdout.flush()
os.kill(os.getpid(), signal.SIGINT)
time.sleep(10)
""")
        self.assertEqual(res.rc, -signal.SIGINT)
        self.assert_written(res, "signal SIGINT")

    def test_the_programs_own_sigterm_handler_is_kept(self):
        res = self.run_both("""
import signal, sys
def handler(signum, frame):
    print("program handler")
    sys.exit(143)
signal.signal(signal.SIGTERM, handler)
""" + ALLOCATE + """
import os, time
print(signal.getsignal(signal.SIGTERM) is handler)
sys.stdout.flush()
os.kill(os.getpid(), signal.SIGTERM)
time.sleep(10)
""")
        self.assertEqual(res.rc, 143)
        self.assertIn("True\nprogram handler", res.stdout)
        side = self.assert_written(res, "exit")
        self.assertEqual(side["recording"]["signals"], [])

    def test_signals_left_alone_when_asked(self):
        res = self.run_both(ALLOCATE + """
import os, signal, sys, time
sys.stdout.flush()
os.kill(os.getpid(), signal.SIGTERM)
time.sleep(10)
""", env={"VRAMTRACE_TORCH_SIGNALS": "0"})
        self.assertEqual(res.rc, -signal.SIGTERM)
        # Killed with no write: only the sidecar of the start, naming the pickle that never came.
        self.assertEqual(res.pickles(), [])
        side = res.sidecar()
        self.assertEqual((side["reason"], side["final"], side["devices"]), ("started", False, None))
        self.assertEqual(side["snapshot"] + ".json", os.path.basename(res.sidecars()[0]))

    def test_the_start_is_recorded_before_any_write(self):
        # The sidecar exists from CUDA initialisation on, before the program allocates; SIGKILL
        # then leaves it, and nothing else.
        res = self.run_program("""
import os, signal, sys, torch
torch.cuda._lazy_init()
print(sorted(os.listdir(".")))
sys.stdout.flush()
os.kill(os.getpid(), signal.SIGKILL)
""")
        self.assertEqual(res.rc, -signal.SIGKILL)
        self.assertEqual(res.pickles(), [])
        self.assertIn(os.path.basename(res.sidecars()[0]), res.stdout)
        self.assertEqual(res.sidecar()["reason"], "started")

    def test_exit_write_happens_once(self):
        # atexit wrote; an os._exit called from a later atexit handler does not write again.
        res = self.run_both("""
import atexit, os
atexit.register(lambda: os._exit(4))  # registered first: runs after vramtrace's handler
""" + ALLOCATE)
        self.assertEqual(res.rc, 4)
        self.assertEqual(res.event_names().count("snapshot"), 1)
        self.assert_written(res, "exit")


OOM = """
import json, os, pickle, torch
keep = [torch.empty(1 << 20, device="cuda") for _ in range(3)]
out = os.environ.get("VRAMTRACE_TORCH_OUT", "").replace("%p", str(os.getpid()))
try:
    big = torch.empty(8 << 20, device="cuda")
except torch.OutOfMemoryError as e:
    print("caught OOM")
    if out:  # traced: the files are there before the exception reached the program
        snap = pickle.load(open(out, "rb"))
        side = json.load(open(out + ".json"))
        actions = [e["action"] for e in snap["device_traces"][0]]
        print("at the OOM:", side["reason"], len(side["ooms"]), actions[-1], file=__import__("sys").stderr)
"""


class OutOfMemory(TorchLevelTest):
    ENV = {"FAKE_TORCH_CAPACITY": str(4 << 20)}

    def test_oom_snapshot_is_written_before_the_exception(self):
        res = self.run_both(OOM + "print('after')\n", env=self.ENV)
        self.assertEqual(res.stdout, "caught OOM\nafter\n")
        self.assertIn("at the OOM: oom 1 oom", res.stderr)
        side = self.assert_written(res, "exit")
        [oom] = side["ooms"]
        self.assertEqual(oom["device"], 0)
        self.assertEqual(oom["alloc_bytes"], 8 << 20)
        self.assertEqual(oom["device_allocated"], 4 << 20)  # the device total, as PyTorch passes it
        self.assertEqual(oom["device_free"], 1 << 20)
        self.assertEqual(oom["stats"]["num_ooms"], 1)
        self.assertIsInstance(oom["time"], float)

    def test_uncaught_oom(self):
        res = self.run_both("""
import torch
keep = [torch.empty(1 << 20, device="cuda") for _ in range(3)]
big = torch.empty(8 << 20, device="cuda")
""", env=self.ENV)
        self.assertEqual(res.rc, 1)
        self.assertIn("OutOfMemoryError", res.stderr)
        self.assertEqual(res.event_names().count("snapshot"), 2)  # at the OOM, at exit
        side = self.assert_written(res, "exit")
        self.assertEqual(len(side["ooms"]), 1)
        self.assertEqual(side["history"]["devices"][0]["actions"]["oom"], 1)

    def test_each_oom_writes(self):
        res = self.run_both("""
import torch
keep = [torch.empty(1 << 20, device="cuda") for _ in range(3)]
for size in (8 << 20, 16 << 20):
    try:
        torch.empty(size, device="cuda")
    except torch.OutOfMemoryError:
        print("caught OOM")
""", env=self.ENV)
        self.assertEqual(res.stdout.count("caught OOM"), 2)
        self.assertEqual(res.event_names().count("snapshot"), 3)  # two OOMs, the exit
        self.assertEqual([o["alloc_bytes"] for o in res.sidecar()["ooms"]], [8 << 20, 16 << 20])

    def test_os_exit_right_after_an_oom(self):
        res = self.run_both(OOM + "import sys; sys.stdout.flush(); os._exit(9)\n", env=self.ENV)
        self.assertEqual(res.rc, 9)
        side = self.assert_written(res, "os._exit")
        self.assertEqual(len(side["ooms"]), 1)


class Files(TorchLevelTest):
    def test_sidecar_fields(self):
        res = self.run_both(ALLOCATE, env={"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True",
                                           "RANK": "3"})
        side = self.assert_written(res, "exit")
        pid = int(os.path.basename(res.pickles()[0]).split(".")[1])
        self.assertEqual(side["format"], "vramtrace-torch-sidecar")
        self.assertEqual(side["version"], 1)
        self.assertEqual(side["pid"], pid)
        self.assertEqual(side["rank"], "3")
        self.assertEqual(side["torch_version"], "2.11.0+fake")
        self.assertEqual(side["torch_cuda"], "13.0")
        rec = side["recording"]
        self.assertEqual((rec["state"], rec["api"], rec["context"], rec["stacks"], rec["max_entries"]),
                         ("on", "new", "alloc", "python", 1000000))
        self.assertTrue(rec["oom_observer"])
        self.assertIsInstance(rec["started_at"], float)
        alloc = side["allocator"]
        self.assertEqual(alloc["backend"], "native")
        self.assertEqual(alloc["env"]["PYTORCH_CUDA_ALLOC_CONF"], "expandable_segments:True")
        self.assertEqual(alloc["current_allocator"], "_cuda_CUDAAllocator")
        self.assertFalse(alloc["shim_forwards"])  # no shim in this process: nothing to ask
        self.assertEqual(alloc["snapshot_settings"]["PYTORCH_CUDA_ALLOC_CONF"], "expandable_segments:True")
        [dev] = side["devices"]
        self.assertEqual(dev["device"], 0)
        self.assertEqual(dev["memory_stats"]["allocation.all.current"], 3)
        self.assertEqual(dev["mem_get_info"], [(1 << 30) - 3 * (1 << 20), 1 << 30])
        hist = side["history"]
        self.assertEqual((hist["entries"], hist["wrapped"]), (4 * 2 + 3, False))
        self.assertEqual(side["ooms"], [])
        snap = res.snapshot()
        self.assertEqual(set(snap) >= {"segments", "device_traces", "allocator_settings"}, True)
        self.assertEqual(len(snap["device_traces"][0]), hist["entries"])
        with open(res.pickles()[0], "rb") as f:
            self.assertEqual(f.read(2), b"\x80\x04")  # protocol 4: what memory_viz reads

    def test_ring_wrap_is_reported(self):
        res = self.run_both(ALLOCATE, env={"VRAMTRACE_TORCH_MAX_ENTRIES": "5"})
        side = self.assert_written(res, "exit")
        self.assertEqual(side["recording"]["max_entries"], 5)
        self.assertEqual((side["history"]["entries"], side["history"]["wrapped"]), (5, True))
        self.assertIn("max_entries=5 ", " ".join(res.event_names()))

    def test_a_bad_max_entries_is_one_line_and_the_default(self):
        res = self.run_both(ALLOCATE, env={"VRAMTRACE_TORCH_MAX_ENTRIES": "lots"})
        self.assertEqual(res.vramtrace_lines(), [
            "vramtrace: VRAMTRACE_TORCH_MAX_ENTRIES='lots' is not a positive whole number; using 1000000"])
        self.assertEqual(res.sidecar()["recording"]["max_entries"], 1000000)

    def test_context_all_keeps_free_stacks_and_a_bad_value_is_one_line(self):
        res = self.run_both(ALLOCATE, env={"VRAMTRACE_TORCH_CONTEXT": "all"})
        self.assertEqual(res.sidecar()["recording"]["context"], "all")
        self.assertIn("context=all ", " ".join(res.event_names()))
        res = self.run_both(ALLOCATE, env={"VRAMTRACE_TORCH_CONTEXT": "everything"})
        self.assertEqual(res.vramtrace_lines(), [
            "vramtrace: VRAMTRACE_TORCH_CONTEXT='everything' is not alloc, all or none; using alloc"])
        self.assertEqual(res.sidecar()["recording"]["context"], "alloc")
        self.assertIn("context=alloc ", " ".join(res.event_names()))

    def test_context_none_records_the_history_without_stacks(self):
        res = self.run_both(ALLOCATE, env={"VRAMTRACE_TORCH_CONTEXT": "none"})
        side = self.assert_written(res, "exit")
        self.assertEqual((side["recording"]["context"], side["recording"]["stacks"]), ("none", None))
        self.assertIn("context=None ", " ".join(res.event_names()))

    def test_name_placeholders(self):
        res = self.run_both(ALLOCATE, out="t.%R%p.%%.pickle", env={"RANK": "2"})
        [path] = res.pickles()
        self.assertEqual(os.path.basename(path), "t.rank2.%d.%%.pickle" % res.sidecar()["pid"])

    def test_an_existing_file_is_not_overwritten(self):
        plain = self.run_program(ALLOCATE, traced=False)
        workdir = os.path.join(self.tmp, "existing")
        os.makedirs(workdir)
        target = os.path.join(workdir, "fixed.pickle")
        with open(target, "w") as f:
            f.write("someone else's")
        with open(os.path.join(workdir, "prog.py"), "w") as f:
            f.write(textwrap.dedent(ALLOCATE))
        env = self.child_env(True, {"VRAMTRACE_TORCH_OUT": target}, ())
        proc = subprocess.run([sys.executable, "prog.py"], cwd=workdir, capture_output=True,
                              text=True, timeout=TIMEOUT_S, env=env)
        res = Result(proc, workdir, os.path.join(workdir, "no.log"))
        self.assertEqual((res.rc, res.stdout), (plain.rc, plain.stdout))
        with open(target) as f:
            self.assertEqual(f.read(), "someone else's")
        self.assertEqual(res.vramtrace_lines(), [
            "vramtrace: %s exists and is not this process's: not overwritten (give "
            "VRAMTRACE_TORCH_OUT a %%p or %%t)" % target])
        self.assertEqual(res.sidecars(), [])  # without its pickle, no sidecar either
        self.assertEqual(res.leftovers(), [])

    def test_an_unwritable_output_is_one_line(self):
        blocker = os.path.join(self.tmp, "a-file")
        with open(blocker, "w") as f:
            f.write("x")
        res = self.run_both(ALLOCATE, out=os.path.join(blocker, "out.%p.pickle"))
        self.assertEqual(res.rc, 0)
        lines = res.vramtrace_lines()
        self.assertTrue(lines and all(line.startswith("vramtrace: could not write ") for line in lines),
                        res.stderr)
        self.assertEqual(len(lines), 1)  # once, although the OOM-free run wrote only at exit

    def test_relative_output_name_survives_chdir(self):
        res = self.run_both("""
import os, torch
x = torch.empty(10, device="cuda")
os.makedirs("elsewhere")
os.chdir("elsewhere")
""", out="out.%p.pickle")
        self.assertEqual(len(res.pickles()), 1)


class Versions(TorchLevelTest):
    def assert_one_unavailable_line(self, res, reason, version="2.11"):
        lines = res.vramtrace_lines()
        self.assertEqual(len(lines), 1, res.stderr)
        m = UNAVAILABLE.match(lines[0])
        self.assertTrue(m, lines[0])
        self.assertEqual(m.group(1), version)
        self.assertIn(reason, m.group(2))

    def test_legacy_api_of_pytorch_2_0(self):
        res = self.run_both(ALLOCATE, env={"FAKE_TORCH_FLAVOUR": "legacy", "FAKE_TORCH_VERSION": "2.0.1"})
        self.assertEqual(res.vramtrace_lines(), [])
        self.assertIn("record_history legacy enabled=True max_entries=1000000 alloc_context=True "
                      "allocators=1", res.event_names())
        side = self.assert_written(res, "exit")
        self.assertEqual((side["recording"]["api"], side["recording"]["context"]), ("legacy", "alloc"))
        self.assertEqual(side["history"]["devices"][0]["actions"]["alloc"], 4)

    def test_dispatcher_without_signature_of_pytorch_2_1(self):
        res = self.run_both(ALLOCATE, env={"FAKE_TORCH_FLAVOUR": "v21", "FAKE_TORCH_VERSION": "2.1.2"})
        self.assertEqual(res.vramtrace_lines(), [])
        side = self.assert_written(res, "exit")
        self.assertEqual(side["recording"]["api"], "new")
        self.assertEqual(side["history"]["devices"][0]["actions"]["alloc"], 4)

    def test_no_history_api(self):
        res = self.run_both(ALLOCATE, env={"FAKE_TORCH_FLAVOUR": "nohistory", "FAKE_TORCH_VERSION": "1.12.1"})
        self.assert_one_unavailable_line(res, "no torch.cuda.memory._record_memory_history", "1.12")
        self.assertEqual(res.pickles(), [])
        self.assertEqual(res.sidecar()["recording"]["state"], "unavailable")

    def test_built_without_cuda(self):
        res = self.run_both("""
import torch
try:
    torch.empty(10, device="cuda")
except AssertionError as e:
    print("program saw:", e)
""", env={"FAKE_TORCH_FLAVOUR": "cpu"})
        self.assertIn("program saw: Torch not compiled with CUDA enabled", res.stdout)
        self.assert_one_unavailable_line(res, "built without CUDA")
        self.assertEqual(res.pickles() + res.sidecars(), [])  # no GPU memory: no file to explain

    def test_no_torch_cuda(self):
        res = self.run_both("import torch\nprint(hasattr(torch, 'cuda'))\n",
                            env={"FAKE_TORCH_FLAVOUR": "nocuda"})
        self.assert_one_unavailable_line(res, "no torch.cuda")
        self.assertEqual(res.pickles() + res.sidecars(), [])

    def test_cuda_malloc_async_backend(self):
        res = self.run_both(ALLOCATE, env={"FAKE_TORCH_BACKEND": "cudaMallocAsync",
                                           "PYTORCH_CUDA_ALLOC_CONF": "backend:cudaMallocAsync"})
        self.assert_one_unavailable_line(res, "allocator backend cudaMallocAsync")
        self.assertEqual(res.pickles(), [])
        side = res.sidecar()
        self.assertEqual(side["recording"]["state"], "unavailable")
        self.assertEqual(side["allocator"]["backend"], "cudaMallocAsync")
        self.assertEqual(side["devices"][0]["memory_stats"]["allocation.all.allocated"], 4)
        self.assertIsNone(side["history"])

    def test_no_oom_observer(self):
        res = self.run_both(ALLOCATE, env={"FAKE_TORCH_NO_OBSERVER": "1"})
        self.assertEqual(res.vramtrace_lines(), [])
        side = self.assert_written(res, "exit")
        self.assertFalse(side["recording"]["oom_observer"])


class Fork(TorchLevelTest):
    def test_a_child_forked_after_cuda_init_writes_nothing(self):
        res = self.run_both(ALLOCATE + """
import os, signal, sys
sys.stdout.flush()
pid = os.fork()
if pid == 0:
    print("child default SIGTERM:", signal.getsignal(signal.SIGTERM) == signal.SIG_DFL)
    sys.stdout.flush()
    os._exit(0)
os.waitpid(pid, 0)
""")
        self.assertIn("child default SIGTERM: True", res.stdout)
        side = self.assert_written(res, "exit")
        self.assertEqual(len(res.sidecars()), 1)
        self.assertNotEqual(side["pid"], None)

    def test_a_child_forked_before_cuda_records_itself(self):
        res = self.run_both("""
import os, sys, torch
pid = os.fork()
x = torch.empty(100 if pid == 0 else 200, device="cuda")
if pid == 0:
    sys.exit(0)
os.waitpid(pid, 0)
print("parent done")
""")
        self.assertEqual(len(res.pickles()), 2)
        sizes = []
        for path in res.pickles():
            with open(path, "rb") as f:
                sizes.append(pickle.load(f)["device_traces"][0][1]["size"])
        self.assertEqual(sorted(sizes), [100, 200])


class Api(TorchLevelTest):
    def test_write_snapshot_and_status_from_the_program(self):
        res = self.run_both("""
import sys, torch
x = torch.empty(10, device="cuda")
tl = sys.modules.get("_vramtrace_torch_level")
if tl is not None:
    print(tl.status()["mode"], tl.write_snapshot("mark"), file=sys.stderr)
""")
        self.assertIn("recording True", res.stderr)
        self.assert_written(res, "exit")

    def test_expand_output_path(self):
        sys.path.insert(0, os.path.dirname(BOOT))
        try:
            import torch_level as tl
        finally:
            sys.path.pop(0)
        self.assertEqual(tl.expand_output_path("a.%p.%r.%R%h.%%.%x.%", 42, "node", "", 0),
                         "a.42.0.node.%.%x.%")
        self.assertEqual(tl.expand_output_path("%R%t", 1, "", "5", 0), "rank5.19700101-000000")
        self.assertEqual(tl.expand_output_path("%h", 1), "localhost")
        self.assertEqual(tl.short_version("2.11.0+cu130"), "2.11")
        self.assertEqual(tl.sidecar_path("x.pickle"), "x.pickle.json")

    def test_every_suite_is_registered_in_cmake(self):
        with open(os.path.join(HERE, "CMakeLists.txt")) as f:
            text = f.read()
        listed = set(re.search(r"foreach\(suite(.*?)\)", text, re.S).group(1).split())
        suites = {name for name, value in globals().items() if isinstance(value, type)
                  and issubclass(value, TorchLevelTest) and value is not TorchLevelTest}
        self.assertEqual(listed, suites)


if __name__ == "__main__":
    unittest.main()
