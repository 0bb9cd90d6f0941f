"""A fake torch for vramtrace's tests: NOT PyTorch (see ../README.md)."""
import sys

from torch import _fake

_fake.log("import torch")

from torch import _C  # noqa: E402
from torch import version  # noqa: E402

__version__ = _fake.VERSION
OutOfMemoryError = _C.OutOfMemoryError

if _fake.FLAVOUR != "nocuda":
    from torch import cuda  # noqa: E402,F401


_lazy_modules = {"_inductor"}


def __getattr__(name):
    """As torch/__init__.py: some submodules are imported on first attribute access."""
    if name in _lazy_modules:
        import importlib

        return importlib.import_module("." + name, __name__)
    raise AttributeError("module 'torch' has no attribute %r" % name)


class Tensor:
    """Device bytes; freed when the object goes away."""

    def __init__(self, device, nbytes):
        self.device = device
        self.nbytes = nbytes
        self.addr = None
        self.addr = _C._fake_alloc(device, nbytes)

    def __del__(self):
        if self.addr is not None:
            _C._fake_free(self.addr)
            self.addr = None


_device_initialised = False  # torch::utils::device_lazy_init's is_initialized[kCUDA]


def _device_lazy_init():
    """What torch::utils::device_lazy_init does from C++: torch.cuda._lazy_init by attribute."""
    global _device_initialised
    if _device_initialised:
        return
    module = sys.modules["torch.cuda"]
    module._lazy_init()
    _device_initialised = True


def empty(nbytes, device="cpu"):
    if device == "cpu":
        return bytearray(nbytes)
    _device_lazy_init()
    index = int(device.split(":")[1]) if ":" in device else _C._cuda_getDevice()
    return Tensor(index, nbytes)
