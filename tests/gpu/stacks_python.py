"""Call stacks on the GPU (tests/gpu/stacks_check.sh): device memory allocated from known Python
lines with the GIL held, through the real driver (libcuda.so.1 loaded with ctypes.PyDLL, whose
calls keep the GIL), so the shim's stacks must carry this file's lines; and once with the GIL
released (ctypes.CDLL), which must carry native frames only. Prints RESULT json with the lines.
"""
import ctypes
import json
import sys

held = ctypes.PyDLL("libcuda.so.1")
released = ctypes.CDLL("libcuda.so.1")
MiB = 1 << 20


def check(rc, what):
    if rc != 0:
        sys.exit(f"{what} failed: CUresult {rc}")


check(held.cuInit(0), "cuInit")
dev = ctypes.c_int()
check(held.cuDeviceGet(ctypes.byref(dev), 0), "cuDeviceGet")
ctx = ctypes.c_void_p()
check(held.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev), "cuDevicePrimaryCtxRetain")
check(held.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")
lines = {}


def allocate(dll, mib, keep):
    p = ctypes.c_uint64()
    lines[mib] = sys._getframe().f_lineno + 1
    check(dll.cuMemAlloc_v2(ctypes.byref(p), ctypes.c_size_t(mib * MiB)), "cuMemAlloc_v2")
    keep.append(p)


def layer(dll, mib, keep):
    allocate(dll, mib, keep)


keep = []
layer(held, 96, keep)  # the GIL held: the site must be this file's allocate line
layer(released, 32, keep)  # released: native frames only
print("RESULT " + json.dumps({"gil_line": lines[96], "nogil_line": lines[32], "file": __file__}), flush=True)
