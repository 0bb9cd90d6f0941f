"""GPU memory budgets for PyTorch tests, checked by `vramtrace check` (docs/ci.md).

A pytest plugin in one file. Install it with vramtrace's wheel (docs/install.md) or with
`pip install ./python` from a vramtrace checkout (pytest then loads it by itself, through the
`pytest11` entry point), or put python/ on the Python
path and enable it with `pytest -p pytest_vramtrace` (or `pytest_plugins = ["pytest_vramtrace"]`
in conftest.py). Then:

    import pytest

    @pytest.mark.vramtrace(max_peak_allocated="2GiB", max_ooms=0)
    def test_forward(model, batch):
        model(batch)

    @pytest.mark.vramtrace(no_leaks=True)
    def test_training_does_not_leak(model, loader, vramtrace_step):
        for i, batch in enumerate(loader):
            vramtrace_step()          # a step boundary: growth is fitted over these
            train_step(model, batch)

The marker takes the budgets of `vramtrace check` with '_' for '-' (max_peak_reserved,
max_peak_allocated, max_reserved_ratio, max_ooms, max_retries, no_leaks, max_growth,
max_increase, noise_margin, device) and `budget="path/to/file.budget"` for a budget file kept
beside the tests (a relative path is taken from the test file's directory).

How it measures: PyTorch's own allocator history (torch.cuda.memory._record_memory_history) is
recorded while the test runs and written as JSON lines (the torchtrace layout that `vramtrace`
reads: a header with PyTorch's memory_stats(), then one entry per allocator action, with a
{"action": "mark"} entry per vramtrace_step() call). No LD_PRELOAD is needed. Each test's trace is
kept under --vramtrace-dir (default .vramtrace/) so that a failure can be examined with
`vramtrace summary`, `vramtrace report` or `vramtrace diff`.

Options:
  --vramtrace-bin PATH        the vramtrace command (default: `vramtrace` on PATH)
  --vramtrace-dir DIR         where traces, summaries and baselines go (default .vramtrace)
  --vramtrace-fail-on-increase
                              like pytest-memray's --fail-on-increase: the first run stores each
                              marked test's `vramtrace summary --json` as its baseline; later runs
                              fail when a peak grew by more than --vramtrace-max-increase percent
                              (default 0) plus the noise margin (default 2 MiB)
  --vramtrace-max-increase PCT

Outside pytest the recorder is usable on its own (tests/gpu/train_leak.py does):

    with TorchHistory() as h:
        for step in range(n):
            h.mark()
            train_step()
    h.write("run.torchtrace.jsonl")
"""

import json
import os
import re
import shutil
import subprocess
import time

try:
    import pytest
except ImportError:  # the recorder works without pytest
    pytest = None

_BUDGET_KEYS = (
    "max_peak_reserved", "max_peak_allocated", "max_reserved_ratio", "max_ooms", "max_retries",
    "no_leaks", "max_growth", "max_increase", "noise_margin", "device",
)


class TorchHistory:
    """Records PyTorch's CUDA allocator history between __enter__ and __exit__ and writes it as
    JSON lines. `mark(name)` adds a step boundary at the current time."""

    def __init__(self, max_entries=2_000_000, workload=""):
        self.max_entries = max_entries
        self.workload = workload
        self.marks = []  # (time_us, name)
        self.snapshot = None
        self.stats = {}
        self.total = None

    def __enter__(self):
        import torch

        torch.cuda.synchronize()
        torch.cuda.memory._record_memory_history(max_entries=self.max_entries)
        return self

    def mark(self, name="step"):
        self.marks.append((time.time_ns() // 1000, str(name)))

    def __exit__(self, *exc):
        import torch

        torch.cuda.synchronize()
        self.snapshot = torch.cuda.memory._snapshot()
        self.stats = {k: v for k, v in torch.cuda.memory_stats().items() if isinstance(v, int)}
        self.total = torch.cuda.get_device_properties(torch.cuda.current_device()).total_memory
        torch.cuda.memory._record_memory_history(enabled=None)
        return False

    def write(self, path, device=None):
        """Writes the history of `device` (default: the current one) to `path`."""
        import torch

        if device is None:
            device = torch.cuda.current_device()
        traces = self.snapshot.get("device_traces", []) if self.snapshot else []
        entries = traces[device] if device < len(traces) else []
        header = {
            "kind": "header",
            "source": "python/pytest_vramtrace.py (torch.cuda.memory._snapshot device_traces)",
            "workload": self.workload,
            "conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF", os.environ.get("PYTORCH_ALLOC_CONF", "")),
            "torch": torch.__version__,
            "total": self.total,
            "stats": self.stats,
        }
        events = []
        for e in entries:
            action = e.get("action")
            out = {"action": action, "size": int(e.get("size", 0)), "stream": int(e.get("stream", 0))}
            if action == "oom":
                out["device_free"] = int(e.get("device_free", 0))
            else:
                out["addr"] = int(e.get("addr", 0))
            if "time_us" in e:
                out["time_us"] = int(e["time_us"])
            events.append(out)
        # Marks go in by time; entries without a time keep their order ahead of later marks.
        marks = sorted(self.marks)
        merged, mi = [], 0
        for out in events:
            t = out.get("time_us")
            while t is not None and mi < len(marks) and marks[mi][0] <= t:
                merged.append({"action": "mark", "size": 0, "stream": 0, "time_us": marks[mi][0]})
                mi += 1
            merged.append(out)
        for t, _ in marks[mi:]:
            merged.append({"action": "mark", "size": 0, "stream": 0, "time_us": t})
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        with open(path, "w") as f:
            f.write(json.dumps(header) + "\n")
            for e in merged:
                f.write(json.dumps(e) + "\n")
        return path


def budget_args(budgets, base_dir="."):
    """`vramtrace check` options for a dict of budgets (marker keyword arguments)."""
    args = []
    for key, value in budgets.items():
        if key == "budget":
            path = value if os.path.isabs(value) else os.path.join(base_dir, value)
            args += ["--budget", path]
        elif key == "no_leaks":
            if value:
                args.append("--no-leaks")
        elif key in _BUDGET_KEYS:
            args += ["--" + key.replace("_", "-"), str(value)]
        else:
            raise ValueError("unknown vramtrace budget %r (known: budget, %s)" % (key, ", ".join(_BUDGET_KEYS)))
    return args


def _command(exe):
    """The vramtrace command to run: `exe` when it names one (a path, or a name on PATH), else, for
    the default name only, the command installed beside this module by vramtrace's wheel (found
    without the environment's bin directory on PATH, as when `venv/bin/python -m pytest` runs)."""
    if shutil.which(exe) is not None or os.path.exists(exe):
        return exe
    if exe == "vramtrace":
        try:
            import vramtrace
        except ImportError:
            return None
        getter = getattr(vramtrace, "command_path", None)
        return getter() if getter is not None else None
    return None


if pytest is not None:

    def pytest_addoption(parser):
        g = parser.getgroup("vramtrace", "GPU memory budgets checked by vramtrace")
        g.addoption("--vramtrace-bin", default=os.environ.get("VRAMTRACE", "vramtrace"))
        g.addoption("--vramtrace-dir", default=".vramtrace")
        g.addoption("--vramtrace-fail-on-increase", action="store_true", default=False)
        g.addoption("--vramtrace-max-increase", default="0")

    def pytest_configure(config):
        config.addinivalue_line(
            "markers",
            "vramtrace(**budgets): check the test's GPU memory with `vramtrace check` "
            "(max_peak_allocated='2GiB', no_leaks=True, budget='x.budget', ...)",
        )

    class _Steps:
        """The vramtrace_step fixture: call it once per training step."""

        def __init__(self):
            self.history = None

        def __call__(self, name="step"):
            if self.history is not None:
                self.history.mark(name)

    @pytest.fixture
    def vramtrace_step(request):
        # Set up before the test is called; pytest_runtest_call connects it to the recorder.
        if getattr(request.node, "_vramtrace_steps", None) is None:
            request.node._vramtrace_steps = _Steps()
        return request.node._vramtrace_steps

    def _safe(nodeid):
        return re.sub(r"[^A-Za-z0-9_.-]+", "_", nodeid).strip("_")[:180]

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_call(item):
        marker = item.get_closest_marker("vramtrace")
        if marker is None:
            yield
            return
        import torch

        if not torch.cuda.is_available():
            pytest.skip("vramtrace budgets need a CUDA device")
        steps = getattr(item, "_vramtrace_steps", None)
        if steps is None:
            steps = item._vramtrace_steps = _Steps()
        history = TorchHistory(workload=item.nodeid)
        steps.history = history
        with history:
            outcome = yield
        steps.history = None
        if outcome.excinfo is not None:
            return  # the test failed on its own; report that, not the budget

        cfg = item.config
        out_dir = os.path.abspath(cfg.getoption("--vramtrace-dir"))
        name = _safe(item.nodeid)
        trace = history.write(os.path.join(out_dir, name + ".torchtrace.jsonl"))
        exe = _command(cfg.getoption("--vramtrace-bin"))
        if exe is None:
            pytest.fail("vramtrace not found (--vramtrace-bin or VRAMTRACE): %s" % cfg.getoption("--vramtrace-bin"),
                        pytrace=False)
        args = [exe, "check", trace] + budget_args(dict(marker.kwargs), os.path.dirname(str(item.fspath)))
        if cfg.getoption("--vramtrace-fail-on-increase"):
            baseline = os.path.join(out_dir, "baselines", name + ".summary.json")
            if os.path.exists(baseline):
                args += ["--baseline", baseline, "--max-increase", cfg.getoption("--vramtrace-max-increase")]
            else:
                os.makedirs(os.path.dirname(baseline), exist_ok=True)
                summary = subprocess.run([exe, "summary", "--json", trace], capture_output=True, text=True)
                if summary.returncode == 0:
                    with open(baseline, "w") as f:
                        f.write(summary.stdout)
        if len(args) == 3:
            return  # a bare marker without budgets and no baseline yet: only the trace is kept
        r = subprocess.run(args, capture_output=True, text=True)
        if r.returncode == 1:
            pytest.fail("GPU memory budget exceeded (trace: %s)\n%s" % (trace, r.stdout), pytrace=False)
        elif r.returncode != 0:
            pytest.fail("vramtrace check could not judge the run (exit %d)\n%s%s" % (r.returncode, r.stdout, r.stderr),
                        pytrace=False)
