"""PyTorch's own tensor-level allocator history, recorded in every run of a Python program.

`vramtrace run` preloads libvramtrace.so, which sees the CUDA calls of PyTorch's caching
allocator: its *segments*, not its tensors. This module records the tensor level beside it, from
inside the program, with PyTorch's allocator left in charge and the program unmodified. It is
loaded at start-up by `_boot/sitecustomize.py` (`vramtrace run` puts `_boot` on PYTHONPATH and
sets VRAMTRACE_TORCH_OUT) and does this:

1. A `sys.meta_path` entry waits for `import torch` (nothing else is imported; a program that
   never imports torch pays one string comparison per import).
2. When torch has finished importing, `torch.cuda._lazy_init` is wrapped. PyTorch calls it by
   attribute lookup from C++ (torch::utils::device_lazy_init: `PyObject_CallMethod(torch.cuda,
   "_lazy_init")`) and from Python, so the wrapper sees the first CUDA initialisation whatever
   triggered it. Nothing here initialises CUDA: doing so at import would change the program
   (fork-based workers could no longer use CUDA).
3. Right after the first successful initialisation, `torch.cuda.memory._record_memory_history`
   is turned on (the stacks of allocations, Python frames; VRAMTRACE_TORCH_CONTEXT=all adds
   frees') and an OOM observer is attached
   (`torch._C._cuda_attach_out_of_memory_observer`, called inside the allocator before the
   OutOfMemoryError is raised). Both apply to every device: the native allocator creates all its
   per-device allocators at initialisation.
4. `torch.cuda.memory._snapshot()` is written as a pickle (protocol 4, what pytorch.org/memory_viz
   reads) with a JSON sidecar at each OOM, and once at exit: normal exit, sys.exit, an uncaught
   exception, os._exit, SIGTERM and SIGINT. After SIGKILL nothing is written.

Files (docs/tensor-level.md has the fields): the pickle at the expanded VRAMTRACE_TORCH_OUT, the
sidecar at that name + ".json". Both are written to a temporary file in the same directory and
renamed, so a reader never sees half a file.

Environment:
    VRAMTRACE_TORCH_OUT          output name; `%p` pid, `%h` host, `%r` rank, `%R` "rank<N>." when
                                 a rank is set, `%t` start time (UTC, YYYYMMDD-HHMMSS), `%%` a `%`
                                 (the placeholders of VRAMTRACE_OUTPUT). Unset or empty: off.
    VRAMTRACE_TORCH_MAX_ENTRIES  history ring size per device (default 1,000,000 entries).
    VRAMTRACE_TORCH_CONTEXT      whose Python stacks are kept: "alloc" (default: every allocation's,
                                 which is what call sites need), "all" (frees' too, about 5 %
                                 more step time for GPT-2 training on the H200) or "none" (the
                                 history without stacks: no call sites, no cost to measure).
    VRAMTRACE_TORCH_SIGNALS      "0" leaves SIGTERM/SIGINT alone (default: handle them when the
                                 program's handler is the default one).

Never raises into the program: every failure is one stderr line starting with "vramtrace: " and
the program goes on. Thread safety: writes are serialised by one lock; the OOM observer may run
on any thread (PyTorch calls it with the GIL held and its allocator lock released).
"""
import os
import sys

ENV_OUT = "VRAMTRACE_TORCH_OUT"
ENV_MAX_ENTRIES = "VRAMTRACE_TORCH_MAX_ENTRIES"
ENV_SIGNALS = "VRAMTRACE_TORCH_SIGNALS"
ENV_CONTEXT = "VRAMTRACE_TORCH_CONTEXT"
# Stacks of allocations only: a stack per free as well doubles the stack captures, which cost
# about 5 % of a GPT-2 124M training step on the H200 (tests/gpu/history_cost.py,
# docs/benchmarks.md), for a figure no report of ours needs.
DEFAULT_CONTEXT = "alloc"

# What one history entry costs (PyTorch 2.11, H200 machine, one run each, docs/tensor-level.md):
# 328 bytes of host memory with 7 Python frames on the stack, 925 bytes with 42 (a TraceEntry plus
# 16 bytes a frame); about 1 us more per allocation or free; _snapshot() converts ~5 us an entry
# into ~0.75-1.3 KB of transient Python objects, and the pickle takes ~70-110 bytes an entry. So
# the default ring holds 0.3-0.9 GB once full and its exit snapshot takes ~5 s plus ~1 s to
# pickle; GPT-2 124M training makes ~4,500 entries a step, so it keeps the last ~220 steps.
# Ten times that would hold 3-9 GB, take a minute at exit and give a pickle past the ~1 GB
# memory_viz can open.
DEFAULT_MAX_ENTRIES = 1_000_000
# memory_viz's JavaScript unpickler reads protocols 2 to 4 only.
PICKLE_PROTOCOL = 4
SIDECAR_FORMAT = "vramtrace-torch-sidecar"
SIDECAR_VERSION = 1
# A program that retries after OOMs (cuDNN algorithm fallback, batch-size search) can OOM often.
MAX_OOM_RECORDS = 1000
# The name under which sitecustomize registers this file; a second copy (imported as
# vramtrace.torch_level from the installed package) forwards its public calls to that one.
SHARED_MODULE_NAME = "_vramtrace_torch_level"

_PREFIX = "vramtrace: "
_RANK_VARIABLES = ("RANK", "LOCAL_RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID")


# Reasons of _missing_api for a torch that cannot use a GPU at all: nothing is written for it.
_NO_GPU_REASONS = ("no torch.cuda", "built without CUDA")


def _say(message):
    """Prints one line to stderr; never raises (stderr may be closed or None)."""
    try:
        sys.stderr.write(_PREFIX + message + "\n")
        sys.stderr.flush()
    except Exception:  # noqa: BLE001 - nothing may reach the program
        pass


def _describe(exc):
    text = str(exc).strip().splitlines()
    return type(exc).__name__ + (": " + text[0] if text else "")


def rank_from_environment(environ):
    """The process's rank as the trace writer reads it (trace/src/output.cpp): '' when none."""
    for name in _RANK_VARIABLES:
        value = environ.get(name, "")
        if value:
            return value
    return ""


def expand_output_path(pattern, pid, host="", rank="", start_time=0.0):
    """Expands VRAMTRACE_TORCH_OUT's placeholders exactly as the shim expands VRAMTRACE_OUTPUT.

    `%p` pid, `%h` host ("localhost" when empty), `%r` rank ("0" when empty), `%R` "rank<N>." when
    a rank is set and nothing otherwise, `%t` start_time (Unix seconds) as UTC YYYYMMDD-HHMMSS,
    `%%` a `%`; any other `%x` and a trailing `%` stay as they are. Pure function.
    """
    out = []
    i, n = 0, len(pattern)
    while i < n:
        c = pattern[i]
        if c != "%" or i + 1 == n:
            out.append(c)
            i += 1
            continue
        k = pattern[i + 1]
        i += 2
        if k == "p":
            out.append(str(pid))
        elif k == "h":
            out.append(host or "localhost")
        elif k == "r":
            out.append(rank or "0")
        elif k == "R":
            out.append("rank" + rank + "." if rank else "")
        elif k == "t":
            import time

            out.append(time.strftime("%Y%m%d-%H%M%S", time.gmtime(start_time)))
        elif k == "%":
            out.append("%")
        else:
            out.append("%" + k)
    return "".join(out)


def sidecar_path(snapshot_path):
    """The JSON sidecar's name for a snapshot pickle's name."""
    return snapshot_path + ".json"


def short_version(version):
    """'2.11.0+cu130' -> '2.11'."""
    return ".".join(str(version).split("+")[0].split(".")[:2])


class _ChainedLoader:
    """Stands in for torch's loader during `import torch`, then calls a hook after it ran.

    The real loader is put back on the spec and the module before torch's code runs, so
    torch.__loader__ and torch.__spec__.loader are what they would have been.
    """

    def __init__(self, loader, spec, after_exec):
        self._loader = loader
        self._spec = spec
        self._after_exec = after_exec

    def __getattr__(self, name):
        return getattr(self._loader, name)

    def create_module(self, spec):
        create = getattr(self._loader, "create_module", None)
        return create(spec) if create is not None else None

    def exec_module(self, module):
        try:
            self._spec.loader = self._loader
            if getattr(module, "__loader__", None) is self:
                module.__loader__ = self._loader
        except Exception:  # noqa: BLE001
            pass
        self._loader.exec_module(module)  # torch's own errors propagate unchanged
        self._after_exec(module)  # never raises


class _TorchImportHook:
    """A sys.meta_path entry that calls `after_import(torch)` once `import torch` has finished."""

    def __init__(self, after_import):
        self._after_import = after_import
        self._busy = False  # the import lock of "torch" serialises find_spec("torch")

    def find_spec(self, fullname, path=None, target=None):
        if fullname != "torch" or self._busy:
            return None
        try:
            self._busy = True
            try:
                spec = None
                for finder in list(sys.meta_path):
                    find = getattr(finder, "find_spec", None)
                    if finder is self or find is None:
                        continue
                    spec = find(fullname, path, target)
                    if spec is not None:
                        break
            finally:
                self._busy = False
            if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
                return None  # let importlib search as it would have
            spec.loader = _ChainedLoader(spec.loader, spec, self._after_import)
            return spec
        except Exception:  # noqa: BLE001 - the normal import then runs and reports its own errors
            return None

    def remove(self):
        try:
            sys.meta_path.remove(self)
        except ValueError:
            pass


class _Recorder:
    """The state of one process's tensor-level recording (one instance per process)."""

    def __init__(self):
        self.installed = False
        # off -> waiting_for_torch -> unavailable (torch cannot be recorded)
        #                          -> waiting_for_cuda -> starting -> recording | no_history
        self.mode = "off"
        self.reason = None
        self.template = None
        self.max_entries = DEFAULT_MAX_ENTRIES
        self.context = DEFAULT_CONTEXT
        self.handle_signals = True
        self.pid = os.getpid()
        self.start_time = 0.0
        self.rank = ""
        self.host = ""
        self.torch = None
        self.version = "?"
        self.api = None
        self.oom_observer = False
        self.signals = []
        self.started_at = None
        self.allocator = {}
        self.ooms = []
        self.ooms_dropped = 0
        self.exit_written = False
        self.inert = False  # a forked child of a process that was recording: CUDA is not usable
        self._hook = None
        self._lock = None
        self._write_lock = None
        self._told = set()
        self._owned = set()
        self._tmp_counter = 0
        self._orig_os_exit = None
        self._prev_handlers = {}
        self._lazy_init_pair = None
        self._snapshot_s = None

    # --- set-up ----------------------------------------------------------------------------

    def install(self, environ):
        if self.installed:
            return True
        template = environ.get(ENV_OUT, "")
        if not template:
            return False
        import time

        self.installed = True
        self.template = os.path.abspath(template)  # the program may chdir later
        self.start_time = time.time()
        self.rank = rank_from_environment(environ)
        try:
            self.host = os.uname().nodename  # gethostname(), without importing socket
        except (AttributeError, OSError):
            self.host = ""
        raw = environ.get(ENV_MAX_ENTRIES, "").strip()
        if raw:
            try:
                value = int(raw.replace("_", ""))
                if value < 1:
                    raise ValueError(raw)
                self.max_entries = value
            except ValueError:
                _say("%s=%r is not a positive whole number; using %d"
                     % (ENV_MAX_ENTRIES, raw, DEFAULT_MAX_ENTRIES))
        raw = environ.get(ENV_CONTEXT, "").strip()
        if raw in ("alloc", "all", "none"):
            self.context = raw
        elif raw:
            _say("%s=%r is not alloc, all or none; using %s" % (ENV_CONTEXT, raw, DEFAULT_CONTEXT))
        self.handle_signals = environ.get(ENV_SIGNALS, "1").strip() != "0"
        self.mode = "waiting_for_torch"
        torch = sys.modules.get("torch")
        if torch is not None and getattr(torch, "__spec__", None) is not None:
            self._after_torch_import(torch)  # a .pth file imported it before sitecustomize
        else:
            self._hook = _TorchImportHook(self._after_torch_import)
            sys.meta_path.insert(0, self._hook)
        return True

    def _after_torch_import(self, torch):
        try:
            if self._hook is not None:
                self._hook.remove()
                self._hook = None
            if self.mode != "waiting_for_torch":
                return
            import threading

            self._lock = threading.Lock()
            self._write_lock = threading.RLock()
            self.torch = torch
            self.version = short_version(getattr(torch, "__version__", "?"))
            reason = self._missing_api(torch)
            if reason:
                self._unavailable_at_import(reason)
                return
            self.mode = "waiting_for_cuda"
            os.register_at_fork(after_in_child=self._after_fork_in_child)
            self._wrap_lazy_init(torch)
            if torch.cuda.is_initialized():  # a flag; does not initialise anything
                self._after_lazy_init()
        except Exception as exc:  # noqa: BLE001
            _say("tensor-level recording could not be set up (%s); the trace has device level only"
                 % _describe(exc))

    @staticmethod
    def _missing_api(torch):
        """Why this torch cannot be recorded, from attribute checks only ('' if it can)."""
        cuda = getattr(torch, "cuda", None)
        if cuda is None:
            return "no torch.cuda"
        compiled = getattr(cuda, "_is_compiled", None)
        c = getattr(torch, "_C", None)
        is_compiled = compiled() if callable(compiled) else hasattr(c, "_cuda_getDeviceCount")
        if not is_compiled:
            return "built without CUDA"
        for owner, name in ((cuda, "_lazy_init"), (cuda, "is_initialized")):
            if not callable(getattr(owner, name, None)):
                return "no torch.cuda.%s" % name
        memory = getattr(cuda, "memory", None)
        for name in ("_record_memory_history", "_snapshot"):
            if not callable(getattr(memory, name, None)):
                return "no torch.cuda.memory.%s" % name
        return ""

    def _unavailable_at_import(self, reason):
        import atexit

        _preload_exit_path_modules()
        self.mode = "unavailable"
        self.reason = reason
        _say("PyTorch %s: tensor-level recording unavailable (%s); the trace has device level only"
             % (self.version, reason))
        os.register_at_fork(after_in_child=self._after_fork_in_child)
        if reason in _NO_GPU_REASONS:
            return  # no device memory to speak of: the line above is all, no file
        atexit.register(self._at_exit)  # the sidecar says why; no pickle

    def _wrap_lazy_init(self, torch):
        import functools

        original = torch.cuda._lazy_init
        if getattr(original, "_vramtrace_wrapped", False):
            return
        recorder = self

        @functools.wraps(original)
        def _lazy_init(*args, **kwargs):
            result = original(*args, **kwargs)
            if recorder.mode == "waiting_for_cuda":
                recorder._after_lazy_init()
            return result

        _lazy_init._vramtrace_wrapped = True
        self._lazy_init_pair = (original, _lazy_init)
        _replace_in_torch_modules("_lazy_init", original, _lazy_init)

    def _unwrap_lazy_init(self):
        """Puts the original back once recording started: torch.cuda calls _lazy_init often."""
        pair = self._lazy_init_pair
        if pair is not None:
            self._lazy_init_pair = None
            _replace_in_torch_modules("_lazy_init", pair[1], pair[0])

    def _after_lazy_init(self):
        try:
            if not self.torch.cuda.is_initialized():
                return  # a re-entrant call during initialisation, or initialisation failed
            with self._lock:
                if self.mode != "waiting_for_cuda":
                    return
                self.mode = "starting"
            self._unwrap_lazy_init()
            self._start()
        except Exception as exc:  # noqa: BLE001
            if self.mode == "starting":
                self.mode = "no_history"
                self.reason = _describe(exc)
            _say("tensor-level recording could not start (%s); the trace has device level only"
                 % _describe(exc))

    def _start(self):
        import time

        torch = self.torch
        self.pid = os.getpid()
        self.started_at = time.time()
        self.allocator = self._allocator_settings()
        self._one_cache()
        backend = self.allocator.get("backend")
        if backend not in (None, "native"):
            self.mode = "no_history"
            self.reason = "allocator backend %s" % backend
            _say("PyTorch %s: tensor-level recording unavailable (allocator backend %s: PyTorch "
                 "records its history for the native backend only); the trace has device level only"
                 % (self.version, backend))
        else:
            try:
                self.api = self._enable_history(torch.cuda.memory._record_memory_history)
                self.mode = "recording"
            except Exception as exc:  # noqa: BLE001
                self.mode = "no_history"
                self.reason = "_record_memory_history failed: " + _describe(exc)
                _say("PyTorch %s: tensor-level recording unavailable (%s); the trace has device "
                     "level only" % (self.version, self.reason))
            if self.mode == "recording":
                self._attach_oom_observer()
        self._install_exit_hooks()
        self._devices(with_mem_info=False)  # warms device_count's caches: exit imports nothing
        # The sidecar alone, now: a process killed before any write (SIGKILL, a crash) leaves it,
        # so the reports can say the tensor level was on and all of it is missing. Each later
        # write replaces it.
        self._write("started", final=False, with_snapshot=False)

    def _enable_history(self, record):
        """Turns the history on with whichever signature this torch has; returns "new" or "legacy".

        PyTorch >= 2.1: record(enabled="all", context=C, stacks="python", max_entries=N), C being
        self.context ("alloc" or "all")
        (a dispatcher that sends a bool `enabled` to the legacy form). PyTorch 2.0:
        record(enabled: bool, record_context=True, trace_alloc_max_entries=1,
        trace_alloc_record_context=False, ...), which has no free-side stacks.
        """
        form = None
        try:
            import inspect

            params = inspect.signature(record).parameters
            if "context" in params or "stacks" in params or "max_entries" in params:
                form = "new"
            elif "trace_alloc_max_entries" in params:
                form = "legacy"
        except (TypeError, ValueError):
            pass
        if form != "legacy":
            try:
                context = None if self.context == "none" else self.context
                record(enabled="all", context=context, stacks="python", max_entries=self.max_entries)
                return "new"
            except TypeError:
                if form == "new":
                    raise
        stacks = self.context != "none"
        record(True, record_context=stacks, trace_alloc_max_entries=self.max_entries,
               trace_alloc_record_context=stacks)
        return "legacy"

    def _one_cache(self):
        """Asks the shim to forward device allocations when PyTorch's caching allocator is on.

        PyTorch's allocator is then in charge of reuse, and a second cache in the shim below it
        would change what a capped run does (the segments PyTorch releases at an OOM would stay
        cached in the shim, counted as free, reusable only at their own sizes). With
        PYTORCH_NO_CUDA_MEMORY_CACHING set, PyTorch's cache is off (or the variable means what
        this version makes of it), and the shim's cache stays as the user chose. Records the
        outcome in the sidecar's allocator settings ("shim_forwards").
        """
        forwards = False
        if self.allocator["env"].get("PYTORCH_NO_CUDA_MEMORY_CACHING") is None:
            try:
                import ctypes

                fn = getattr(ctypes.CDLL(None), "vramtrace_forward_allocations", None)
                if fn is not None:
                    fn.restype = None
                    fn.argtypes = []
                    fn()
                    forwards = True
            except Exception:  # noqa: BLE001 - without the shim (or its symbol) nothing changes
                forwards = False
        self.allocator["shim_forwards"] = forwards

    def _allocator_settings(self):
        torch = self.torch
        settings = {
            "env": {name: os.environ.get(name) for name in (
                "PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF", "PYTORCH_NO_CUDA_MEMORY_CACHING")},
        }
        memory = torch.cuda.memory
        try:
            backend = getattr(memory, "get_allocator_backend", None)
            settings["backend"] = backend() if backend is not None else "native"
        except Exception as exc:  # noqa: BLE001
            settings["backend"] = None
            settings["backend_error"] = _describe(exc)
        try:
            current = getattr(memory, "_get_current_allocator", None)
            if current is not None:
                inner = current()
                inner = inner.allocator() if hasattr(inner, "allocator") else inner
                settings["current_allocator"] = type(inner).__name__
        except Exception:  # noqa: BLE001
            pass
        if settings["env"]["PYTORCH_NO_CUDA_MEMORY_CACHING"] is not None:
            settings["note"] = ("PYTORCH_NO_CUDA_MEMORY_CACHING is set: PyTorch bypasses its caching "
                                "allocator, so its history stays empty; the device level is the "
                                "tensor level")
        return settings

    def _attach_oom_observer(self):
        attach = getattr(getattr(self.torch, "_C", None), "_cuda_attach_out_of_memory_observer", None)
        if attach is None:
            return
        recorder = self

        def vramtrace_oom_observer(device, alloc, device_allocated, device_free):
            try:
                recorder._on_oom(device, alloc, device_allocated, device_free)
            except Exception:  # noqa: BLE001 - an exception here would replace the OOM error
                pass

        attach(vramtrace_oom_observer)
        self.oom_observer = True

    def _install_exit_hooks(self):
        import atexit
        import signal
        import threading

        _preload_exit_path_modules()
        atexit.register(self._at_exit)
        if self._orig_os_exit is None:
            original = os._exit
            self._orig_os_exit = original
            recorder = self

            def _exit(*args, **kwargs):
                recorder._before_os_exit()
                return original(*args, **kwargs)

            _exit.__doc__ = original.__doc__
            _exit.__wrapped__ = original
            os._exit = _exit
        if not self.handle_signals:
            return
        if threading.current_thread() is not threading.main_thread():
            return  # signal.signal works on the main thread only; atexit still covers SIGINT
        # Python's own SIGINT handler raises KeyboardInterrupt, which ends in atexit: handled there.
        for name in ("SIGTERM", "SIGINT"):
            signum = getattr(signal, name, None)
            if signum is None:
                continue
            try:
                if signal.getsignal(signum) is signal.SIG_DFL:
                    self._prev_handlers[signum] = signal.SIG_DFL
                    signal.signal(signum, self._on_signal)
                    self.signals.append(name)
            except (ValueError, OSError):
                pass

    # --- events ------------------------------------------------------------------------------

    def _after_fork_in_child(self):
        if self.mode in ("recording", "no_history", "unavailable", "starting"):
            # CUDA cannot be used in a child forked after initialisation; the parent writes.
            self.inert = True
            try:
                import signal

                for signum, previous in self._prev_handlers.items():
                    if signal.getsignal(signum) == self._on_signal:
                        signal.signal(signum, previous)
            except Exception:  # noqa: BLE001
                pass
        else:
            import time

            self.pid = os.getpid()  # a child forked before CUDA: it may initialise CUDA itself
            self.start_time = time.time()

    def _on_oom(self, device, alloc, device_allocated, device_free):
        if not self._active():
            return
        import time

        record = {
            "time": time.time(),
            "device": device,
            "alloc_bytes": alloc,
            # PyTorch names this argument device_allocated; the native allocator passes the
            # device's total memory, or the cap of set_per_process_memory_fraction.
            "device_allocated": device_allocated,
            "device_free": device_free,
            "stats": self._memory_stats(device),
        }
        with self._write_lock:
            if len(self.ooms) < MAX_OOM_RECORDS:
                self.ooms.append(record)
            else:
                self.ooms_dropped += 1
        self._write("oom", final=False)

    def _at_exit(self):
        try:
            self._write("exit", final=True)
        except Exception as exc:  # noqa: BLE001 - atexit would print a traceback
            _say("writing the PyTorch snapshot at exit failed (%s)" % _describe(exc))

    def _before_os_exit(self):
        try:
            self._write("os._exit", final=True)
        except Exception as exc:  # noqa: BLE001
            _say("writing the PyTorch snapshot at os._exit failed (%s)" % _describe(exc))

    def _on_signal(self, signum, frame):
        import signal

        try:
            name = signal.Signals(signum).name
        except Exception:  # noqa: BLE001
            name = str(signum)
        try:
            self._write("signal " + name, final=True)
        except Exception:  # noqa: BLE001
            pass
        # Then what the default disposition would have done: die of the signal.
        previous = self._prev_handlers.get(signum, signal.SIG_DFL)
        try:
            signal.signal(signum, previous)
            if previous is signal.SIG_DFL:
                os.kill(os.getpid(), signum)
            elif callable(previous):
                previous(signum, frame)
        except Exception:  # noqa: BLE001
            (self._orig_os_exit or os._exit)(128 + signum)

    # --- writing -----------------------------------------------------------------------------

    def _active(self):
        return (not self.inert and os.getpid() == self.pid
                and self.mode in ("recording", "no_history", "unavailable"))

    def output_path(self):
        return expand_output_path(self.template, os.getpid(), self.host, self.rank, self.start_time)

    def write(self, reason, final):
        return self._write(reason, final)

    def _write(self, reason, final, with_snapshot=True):
        """Writes the snapshot (when recording and with_snapshot) and the sidecar; True if all was
        written. Without the snapshot the sidecar still names the pickle the later writes make."""
        if not self._active():
            return False
        import time

        with self._write_lock:
            if self.exit_written and final:
                return False
            if final:
                self.exit_written = True
            path = self.output_path()
            snapshot = None
            snapshot_error = None
            self._snapshot_s = None
            if self.mode == "recording" and with_snapshot:
                try:
                    t0 = time.perf_counter()
                    with _inductor_lookup_hidden(self.torch):
                        snapshot = self.torch.cuda.memory._snapshot()
                    self._snapshot_s = time.perf_counter() - t0
                except Exception as exc:  # noqa: BLE001
                    snapshot_error = _describe(exc)
                    self._tell("torch.cuda.memory._snapshot() failed (%s)" % snapshot_error)
            if snapshot is not None:
                import pickle

                protocol = min(PICKLE_PROTOCOL, pickle.HIGHEST_PROTOCOL)
                if not self._atomic_write(path, lambda f: pickle.dump(snapshot, f, protocol=protocol)):
                    return False  # no sidecar beside a pickle that is not this one
            if not with_snapshot and path not in self._owned and os.path.lexists(path):
                return False  # another's pickle: the later writes say so, once
            named = snapshot is not None or (not with_snapshot and self.mode == "recording")
            sidecar = self._sidecar(snapshot, reason, final, path if named else None, snapshot_error,
                                    with_devices=with_snapshot)
            import json

            text = json.dumps(sidecar, indent=1, default=_json_default).encode("utf-8")
            # The start's write is quiet: where it fails the later writes fail too, and say so.
            return self._atomic_write(sidecar_path(path), lambda f: f.write(text), quiet=not with_snapshot)

    def _atomic_write(self, path, write_to, quiet=False):
        if path not in self._owned and os.path.lexists(path):
            if not quiet:
                self._tell("%s exists and is not this process's: not overwritten (give "
                           "VRAMTRACE_TORCH_OUT a %%p or %%t)" % path)
            return False
        self._tmp_counter += 1
        tmp = "%s.tmp-%d-%d" % (path, os.getpid(), self._tmp_counter)
        try:
            directory = os.path.dirname(path)
            if directory:
                os.makedirs(directory, exist_ok=True)
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) \
                | getattr(os, "O_CLOEXEC", 0)
            fd = os.open(tmp, flags, 0o600)
            with os.fdopen(fd, "wb") as f:
                write_to(f)
            os.replace(tmp, path)
            self._owned.add(path)
            return True
        except Exception as exc:  # noqa: BLE001
            try:
                os.unlink(tmp)
            except OSError:
                pass
            if not quiet:
                self._tell("could not write %s (%s)" % (path, _describe(exc)))
            return False

    def _tell(self, message):
        if message not in self._told:
            self._told.add(message)
            _say(message)

    def _memory_stats(self, device):
        try:
            return dict(self.torch.cuda.memory_stats(device))
        except Exception:  # noqa: BLE001
            return None

    def _devices(self, with_mem_info):
        """memory_stats (and mem_get_info) of each device this process initialised."""
        torch = self.torch
        try:
            count = int(torch.cuda.device_count())
        except Exception:  # noqa: BLE001
            count = 1
        has_context = getattr(getattr(torch, "_C", None), "_cuda_hasPrimaryContext", None)
        devices = []
        for d in range(count):
            context = None
            if has_context is not None:
                try:
                    context = bool(has_context(d))
                except Exception:  # noqa: BLE001
                    context = None
            stats = self._memory_stats(d)
            used = bool(stats) and (stats.get("allocation.all.allocated", 0) > 0
                                    or stats.get("segment.all.allocated", 0) > 0)
            if not context and not used:
                continue
            entry = {"device": d, "primary_context": context, "memory_stats": stats}
            if with_mem_info:
                # cudaMemGetInfo on a device without a context would create one (~500 MB).
                entry["mem_get_info"] = None
                if context or (context is None and used):
                    try:
                        entry["mem_get_info"] = list(torch.cuda.mem_get_info(d))
                    except Exception as exc:  # noqa: BLE001
                        entry["mem_get_info_error"] = _describe(exc)
            devices.append(entry)
        return devices

    def _history(self, snapshot):
        if snapshot is None:
            return None
        per_device = []
        for d, trace in enumerate(snapshot.get("device_traces") or []):
            actions = {}
            for entry in trace:
                action = entry.get("action") if isinstance(entry, dict) else None
                actions[action] = actions.get(action, 0) + 1
            per_device.append({"device": d, "entries": len(trace),
                               "wrapped": len(trace) >= self.max_entries, "actions": actions})
        return {
            "entries": sum(d["entries"] for d in per_device),
            "wrapped": any(d["wrapped"] for d in per_device),
            "max_entries": self.max_entries,
            "devices": per_device,
        }

    def _sidecar(self, snapshot, reason, final, snapshot_path, snapshot_error, with_devices=True):
        import time

        torch = self.torch
        state = {"recording": "on", "no_history": "unavailable", "unavailable": "unavailable"}
        recording = {
            "state": state.get(self.mode, self.mode),
            "reason": self.reason,
            "started_at": self.started_at,
            "api": self.api,
            "enabled": "all" if self.api else None,
            "context": {"new": self.context, "legacy": "none" if self.context == "none" else "alloc"}.get(self.api),
            "stacks": "python" if self.api and self.context != "none" else None,
            "max_entries": self.max_entries,
            "oom_observer": self.oom_observer,
            "signals": list(self.signals),
        }
        allocator = dict(self.allocator)
        if snapshot is not None and isinstance(snapshot.get("allocator_settings"), dict):
            allocator["snapshot_settings"] = snapshot["allocator_settings"]
        devices = None
        if with_devices and self.mode in ("recording", "no_history"):
            devices = self._devices(with_mem_info=final)
        return {
            "format": SIDECAR_FORMAT,
            "version": SIDECAR_VERSION,
            "pid": os.getpid(),
            "ppid": os.getppid(),
            "rank": self.rank or None,
            "host": self.host or None,
            "argv": list(getattr(sys, "argv", [])),
            "python": "%d.%d.%d" % tuple(sys.version_info[:3]),
            "torch_version": str(getattr(torch, "__version__", "")) or None,
            "torch_cuda": getattr(getattr(torch, "version", None), "cuda", None),
            "reason": reason,
            "final": final,
            "written_at": time.time(),
            "snapshot": os.path.basename(snapshot_path) if snapshot_path else None,
            "snapshot_error": snapshot_error,
            "snapshot_s": self._snapshot_s,
            "recording": recording,
            "allocator": allocator,
            "history": self._history(snapshot),
            "devices": devices,
            "ooms": list(self.ooms),
            "ooms_dropped": self.ooms_dropped,
        }

    def status(self):
        return {
            "installed": self.installed,
            "mode": self.mode,
            "reason": self.reason,
            "api": self.api,
            "max_entries": self.max_entries,
            "oom_observer": self.oom_observer,
            "signals": list(self.signals),
            "ooms": len(self.ooms) + self.ooms_dropped,
            "output": self.output_path() if self.template else None,
        }


class _inductor_lookup_hidden:
    """Keeps torch._snapshot() from importing torch._inductor in a program that never did.

    To map inductor-generated frames, PyTorch's symbolizer (torch/csrc/profiler/python/
    combined_traceback.cpp) asks `hasattr(torch, "_inductor")` and then for `codecache` in it;
    torch's module __getattr__ imports torch._inductor lazily, so the first snapshot of a program
    that never compiled anything imports inductor, dynamo and sympy (883 modules, 4.2 s measured
    with PyTorch 2.11 on the H200 machine), registers their atexit handlers, and, at exit, turns
    the exit status of an interrupted program from -SIGINT into 1 (see
    _preload_exit_path_modules). Without inductor no frame can be inductor's, so for the duration
    of the call torch._inductor is a stand-in that has no `codecache` for this thread and forwards
    everything to the real module (importing it) for any other thread. Nothing is changed when
    torch._inductor is already imported or already set.
    """

    def __init__(self, torch):
        self._torch = torch
        self._stand_in = None

    def __enter__(self):
        try:
            namespace = self._torch.__dict__
            if "torch._inductor" not in sys.modules and "_inductor" not in namespace:
                self._stand_in = _InductorStandIn(_thread_ident())
                namespace["_inductor"] = self._stand_in
        except Exception:  # noqa: BLE001
            self._stand_in = None
        return self

    def __exit__(self, *exc):
        try:
            namespace = self._torch.__dict__
            if self._stand_in is not None and namespace.get("_inductor") is self._stand_in:
                del namespace["_inductor"]
        except Exception:  # noqa: BLE001
            pass
        return False


def _thread_ident():
    import threading

    return threading.get_ident()


def _make_inductor_stand_in_type():
    import types

    class InductorStandIn(types.ModuleType):
        def __init__(self, owner):
            super().__init__("torch._inductor")
            self.__dict__["_vramtrace_owner"] = owner

        def __getattr__(self, name):
            if _thread_ident() == self.__dict__["_vramtrace_owner"]:
                raise AttributeError(name)
            import importlib

            return getattr(importlib.import_module("torch._inductor"), name)

    return InductorStandIn


def _InductorStandIn(owner):  # noqa: N802 - a class made on first use (types stays unimported)
    global _INDUCTOR_STAND_IN_TYPE
    if _INDUCTOR_STAND_IN_TYPE is None:
        _INDUCTOR_STAND_IN_TYPE = _make_inductor_stand_in_type()
    return _INDUCTOR_STAND_IN_TYPE(owner)


_INDUCTOR_STAND_IN_TYPE = None


def _preload_exit_path_modules():
    """Imports now every module the writing path needs, so that exit imports nothing.

    CPython exits an interrupted program by SIGINT (status -2) only if nothing ran exec() on a
    string between the uncaught KeyboardInterrupt and the end: PyRun_String clears the flag
    (`_Py_UnhandledKeyboardInterrupt`), and collections.namedtuple execs a string, so importing
    platform or inspect in an atexit handler turns -2 into 1. Modules already imported run nothing.
    """
    import importlib  # noqa: F401
    import json  # noqa: F401
    import pickle  # noqa: F401
    import signal  # noqa: F401
    import time  # noqa: F401
    import types  # noqa: F401

    _InductorStandIn(0)  # its class, made now


def _replace_in_torch_modules(name, old, new):
    """Rebinds `name` from `old` to `new` in torch and every loaded torch.* module.

    torch.cuda's own functions look `_lazy_init` up in its globals; torch.cuda.memory and others
    bound it at import (`from . import _lazy_init`), so it is replaced wherever it is bound.
    """
    import types

    for module_name, module in list(sys.modules.items()):
        if (module_name == "torch" or module_name.startswith("torch.")) \
                and isinstance(module, types.ModuleType):
            namespace = module.__dict__
            if namespace.get(name) is old:
                namespace[name] = new


def _json_default(value):
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    return str(value)


_recorder = _Recorder()


def _shared():
    """The module sitecustomize loaded, if any, else this one: one recorder per process."""
    module = sys.modules.get(SHARED_MODULE_NAME)
    return module if module is not None else sys.modules[__name__]


def install(environ=None):
    """Sets up the recording if VRAMTRACE_TORCH_OUT is set; returns whether it is set up.

    Called by _boot/sitecustomize.py at start-up. Imports nothing heavy and never torch; the work
    starts when the program imports torch. Idempotent. Never raises for a bad environment (a
    bad VRAMTRACE_TORCH_MAX_ENTRIES is one stderr line and the default).
    """
    module = _shared()
    return module._recorder.install(os.environ if environ is None else environ)


def write_snapshot(reason="manual"):
    """Writes the snapshot and sidecar now (not as the exit write); True if both were written.

    Does nothing (False) before CUDA was initialised, in a forked child, or when not installed.
    Safe from any thread. Takes as long as `torch.cuda.memory._snapshot()` (seconds for a full
    ring of a million entries).
    """
    try:
        return _shared()._recorder.write(reason, final=False)
    except Exception as exc:  # noqa: BLE001
        _say("writing the PyTorch snapshot failed (%s)" % _describe(exc))
        return False


def status():
    """A dict describing the recording: mode, reason, api, max_entries, output name, ..."""
    return _shared()._recorder.status()
