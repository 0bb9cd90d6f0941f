"""torch.version of the fake torch."""
from torch import _fake

__version__ = _fake.VERSION
cuda = None if _fake.FLAVOUR == "cpu" else "13.0"
hip = None
