"""torch._inductor of the fake torch: importing it is what the tests watch for."""
from torch import _fake

_fake.log("import torch._inductor")

from torch._inductor import codecache  # noqa: E402,F401
