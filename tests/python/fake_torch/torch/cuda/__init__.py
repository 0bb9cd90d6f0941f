"""torch.cuda of the fake torch; _lazy_init has the structure of PyTorch's."""
import threading
import traceback

import torch
from torch import _C, _fake

_initialized = False
_tls = threading.local()
_initialization_lock = threading.Lock()
_queued_calls = []
_is_in_bad_fork = getattr(_C, "_cuda_isInBadFork", lambda: False)

OutOfMemoryError = _C.OutOfMemoryError


def _is_compiled():
    return hasattr(_C, "_cuda_getDeviceCount")


def is_available():
    return _is_compiled() and _C._cuda_getDeviceCount() > 0


def is_initialized():
    return _initialized and not _is_in_bad_fork()


def _lazy_call(callable):
    if is_initialized():
        callable()
    else:
        _queued_calls.append((callable, traceback.format_stack()))


def _lazy_init():
    global _initialized, _queued_calls
    if is_initialized() or hasattr(_tls, "is_initializing"):
        return
    with _initialization_lock:
        if is_initialized():
            return
        if _is_in_bad_fork():
            raise RuntimeError("Cannot re-initialize CUDA in forked subprocess. To use CUDA with "
                               "multiprocessing, you must use the 'spawn' start method")
        if not _is_compiled():
            raise AssertionError("Torch not compiled with CUDA enabled")
        _C._cuda_init()
        _tls.is_initializing = True
        try:
            for queued_call, orig_traceback in _queued_calls:
                queued_call()
        finally:
            delattr(_tls, "is_initializing")
        _initialized = True


def init():
    _lazy_init()


def device_count():
    return _C._cuda_getDeviceCount() if _is_compiled() else 0


def current_device():
    _lazy_init()
    return _C._cuda_getDevice()


def set_device(device):
    _lazy_init()
    _C._cuda_setDevice(device)


def manual_seed_all(seed):
    _lazy_call(lambda: _fake.log("seeded %d" % seed))


from .memory import *  # noqa: E402,F401,F403
from . import memory  # noqa: E402,F401
