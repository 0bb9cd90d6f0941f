# The Python half of tests/bench/stacks_bench.py: cudaMalloc + cudaFree pairs of the fake
# libcudart.so.13 through ctypes.PyDLL (the GIL held, so Python frames are walked) at a chosen
# Python depth. Prints one line: "ns_per_pair <value>".
import ctypes
import sys
import time

lib = ctypes.PyDLL("libcudart.so.13")
depth, pairs = int(sys.argv[1]), int(sys.argv[2])
p = ctypes.c_void_p()
size = ctypes.c_size_t(4096)
malloc, free = lib.cudaMalloc, lib.cudaFree


def loop(n):
    for _ in range(n):
        malloc(ctypes.byref(p), size)
        free(p)


def at(d, n):
    return at(d - 1, n) if d > 0 else loop(n)


at(depth, 200)  # the context and the pool
start = time.perf_counter_ns()
at(depth, pairs)
print(f"ns_per_pair {(time.perf_counter_ns() - start) / pairs:.1f}")
