#!/usr/bin/env python3
"""Writes the snapshot pickles of the tests on snapshots as users make them (no history, a history
that begins late), in the dict shape torch.cuda.memory._dump_snapshot() writes.

Run from the repository root: python3 tests/data/pickle/make_edge_pickles.py
Outputs (committed; regenerate only if the source snapshot changes):
  no_history.snapshot.pickle     _dump_snapshot() without _record_memory_history: device_traces
                                 is a list of empty lists; two devices
  segments_only.pickle           torch.cuda.memory_snapshot() pickled: the segment list alone
  late_start.snapshot.pickle.gz  encoder_varlen.snapshot.pickle with the first half of its
                                 history dropped, as PyTorch's ring of max_entries leaves it
  esc.snapshot.pickle            a block whose frame names hold terminal controls (ESC, BEL, CR,
                                 LF, C1 CSI): what text reports must print escaped
"""
import gzip
import os
import pickle

here = os.path.dirname(os.path.abspath(__file__))
MiB = 1 << 20


def segment(device, address, total, blocks, segment_type="large"):
    """blocks: (size, requested_size, state) in address order, tiling the segment."""
    out, addr = [], address
    for size, requested, state in blocks:
        out.append({"address": addr, "size": size, "requested_size": requested, "state": state, "frames": []})
        addr += size
    assert addr == address + total
    live = [b for b in out if b["state"] != "inactive"]
    return {"device": device, "address": address, "total_size": total,
            "allocated_size": sum(b["size"] for b in out if b["state"] == "active_allocated"),
            "active_size": sum(b["size"] for b in live),
            "requested_size": sum(b["requested_size"] for b in live),
            "stream": 0, "segment_type": segment_type, "segment_pool_id": (0, 0), "is_expandable": False,
            "frames": [], "blocks": out}


# Device 0: 8 MiB + 512 B allocated, 4 MiB pending free, 22 MiB reserved; device 1: 20 MiB of 20 MiB.
segments = [
    segment(0, 0x7f0000000000, 20 * MiB, [(8 * MiB, 8 * MiB - 100, "active_allocated"),
                                          (4 * MiB, 4 * MiB, "active_pending_free"),
                                          (8 * MiB, 0, "inactive")]),
    segment(0, 0x7f0010200000, 2 * MiB, [(512, 100, "active_allocated"), (2 * MiB - 512, 0, "inactive")], "small"),
    segment(1, 0x7e0000000000, 20 * MiB, [(20 * MiB, 20 * MiB, "active_allocated")]),
]
snapshot = {"segments": segments, "device_traces": [[], []],
            "allocator_settings": {"PYTORCH_CUDA_ALLOC_CONF": ""}, "external_annotations": []}
with open(os.path.join(here, "no_history.snapshot.pickle"), "wb") as f:
    f.write(pickle.dumps(snapshot, protocol=4))
with open(os.path.join(here, "segments_only.pickle"), "wb") as f:
    f.write(pickle.dumps(segments, protocol=4))

src = os.path.join(here, "..", "torch-h200", "encoder_varlen.snapshot.pickle")
with open(src, "rb") as f:
    data = pickle.load(f)  # trusted: our own bundled test data
traces = data["device_traces"]
data["device_traces"] = [t[len(t) // 2:] for t in traces]
with gzip.GzipFile(os.path.join(here, "late_start.snapshot.pickle.gz"), "wb", mtime=0) as f:
    f.write(pickle.dumps(data, protocol=4))

# Terminal controls in a frame's file and function names and in the settings.
evil = segment(0, 0x7f0000000000, 2 * MiB, [(MiB, MiB, "active_allocated"), (MiB, 0, "inactive")])
evil["blocks"][0]["frames"] = [{"filename": "/home/u/evil\x1b[31mRED\x1b]0;title\x07\r\nFAKE LINE.py", "line": 7,
                                "name": "f\u009b2J"},
                               {"filename": "train.py", "line": 3, "name": "main"}]
esc = {"segments": [evil], "device_traces": [[]],
       "allocator_settings": {"PYTORCH_CUDA_ALLOC_CONF": "", "max_split_size": -1}, "external_annotations": []}
with open(os.path.join(here, "esc.snapshot.pickle"), "wb") as f:
    f.write(pickle.dumps(esc, protocol=4))
