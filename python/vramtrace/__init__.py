"""vramtrace from Python: the installed command and library (`python -m vramtrace`).

Kept free of imports beyond the standard library's os: `vramtrace run` loads files of this
directory into traced programs at start-up (torch_level.py, _boot/), and nothing here may slow
or change them.
"""
import os

_HERE = os.path.dirname(os.path.abspath(__file__))


def command_path():
    """Path of the `vramtrace` command this wheel installed, or None outside a wheel install
    (a checkout, where the command is built by CMake)."""
    path = os.path.join(_HERE, "bin", "vramtrace")
    return path if os.access(path, os.X_OK) else None


def library_path():
    """Path of the libvramtrace.so this wheel installed (for LD_PRELOAD by hand), or None."""
    path = os.path.join(_HERE, "lib", "libvramtrace.so")
    return path if os.path.isfile(path) else None
