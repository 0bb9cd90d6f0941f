"""torch._C of the fake torch: a simulated native caching allocator without a GPU.

Each allocation takes its own segment (no caching: the tests check what torch_level records, not
an allocator policy). What mirrors PyTorch (c10/cuda/CUDACachingAllocator.cpp,
torch/csrc/cuda/Module.cpp): the per-device allocators exist only after _cuda_init; recordHistory
and attachOutOfMemoryObserver act on those that exist (before init they do nothing); the history
is a ring of max_entries per device, returned oldest first; an OOM records an `oom` entry, counts
num_ooms, calls the observers (device, alloc, device total or fraction cap, device free) and then
raises OutOfMemoryError; an observer that raises replaces the OOM error with its exception.
"""
import os
import sys
import time

from torch import _fake


class OutOfMemoryError(RuntimeError):
    pass


_STAT_NAMES = ("allocation", "segment", "active", "allocated_bytes", "reserved_bytes",
               "active_bytes", "requested_bytes", "inactive_split", "inactive_split_bytes")


def _stat():
    return {"current": 0, "peak": 0, "allocated": 0, "freed": 0}


def _frames():
    frames = []
    f = sys._getframe(2)
    while f is not None:
        frames.append({"filename": f.f_code.co_filename, "line": f.f_lineno, "name": f.f_code.co_name})
        f = f.f_back
    return frames


class _DeviceAllocator:
    def __init__(self, device):
        self.device = device
        self.stats = {name: {"all": _stat(), "large_pool": _stat(), "small_pool": _stat()}
                      for name in _STAT_NAMES}
        self.num_ooms = 0
        self.record_history = False
        self.when = "never"  # never | state | alloc | all
        self.max_entries = 1
        self.trace = []
        self.trace_next = 0
        self.observers = []
        self.blocks = {}  # addr -> (size, requested, frames)
        self.fraction = None

    def _inc(self, name, amount):
        for pool in ("all", "large_pool"):
            s = self.stats[name][pool]
            s["current"] += amount
            s["peak"] = max(s["peak"], s["current"])
            s["allocated"] += amount

    def _dec(self, name, amount):
        for pool in ("all", "large_pool"):
            s = self.stats[name][pool]
            s["current"] -= amount
            s["freed"] += amount

    def record(self, action, addr, size, frames, free_key=False):
        if not self.record_history:
            return
        entry = {"action": action, ("device_free" if free_key else "addr"): addr, "size": size,
                 "stream": 0, "time_us": int(time.time() * 1e6)}
        if frames is not None and self.when in ("alloc", "all"):
            entry["frames"] = frames
        if len(self.trace) < self.max_entries:
            self.trace.append(entry)
        else:
            self.trace[self.trace_next] = entry
            self.trace_next = (self.trace_next + 1) % self.max_entries

    def history(self):
        return self.trace[self.trace_next:] + self.trace[:self.trace_next]

    def capacity(self):
        if self.fraction is not None:
            return int(_fake.CAPACITY * self.fraction)
        return _fake.CAPACITY

    def malloc(self, requested, frames):
        size = max(512, (requested + 511) // 512 * 512)
        reserved = self.stats["reserved_bytes"]["all"]["current"]
        if reserved + size > self.capacity():
            device_free = max(0, _fake.CAPACITY - reserved)
            self.record("oom", device_free, size, frames, free_key=True)
            self.num_ooms += 1
            for observer in list(self.observers):
                observer(self.device, size, self.capacity(), device_free)
            raise OutOfMemoryError("CUDA out of memory. Tried to allocate %d bytes. GPU %d has a "
                                   "total capacity of %d bytes" % (size, self.device, _fake.CAPACITY))
        global _next_addr
        addr = _next_addr
        _next_addr += size + 4096
        self.record("segment_alloc", addr, size, frames)
        self._inc("segment", 1)
        self._inc("reserved_bytes", size)
        self.record("alloc", addr, requested, frames)
        self._inc("allocation", 1)
        self._inc("active", 1)
        self._inc("allocated_bytes", size)
        self._inc("active_bytes", size)
        self._inc("requested_bytes", requested)
        self.blocks[addr] = (size, requested, frames)
        return addr

    def free(self, addr, frames):
        size, requested, alloc_frames = self.blocks.pop(addr)
        free_frames = frames if self.when == "all" else alloc_frames
        self.record("free_requested", addr, requested, free_frames)
        self._dec("allocation", 1)
        self._dec("active", 1)
        self._dec("allocated_bytes", size)
        self._dec("active_bytes", size)
        self._dec("requested_bytes", requested)
        self.record("free_completed", addr, requested, free_frames)
        self.record("segment_free", addr, size, free_frames)
        self._dec("segment", 1)
        self._dec("reserved_bytes", size)

    def segments(self):
        out = []
        for addr, (size, requested, frames) in sorted(self.blocks.items()):
            out.append({"device": self.device, "address": addr, "total_size": size,
                        "allocated_size": size, "active_size": size, "requested_size": requested,
                        "stream": 0, "segment_type": "large", "segment_pool_id": (0, 0),
                        "is_expandable": False, "frames": frames or [],
                        "blocks": [{"address": addr, "size": size, "requested_size": requested,
                                    "state": "active_allocated", "frames": frames or []}]})
        return out


_next_addr = 0x7F0000000000
_allocators = []  # empty until _cuda_init, as device_allocator in the native allocator
_current_device = 0
_contexts = set()
_in_bad_fork = False
_owner = {}  # addr -> device


def _mark_bad_fork():
    global _in_bad_fork
    _in_bad_fork = True


def _c_init():
    """at::globalContext().lazyInitDevice(kCUDA): creates the device allocators once."""
    if _allocators:
        return
    _fake.log("cuda_init")
    os.register_at_fork(after_in_child=_mark_bad_fork)
    for d in range(_fake.DEVICES):
        _allocators.append(_DeviceAllocator(d))
    _contexts.add(_current_device)


def _cuda_getDeviceCount():
    _fake.log("getDeviceCount")  # PyTorch's poison_fork(): children can no longer init CUDA
    return _fake.DEVICES


def _cuda_isInBadFork():
    return _in_bad_fork


def _cuda_init():
    _c_init()


def _cuda_getDevice():
    return _current_device


def _cuda_setDevice(d):
    global _current_device
    _current_device = d
    if _allocators:
        _contexts.add(d)


def _cuda_hasPrimaryContext(d):
    return d in _contexts


def _cuda_memGetInfo(d):
    _fake.log("mem_get_info %d" % d)
    reserved = _allocators[d].stats["reserved_bytes"]["all"]["current"]
    return (_fake.CAPACITY - reserved, _fake.CAPACITY)


def _cuda_setMemoryFraction(fraction, d):
    _allocators[d].fraction = fraction


def _cuda_getAllocatorBackend():
    return _fake.BACKEND


class _cuda_CUDAAllocator:  # noqa: N801 - PyTorch's name
    pass


def _cuda_getAllocator():
    return _cuda_CUDAAllocator()


def _check_backend(what):
    if _fake.BACKEND != "native":
        raise RuntimeError("cudaMallocAsync does not yet support %s. If you need it, please file "
                           "an issue describing your use case." % what)


def _cuda_record_memory_history(enabled, context, stacks, max_entries, *rest):
    _check_backend("recordHistory")
    _fake.log("record_history new enabled=%s context=%s stacks=%s max_entries=%s allocators=%d"
              % (enabled, context, stacks, max_entries, len(_allocators)))
    for a in _allocators:
        a.record_history = enabled == "all"
        a.when = context or "never"
        a.max_entries = max_entries if enabled == "all" else 1
        if not enabled:
            a.trace, a.trace_next = [], 0


def _cuda_record_memory_history_legacy(enabled, record_context=True, trace_alloc_max_entries=1,
                                       trace_alloc_record_context=False, *rest):
    _check_backend("recordHistory")
    _fake.log("record_history legacy enabled=%s max_entries=%s alloc_context=%s allocators=%d"
              % (enabled, trace_alloc_max_entries, trace_alloc_record_context, len(_allocators)))
    for a in _allocators:
        a.record_history = bool(enabled)
        a.when = "alloc" if trace_alloc_record_context else ("state" if record_context else "never")
        a.max_entries = trace_alloc_max_entries
        if not enabled:
            a.trace, a.trace_next = [], 0


def _cuda_attach_out_of_memory_observer(observer):
    _check_backend("attachOutOfMemoryObserver")
    _c_init()  # newer PyTorch initialises CUDA here (lazyInitDevice)
    _fake.log("attach_oom_observer")
    for a in _allocators:
        a.observers.append(observer)


def _symbolize(traces):
    """As PyTorch's PythonTraceback::appendSymbolized: asks torch for inductor's code cache."""
    import torch

    lookup = None
    if hasattr(torch, "_inductor"):
        inductor = torch._inductor
        if hasattr(inductor, "codecache"):
            lookup = inductor.codecache.PyCodeCache.stack_frames_for_code
    if lookup is not None:
        for trace in traces:
            for entry in trace:
                for frame in entry.get("frames", []):
                    lookup(frame["filename"], frame["line"])


def _cuda_memorySnapshot(*args):
    _fake.log("snapshot")
    _symbolize([a.history() for a in _allocators])
    segments = []
    for a in _allocators:
        segments.extend(a.segments())
    return {
        "segments": segments,
        "device_traces": [a.history() for a in _allocators],
        "allocator_settings": {"PYTORCH_CUDA_ALLOC_CONF": os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""),
                               "max_split_size": -1, "garbage_collection_threshold": 0.0,
                               "expandable_segments": False,
                               "roundup_power2_divisions": {"1": 0, "2": 0}},
    }


def _cuda_memoryStats(d):
    a = _allocators[d]
    result = {"num_alloc_retries": 0, "num_ooms": a.num_ooms, "max_split_size": -1}
    for name in _STAT_NAMES:
        result[name] = {pool: dict(v) for pool, v in a.stats[name].items()}
    return result


def _fake_alloc(device, nbytes):
    addr = _allocators[device].malloc(nbytes, _frames())
    _owner[addr] = device
    return addr


def _fake_free(addr):
    device = _owner.pop(addr, None)
    if device is not None and _allocators:
        _allocators[device].free(addr, _frames())


def _fake_state():
    return {"allocators": len(_allocators),
            "recording": [a.record_history for a in _allocators],
            "observers": [len(a.observers) for a in _allocators]}


# A build without CUDA has none of the _cuda_* functions.
if _fake.FLAVOUR == "cpu":
    for _name in [n for n in list(globals()) if n.startswith("_cuda_")]:
        del globals()[_name]
    del _name
if _fake.NO_OBSERVER or _fake.FLAVOUR == "nohistory":
    del _cuda_attach_out_of_memory_observer
if _fake.FLAVOUR in ("legacy", "nohistory"):
    del _cuda_record_memory_history
