"""vramtrace's start-up hook for Python programs run under `vramtrace run`.

`vramtrace run` puts this directory first on PYTHONPATH, so Python's site module imports this file
at start-up as `sitecustomize` (the injection ddtrace-run and austin use). It then:

- if VRAMTRACE_TORCH_OUT is set, loads ../torch_level.py (found next to this file, so this
  directory alone on PYTHONPATH is enough) and calls its install(), which waits for `import torch`
  and imports nothing heavy itself, torch least of all;
- imports the `sitecustomize` that Python would have imported without this directory (the next
  one on sys.path, if any), handling its errors as site.py does, so a program's or a
  distribution's own sitecustomize still runs.

Never raises into the program: a failure of vramtrace's part is one stderr line starting with
"vramtrace: " and the program goes on. Under Python 2, which no PyTorch with CUDA supports, there
is no tensor level to record: only the chaining runs, silently (this file must parse there too).
"""
import os
import sys

_SHARED_MODULE_NAME = "_vramtrace_torch_level"  # torch_level.SHARED_MODULE_NAME


def _load_torch_level(here):
    module = sys.modules.get(_SHARED_MODULE_NAME)
    if module is not None:
        return module
    from importlib.util import module_from_spec, spec_from_file_location

    path = os.path.join(os.path.dirname(here), "torch_level.py")
    spec = spec_from_file_location(_SHARED_MODULE_NAME, path)
    if spec is None or spec.loader is None:
        raise ImportError("no %s" % path)
    module = module_from_spec(spec)
    sys.modules[_SHARED_MODULE_NAME] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[_SHARED_MODULE_NAME]
        raise
    return module


def _same_dir(entry, here):
    try:
        return os.path.realpath(entry or os.curdir) == here
    except (OSError, ValueError, TypeError):
        return False


def _chain(here):
    """Imports the next `sitecustomize` on sys.path, as site.execsitecustomize() would have."""
    removed = [(i, entry) for i, entry in enumerate(sys.path) if _same_dir(entry, here)]
    if not removed:
        return
    ours = sys.modules.get("sitecustomize")
    for i, _ in reversed(removed):
        del sys.path[i]
    try:
        sys.modules.pop("sitecustomize", None)
        try:
            import sitecustomize  # noqa: F401 - the next one, run for its side effects
        except ImportError as exc:
            missing = getattr(exc, "name", None)
            if missing is None:  # Python 2: only the message names the missing module
                missing = str(exc).rsplit(" ", 1)[-1].strip("'\"")
            if missing != "sitecustomize":
                raise
    except Exception as err:  # noqa: BLE001 - site.py's own handling of a failing sitecustomize
        if sys.flags.verbose:
            sys.excepthook(*sys.exc_info())
        else:
            sys.stderr.write("Error in sitecustomize; set PYTHONVERBOSE for traceback:\n%s: %s\n"
                             % (err.__class__.__name__, err))
    finally:
        if "sitecustomize" not in sys.modules and ours is not None:
            sys.modules["sitecustomize"] = ours
        for i, entry in removed:  # back where they were; the next one may have added entries
            sys.path.insert(min(i, len(sys.path)), entry)


def _boot():
    here = os.path.realpath(os.path.dirname(os.path.abspath(__file__)))
    if os.environ.get("VRAMTRACE_TORCH_OUT") and sys.version_info[0] >= 3:
        try:
            _load_torch_level(here).install()
        except Exception as exc:  # noqa: BLE001
            try:
                sys.stderr.write("vramtrace: tensor-level recording could not be set up (%s: %s); "
                                 "the trace has device level only\n" % (type(exc).__name__, exc))
            except Exception:  # noqa: BLE001
                pass
    _chain(here)


_boot()
