#!/usr/bin/env python3
"""Writes the pickle test files of tests/reporter from the bundled real snapshot.

Run from the repository root: python3 tests/data/pickle/make_pickles.py
Outputs (committed; regenerate only if the source snapshot changes):
  encoder_varlen.protoN.pickle.gz   the same data re-dumped with pickle protocol N (2..5), gzip
  bigint.snapshot.pickle             a small snapshot with integers >= 2^63 (case S2)
  encoder_varlen.expected.json       what Python's pickle.load sees in the snapshot: every trace
                                     entry (device, action, addr, size, stream, time_us), the
                                     segments and blocks, the settings string
"""
import gzip
import pickle
import os

here = os.path.dirname(os.path.abspath(__file__))
src = os.path.join(here, "..", "torch-h200", "encoder_varlen.snapshot.pickle")
with open(src, "rb") as f:
    data = pickle.load(f)  # trusted: our own bundled test data

for proto in (2, 3, 4, 5):
    out = os.path.join(here, f"encoder_varlen.proto{proto}.pickle.gz")
    with gzip.GzipFile(out, "wb", mtime=0) as f:
        f.write(pickle.dumps(data, protocol=proto))

big = {
    "segments": [{"device": 0, "address": 2**63 + 4096, "total_size": 2097152, "allocated_size": 512,
                  "active_size": 512, "requested_size": 100, "stream": 2**64 - 1, "segment_type": "small",
                  "segment_pool_id": (0, 0), "is_expandable": False, "frames": [],
                  "blocks": [{"address": 2**63 + 4096, "size": 512, "requested_size": 100,
                              "state": "active_allocated", "frames": [{"name": "f", "filename": "x.py",
                                                                        "line": 2**70}]},
                             {"address": 2**63 + 4096 + 512, "size": 2097152 - 512, "requested_size": 0,
                              "state": "inactive", "frames": []}]}],
    "device_traces": [[
        {"action": "segment_alloc", "addr": 2**63 + 4096, "size": 2097152, "stream": 2**64 - 1,
         "time_us": 2**63 + 7, "frames": []},
        {"action": "alloc", "addr": 2**63 + 4096, "size": 100, "stream": 2**64 - 1, "time_us": 1,
         "frames": [{"name": "f", "filename": "x.py", "line": 2**70}], "user_metadata": -(2**80)},
    ]],
    "allocator_settings": {"PYTORCH_CUDA_ALLOC_CONF": "max_split_size_mb:128", "max_split_size": 2**63 - 1},
}
with open(os.path.join(here, "bigint.snapshot.pickle"), "wb") as f:
    f.write(pickle.dumps(big, protocol=4))

import json
expected = {
    "settings": data["allocator_settings"]["PYTORCH_CUDA_ALLOC_CONF"],
    "entries": [[dev, e["action"], e.get("addr", 0), e["size"], e["stream"], e.get("time_us", 0)]
                for dev, t in enumerate(data["device_traces"]) for e in t],
    "segments": [[s["device"], s["address"], s["total_size"], s["allocated_size"], s["requested_size"],
                  s["segment_type"], s["is_expandable"],
                  [[b["address"], b["size"], b["requested_size"], b["state"]] for b in s["blocks"]]]
                 for s in data["segments"]],
}
with open(os.path.join(here, "encoder_varlen.expected.json"), "w") as f:
    json.dump(expected, f, separators=(",", ":"))
