"""Configuration and event log of the fake torch (see ../README.md)."""
import os

FLAVOUR = os.environ.get("FAKE_TORCH_FLAVOUR", "new")
BACKEND = os.environ.get("FAKE_TORCH_BACKEND", "native")
VERSION = os.environ.get("FAKE_TORCH_VERSION", "2.11.0+fake")
CAPACITY = int(os.environ.get("FAKE_TORCH_CAPACITY", str(1 << 30)))
DEVICES = int(os.environ.get("FAKE_TORCH_DEVICES", "1"))
NO_OBSERVER = os.environ.get("FAKE_TORCH_NO_OBSERVER") == "1"
LOG = os.environ.get("FAKE_TORCH_LOG")


def log(event):
    if LOG:
        with open(LOG, "a") as f:
            f.write("%d %s\n" % (os.getpid(), event))
