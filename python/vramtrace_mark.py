"""Marks in a vramtrace trace from Python: name the steps of a training loop.

    import vramtrace_mark as vt

    for i, batch in enumerate(loader):
        with vt.step(i):          # marks "step 12" before the body and "step 12 end" after it
            train_step(batch)
    vt.mark("eval")               # any name

Installed with vramtrace's wheel (docs/install.md) or `pip install ./python` (from a vramtrace
checkout), or put python/ on the Python path.
The marks go to the trace of `vramtrace run` as {"a":"mark","name":...} lines (docs/trace-format.md).
Without libvramtrace.so preloaded every call does nothing, so the calls can stay in the code.
The lookup uses ctypes on the process itself (the preloaded library's exported
`void vramtrace_mark(const char *name)`); nothing is imported from vramtrace otherwise.
"""

import contextlib
import ctypes

__all__ = ["mark", "step", "enabled"]


def _find():
    try:
        lib = ctypes.CDLL(None)  # the process and every library already loaded, LD_PRELOAD included
        fn = lib.vramtrace_mark
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_char_p]
    fn.restype = None
    return fn


_mark = _find()


def enabled():
    """True when libvramtrace.so is loaded and marks reach the trace."""
    return _mark is not None


def mark(name):
    """Records a mark called `name` (str or bytes) in the trace, stamped now on this thread.

    Each distinct name is stored once in the tracer's table (at most 1,048,576 names), so prefer
    a few names (or step() below) to a new string for every call in a long run.
    """
    if _mark is None:
        return
    if not isinstance(name, bytes):
        name = str(name).encode("utf-8", "replace")
    _mark(name)


@contextlib.contextmanager
def step(i):
    """Marks "step <i>" on entry and "step <i> end" on exit (also when the body raises)."""
    mark("step %s" % (i,))
    try:
        yield
    finally:
        mark("step %s end" % (i,))
