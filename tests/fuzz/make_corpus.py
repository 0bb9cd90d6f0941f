#!/usr/bin/env python3
"""Writes the seed corpora of the reader fuzz targets into tests/fuzz/corpus/ (run once; the
output is committed). Seeds are small on purpose: libFuzzer mutates small inputs far faster.

  trace/        PyTorch JSON-lines snippets (plain, gzip, zstd), vramtrace-format snippets, small
                snapshot pickles (protocols 2-5), the reader tests' big-integer pickle
  report/       the same traces (the report target reads them through open_trace)
  pickle/       the snapshot pickles plus pickles that name callables (os.system via REDUCE,
                GLOBAL/INST/OBJ/NEWOBJ/STACK_GLOBAL), deep nesting, memo sharing
  oom_message/  every OOM message of tests/reporter-reports/messages.h, plus a few variants

Python's pickle only *writes* the hostile pickles here; nothing is ever loaded.
"""
import gzip, io, json, os, pickle, re, subprocess, sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
OUT = os.path.join(HERE, "corpus")


def put(target, name, data):
    d = os.path.join(OUT, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())


def torch_lines(name, n):
    with gzip.open(os.path.join(ROOT, "tests/data/torch-h200", name + ".torchtrace.jsonl.gz"), "rt") as f:
        lines = [next(f) for _ in range(n)]
    return "".join(lines)


def zstd(data):
    return subprocess.run(["zstd", "-q", "-c", "-3"], input=data, stdout=subprocess.PIPE, check=True).stdout


traces = {}
gpt2 = torch_lines("gpt2_train", 40)
traces["torch-gpt2-40.jsonl"] = gpt2
traces["torch-resnet-25-noheader.jsonl"] = "".join(torch_lines("resnet50_train", 26).splitlines(True)[1:])
traces["torch-oom.jsonl"] = (
    '{"kind": "header", "workload": "w<script>x</script>", "conf": "max_split_size_mb:128", "stats": {}, "total": 1073741824}\n'
    '{"action": "segment_alloc", "addr": 4096, "size": 2097152, "stream": 0, "time_us": 1}\n'
    '{"action": "alloc", "addr": 4096, "size": 512, "stream": 0, "time_us": 2}\n'
    '{"action": "oom", "device_free": 1024, "size": 4294967296, "stream": 0, "time_us": 3}\n'
    '{"action": "free_requested", "addr": 4096, "size": 512, "stream": 0, "time_us": 4}\n'
    '{"action": "free_completed", "addr": 4096, "size": 512, "stream": 0, "time_us": 5}\n'
    '{"action": "segment_free", "addr": 4096, "size": 2097152, "stream": 0, "time_us": 6}\n'
    '{"action": "alloc", "addr": 8192, "size": 10, "stream": 7, "ti')
traces["torch-gpt2-40.jsonl.gz"] = gzip.compress(gpt2.encode(), 6)
traces["torch-gpt2-40.jsonl.zst"] = zstd(gpt2.encode())

vt_header = {
    "a": "header", "format": "vramtrace", "version": "1.0", "tool_version": "0.1.0", "pid": 1234, "ppid": 1,
    "host": "node<b>1</b>", "rank": "0", "command_line": ["python3", "train.py", "--name=</script><script>alert(1)</script>"],
    "start_unix_ns": 1700000000000000000, "origin_monotonic_ns": 5000, "cuda_driver_version": 13000,
    "cuda_runtime_version": 13000,
    "devices": [{"id": 0, "name": "NVIDIA H200 <img src=x onerror=alert(1)>", "total_bytes": 150109880320, "uuid": "GPU-0"}],
    "allocator_settings": "expandable_segments:True", "settings": {"reuse": "lazy_sync"},
    "entry_points": ["", "cudaMalloc", "cuMemAlloc_v2"], "on_full": "wait"}
vt_events = [
    {"a": "segment_alloc", "t": 10, "p": 139637976727552, "r": 2097152},
    {"a": "alloc", "t": 11, "p": 139637976727552, "r": 1000, "b": 1024, "th": 4711, "e": 1},
    {"a": "mark", "t": 12, "name": "step <1> & \u2028"},
    {"a": "alloc", "t": 13, "d": 1, "s": 94000000000000, "p": 139637976728576, "r": 4096, "th": 4712, "e": 2},
    {"a": "free_requested", "t": 14, "p": 139637976727552, "r": 1000, "b": 1024},
    {"a": "free_completed", "t": 15, "p": 139637976727552, "r": 1000, "b": 1024},
    {"a": "oom", "t": 16, "r": 1073741824, "b": 1073741824, "free": 0,
     "snapshot": {"segments": [{"device": 0, "address": 139637976727552, "total_size": 2097152, "allocated_size": 0,
                                 "active_size": 0, "requested_size": 0, "stream": 0, "segment_type": "small",
                                 "is_expandable": False,
                                 "blocks": [{"address": 139637976727552, "size": 2097152, "requested_size": 0,
                                             "state": "inactive", "mapped": True}]}]}},
    {"a": "segment_free", "t": 17, "p": 139637976727552, "r": 2097152},
]
vt_trailer = {"a": "trailer", "t": 30, "events": len(vt_events), "dropped": 0,
              "counts": {"alloc": 2, "mark": 1}, "stats": {"0": {"allocated_bytes.all.peak": 1024}}}
vt = "".join(json.dumps(x, separators=(",", ":")) + "\n" for x in [vt_header] + vt_events + [vt_trailer])
traces["vramtrace-small.jsonl"] = vt
traces["vramtrace-cut.jsonl"] = vt[: len(vt) - 40]
traces["vramtrace-small.jsonl.zst"] = zstd(vt.encode())


def snapshot(n_entries):
    seg = {"device": 0, "address": 139637976727552, "total_size": 2097152, "allocated_size": 1024,
           "active_size": 1024, "requested_size": 1000, "stream": 0, "segment_type": "small",
           "segment_pool_id": (0, 0), "is_expandable": False, "frames": [],
           "blocks": [{"address": 139637976727552, "size": 1024, "requested_size": 1000, "state": "active_allocated",
                       "frames": [{"filename": "train.py", "line": 1, "name": "<module>"}]},
                      {"address": 139637976728576, "size": 2096128, "requested_size": 0, "state": "inactive",
                       "frames": []}]}
    frames = [{"filename": "model.py", "line": 7, "name": "forward"}]
    trace = []
    addr = 139637976727552
    trace.append({"action": "segment_alloc", "addr": addr, "size": 2097152, "stream": 0, "time_us": 1,
                  "frames": frames})
    for i in range(n_entries):
        trace.append({"action": "alloc", "addr": addr + 1024 * i, "size": 1000, "stream": 0, "time_us": 2 + i,
                      "frames": frames})
    trace.append({"action": "free_requested", "addr": addr, "size": 1000, "stream": 0, "time_us": 100,
                  "frames": frames})
    trace.append({"action": "free_completed", "addr": addr, "size": 1000, "stream": 0, "time_us": 101,
                  "frames": frames})
    trace.append({"action": "oom", "device_free": 4096, "size": 1 << 40, "stream": 0, "time_us": 102,
                  "frames": []})
    return {"segments": [seg], "device_traces": [trace, []],
            "allocator_settings": {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:False"}}


pickles = {}
for proto in (2, 3, 4, 5):
    pickles["snapshot-proto%d.pickle" % proto] = pickle.dumps(snapshot(3), protocol=proto)
pickles["snapshot-bigint.pickle"] = pickle.dumps({"segments": [], "device_traces": [[
    {"action": "alloc", "addr": 2 ** 64 - 512, "size": 2 ** 70, "stream": -1, "time_us": 1}]]}, protocol=4)
with open(os.path.join(ROOT, "tests/data/pickle/bigint.snapshot.pickle"), "rb") as f:
    pickles["reader-tests-bigint.pickle"] = f.read()
for k, v in pickles.items():
    traces[k] = v
traces["snapshot-proto4.pickle.gz"] = gzip.compress(pickles["snapshot-proto4.pickle"])

for k, v in traces.items():
    put("trace", k, v)
    put("report", k, v)


class Evil:
    def __reduce__(self):
        return (os.system, ("touch /tmp/vramtrace-pickle-executed",))


class EvilNew:
    def __reduce__(self):
        return (object.__new__, (EvilNew,))


hostile = {
    "reduce-os-system-proto2.pickle": pickle.dumps(Evil(), protocol=2),
    "reduce-os-system-proto4.pickle": pickle.dumps({"segments": [Evil()]}, protocol=4),
    "global-proto0.pickle": b"cos\nsystem\n(S'touch /tmp/vramtrace-pickle-executed'\ntR.",
    "inst-proto0.pickle": b"(S'touch /tmp/vramtrace-pickle-executed'\nios\nsystem\n.",
    "newobj.pickle": pickle.dumps(EvilNew(), protocol=2),
    "deep-lists.pickle": b"\x80\x04" + b"]" * 2000 + b"a" * 1999 + b".",
    "deep-marks.pickle": b"\x80\x02" + b"(" * 3000 + b"N.",
    "memo-shared.pickle": pickle.dumps((lambda l: {"a": l, "b": [l, l, l]})([1, 2, "x" * 70]), protocol=4),
    "long-string-claim.pickle": b"\x80\x04\x8d" + (1 << 40).to_bytes(8, "little") + b"abc",
    "long4-claim.pickle": b"\x80\x02\x8b" + (1 << 31).to_bytes(4, "little") + b"\x01",
}
for k, v in pickles.items():
    put("pickle", k, v)
for k, v in hostile.items():
    put("pickle", k, v)

# Pickles that are not snapshots (refused as such by the snapshot reader) and a small bomb of
# EMPTY_LIST opcodes (refused for what it leaves on the stack; under the pickle target's tight
# limits, at the memory budget), for both targets.
small_bomb = b"\x80\x04" + b"]" * 4096 + b"."
not_snapshots = {
    "not-a-snapshot-dict.pickle": pickle.dumps({"foo": 1}, protocol=4),
    "not-a-dict-int.pickle": pickle.dumps(1, protocol=4),
    "not-a-dict-list-of-ints.pickle": pickle.dumps([1, 2, 3], protocol=4),
    "empty-list-bomb-4k.pickle": small_bomb,
    "empty-list-bomb-4k.pickle.gz": gzip.compress(small_bomb, mtime=0),
}
for k, v in not_snapshots.items():
    put("pickle", k, v)
    put("trace", k, v)

# Bad vramtrace lines: a block below its request, impossible times, text that is not UTF-8 (a
# stray byte, a lone surrogate escape, a valid pair), lost events, an allocation in no segment.
def vt_with(*lines, trailer=None):
    t = dict(vt_trailer) if trailer is None else trailer
    return (json.dumps(vt_header, separators=(",", ":")) + "\n").encode() + b"".join(
        (l if isinstance(l, bytes) else l.encode()) + b"\n" for l in lines) + (
        json.dumps(t, separators=(",", ":")) + "\n").encode()
bad_lines = {
    "vramtrace-block-below-request.jsonl": vt_with('{"a":"alloc","t":11,"p":4096,"r":1000000,"b":1024}'),
    "vramtrace-time-int64-max.jsonl": vt_with('{"a":"alloc","t":9223372036854775807,"p":4096,"r":512}'),
    "vramtrace-time-before-origin.jsonl": vt_with('{"a":"alloc","t":-99999999999,"p":4096,"r":512}'),
    "vramtrace-mark-not-utf8.jsonl": vt_with(b'{"a":"mark","t":12,"name":"bad \xff\xfe x"}',
                                             '{"a":"mark","t":13,"name":"lone \\ud800 x"}',
                                             '{"a":"mark","t":14,"name":"pair \\ud83d\\ude00 x"}'),
    "vramtrace-dropped.jsonl": vt_with('{"a":"alloc","t":11,"p":4096,"r":512}',
                                       trailer=dict(vt_trailer, dropped=5, events=7)),
    "vramtrace-alloc-in-no-segment.jsonl": vt_with('{"a":"segment_alloc","t":10,"p":1048576,"r":2097152}',
                                                   '{"a":"alloc","t":11,"p":99048576,"r":1000448}'),
}
for k, v in bad_lines.items():
    put("trace", k, v)
    put("report", k, v)

# OOM messages: every C string constant of messages.h.
src = open(os.path.join(ROOT, "tests/reporter-reports/messages.h")).read()
n = 0
for m in re.finditer(r"inline constexpr const char\* (k\w+) =(.*?);\n", src, re.S):
    parts = re.findall(r'"((?:[^"\\]|\\.)*)"', m.group(2))
    text = "".join(parts).encode().decode("unicode_escape")
    put("oom_message", m.group(1), text)
    n += 1
put("oom_message", "tf-bfc-short", "Allocator (GPU_0_bfc) ran out of memory trying to allocate 1.00GiB (rounded to "
    "1073741824)requested by op MatMul\nLimit: 15859777536\nInUse: 15700000000\nMaxInUse: 15800000000\n"
    "Free at 7f0000000000 of size 1048576\n")
put("oom_message", "xla-short", "RESOURCE_EXHAUSTED: Out of memory while trying to allocate 17179869184 bytes.")
put("oom_message", "async-short", "CUDA out of memory. Tried to allocate 2.00 GiB. Allocation on device 0 would exceed "
    "allowed memory. (out of memory)\nCurrently allocated     : 38.50 GiB\nRequested               : 2.00 GiB\n"
    "Device limit            : 39.39 GiB\nFree (according to CUDA): 512.00 MiB\nPyTorch limit (set by user-supplied memory fraction)\n"
    "                        : 17179869184.00 GiB")
print("oom messages:", n, "; traces:", len(traces), "; pickles:", len(pickles) + len(hostile))
