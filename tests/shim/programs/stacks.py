# Python frames in call stacks (shim/src/base/stacks.h), run by tests/shim/test_stacks.cpp under
# the shim with the fake CUDA: cudaMalloc through libstack_lib.so from known lines, with the GIL
# held (ctypes.PyDLL) and released (ctypes.CDLL), on the main thread and on another thread, and
# once with a Python exception pending inside a function whose file name is not UTF-8. Prints
# "program.<what> <value>" lines for the harness: the line of each call, by its size in MiB.
import ctypes
import sys
import threading

lib_path = sys.argv[1]
held = ctypes.PyDLL(lib_path)  # calls keep the GIL
released = ctypes.CDLL(lib_path)  # calls release it
MiB = 1 << 20


def report(what, value):
    print(f"program.{what} {value}", flush=True)


def alloc(dll, mib):
    p = ctypes.c_void_p()
    report(f"line_{mib}", sys._getframe().f_lineno + 1)
    assert dll.stack_lib_alloc(ctypes.byref(p), ctypes.c_size_t(mib * MiB)) == 0
    return p


def outer(dll, mib):
    return alloc(dll, mib)


outer(held, 1)  # the GIL held: Python frames alloc <- outer <- <module>
outer(released, 2)  # released: native frames only
t = threading.Thread(target=outer, args=(held, 3))  # another thread holding the GIL
t.start()
t.join()
t = threading.Thread(target=outer, args=(released, 4))
t.start()
t.join()

# A pending exception survives the walk, even where the walk itself meets an error (a file name
# with a lone surrogate cannot be encoded as UTF-8).
source = """
def pending(lib, mib):
    p = ctypes.c_void_p()
    return lib.stack_lib_alloc_with_pending_error(ctypes.byref(p), ctypes.c_size_t(mib * MiB))
"""
scope = {"ctypes": ctypes, "MiB": MiB}
exec(compile(source, "not-utf8-\udcff.py", "exec"), scope)
report("pending_kept", 1 if scope["pending"](held, 5) == 0 else 0)
report("script", 1)
