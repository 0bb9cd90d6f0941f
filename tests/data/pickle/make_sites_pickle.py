#!/usr/bin/env python3
"""Writes sites.snapshot.pickle, the small snapshot with call stacks of the sites tests
(tests/reporter-reports/test_sites.cpp), sites_end_only.snapshot.pickle, its end state with
an empty history, and sites_more.snapshot.pickle, the same run with one more 6 MiB block from
train.py:42 (the NEW run of the diff tests, tests/reporter-check/test_cmd_check.cpp). Run from
the repository root: python3 tests/data/pickle/make_sites_pickle.py (the output is committed).

Device 0: a 20 MiB segment in the history; allocations of 4, 2, 3 and 2 MiB (the peak, 11 MiB),
the 2 MiB one freed and its address allocated again from another line, then an OOM. The
segments hold that segment and one more, from before the history began, with a block of its
own stack (preload.py). Frames are innermost first, C++ frames included, as with
_record_memory_history(stacks="all").
"""
import os
import pickle

MiB = 1 << 20
A = 0x7F0000000000
B = 0x7F0010000000


def fr(filename, line, name):
    return {"name": name, "filename": filename, "line": line}


native = [fr("??", 0, "torch::unwind::unwind()"),
          fr("CUDACachingAllocator.cpp", 0, "c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::malloc(unsigned long, CUstream_st*)"),
          fr("", 0, "at::detail::empty_generic(c10::ArrayRef<long>, c10::Allocator*)")]
sp = "/venv/lib/python3.12/site-packages"
gpt2 = native + [fr(sp + "/torch/nn/functional.py", 2345, "linear"),
                 fr(sp + "/transformers/models/gpt2/modeling_gpt2.py", 200, "forward"),
                 fr(sp + "/torch/nn/modules/module.py", 1779, "_wrapped_call_impl"),
                 fr(sp + "/transformers/models/gpt2/modeling_gpt2.py", 900, "forward"),
                 fr(sp + "/torch/nn/modules/module.py", 1779, "_wrapped_call_impl"),
                 fr("train.py", 42, "step"),
                 fr("<frozen runpy>", 88, "_run_code"),
                 fr("/usr/lib/python3.12/runpy.py", 198, "_run_module_as_main")]
plain = native + [fr(sp + "/torch/nn/modules/linear.py", 125, "forward"), fr("train.py", 50, "step")]
again = native + [fr("/usr/lib/python3.12/contextlib.py", 81, "inner"), fr("train.py", 60, "step")]
failed = native + [fr("train.py", 70, "step")]
preload = native + [fr("preload.py", 3, "<module>")]

f1, f2, f4 = list(gpt2), list(plain), list(again)  # shared by an alloc and its frees, as PyTorch does
t = [
    {"action": "segment_alloc", "addr": A, "size": 20 * MiB, "stream": 0, "time_us": 1, "frames": list(gpt2)},
    {"action": "alloc", "addr": A, "size": 4 * MiB, "stream": 0, "time_us": 2, "frames": f1},
    {"action": "alloc", "addr": A + 4 * MiB, "size": 2 * MiB, "stream": 0, "time_us": 3, "frames": f2},
    {"action": "alloc", "addr": A + 6 * MiB, "size": 3 * MiB, "stream": 0, "time_us": 4, "frames": ["not a frame"]},
    {"action": "alloc", "addr": A + 9 * MiB, "size": 2 * MiB, "stream": 0, "time_us": 5},
    {"action": "free_requested", "addr": A + 4 * MiB, "size": 2 * MiB, "stream": 0, "time_us": 6, "frames": f2},
    {"action": "free_completed", "addr": A + 4 * MiB, "size": 2 * MiB, "stream": 0, "time_us": 7, "frames": f2},
    {"action": "alloc", "addr": A + 4 * MiB, "size": 2 * MiB, "stream": 0, "time_us": 8, "frames": f4},
    {"action": "oom", "addr": 0, "size": 64 * MiB, "stream": 0, "time_us": 9, "device_free": MiB, "frames": failed},
]
blocks_a = [
    {"address": A, "size": 4 * MiB, "requested_size": 4 * MiB, "state": "active_allocated", "frames": f1},
    {"address": A + 4 * MiB, "size": 2 * MiB, "requested_size": 2 * MiB, "state": "active_allocated", "frames": f4},
    {"address": A + 6 * MiB, "size": 3 * MiB, "requested_size": 3 * MiB, "state": "active_allocated", "frames": []},
    {"address": A + 9 * MiB, "size": 2 * MiB, "requested_size": 2 * MiB, "state": "active_allocated", "frames": []},
    {"address": A + 11 * MiB, "size": 9 * MiB, "requested_size": 0, "state": "inactive", "frames": []},
]
blocks_b = [
    {"address": B, "size": 8 * MiB, "requested_size": 8 * MiB, "state": "active_allocated", "frames": preload},
    {"address": B + 8 * MiB, "size": 12 * MiB, "requested_size": 0, "state": "inactive", "frames": []},
]


def seg(addr, blocks, allocated):
    return {"device": 0, "address": addr, "total_size": 20 * MiB, "allocated_size": allocated,
            "active_size": allocated, "requested_size": allocated, "stream": 0, "segment_type": "large",
            "segment_pool_id": (0, 0), "is_expandable": False, "frames": [], "blocks": blocks}


data = {"segments": [seg(A, blocks_a, 11 * MiB), seg(B, blocks_b, 8 * MiB)], "device_traces": [t],
        "allocator_settings": {"PYTORCH_CUDA_ALLOC_CONF": ""}}
here = os.path.dirname(os.path.abspath(__file__))
with open(os.path.join(here, "sites.snapshot.pickle"), "wb") as f:
    pickle.dump(data, f, protocol=4)

# The same end state with an empty history (recording began just before the dump): the end
# state's own frames still name the code.
end_only = {"segments": [seg(A, [dict(b, frames=list(b["frames"])) for b in blocks_a], 11 * MiB),
                         seg(B, blocks_b, 8 * MiB)],
            "device_traces": [[]], "allocator_settings": {"PYTORCH_CUDA_ALLOC_CONF": ""}}
with open(os.path.join(here, "sites_end_only.snapshot.pickle"), "wb") as f:
    pickle.dump(end_only, f, protocol=4)

# NEW of the diff tests: train.py:42 also allocates 6 MiB in the free tail of segment A before the
# free (PyTorch splits the 9 MiB free block: 3 MiB stay free), and keeps it: 10 MiB in 2 blocks at
# the peak and at the end instead of 4 MiB.
more_t = t[:4] + [{"action": "alloc", "addr": A + 11 * MiB, "size": 6 * MiB, "stream": 0, "time_us": 5,
                   "frames": f1}] + t[4:]
more_a = blocks_a[:4] + [
    {"address": A + 11 * MiB, "size": 6 * MiB, "requested_size": 6 * MiB, "state": "active_allocated", "frames": f1},
    {"address": A + 17 * MiB, "size": 3 * MiB, "requested_size": 0, "state": "inactive", "frames": []},
]
more = {"segments": [seg(A, more_a, 17 * MiB), seg(B, blocks_b, 8 * MiB)], "device_traces": [more_t],
        "allocator_settings": {"PYTORCH_CUDA_ALLOC_CONF": ""}}
with open(os.path.join(here, "sites_more.snapshot.pickle"), "wb") as f:
    pickle.dump(more, f, protocol=4)
