"""`python -m vramtrace ARGS` and the `vramtrace` console script: run the bundled command.

The process is replaced by the command (os.execv), so its exit status, signals and standard
streams are the command's own, exactly as when it is run from the PATH.
"""
import os
import sys

from vramtrace import command_path


def main():
    path = command_path()
    if path is None:
        bundled = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bin", "vramtrace")
        if os.path.exists(bundled):
            sys.stderr.write("vramtrace: %s exists but is not executable (reinstall the wheel)\n" % bundled)
            return 126
        sys.stderr.write("vramtrace: this installation has no command (pip install ./python installs only the "
                         "Python modules; the wheel from scripts/portable.sh --wheel holds the command)\n")
        return 127
    try:
        # argv[0] "vramtrace", as from the PATH: usage lines name the command, not site-packages.
        os.execv(path, ["vramtrace"] + sys.argv[1:])
    except OSError as e:
        sys.stderr.write("vramtrace: cannot run %s: %s\n" % (path, e))
        return 126


if __name__ == "__main__":
    sys.exit(main())
