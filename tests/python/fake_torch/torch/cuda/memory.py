"""torch.cuda.memory of the fake torch; the history API per FAKE_TORCH_FLAVOUR."""
import collections
import pickle
import sys
from inspect import signature

from torch import _C, _fake

from . import _lazy_init, is_initialized  # bound at import, as in PyTorch

__all__ = ["memory_stats", "memory_stats_as_nested_dict", "mem_get_info",
           "set_per_process_memory_fraction", "get_allocator_backend"]


def _index(device):
    if device is None:
        return _C._cuda_getDevice()
    if isinstance(device, str):
        return int(device.split(":")[1]) if ":" in device else _C._cuda_getDevice()
    return int(device)


def memory_stats_as_nested_dict(device=None):
    if not is_initialized():
        return {}
    return _C._cuda_memoryStats(_index(device))


def memory_stats(device=None):
    result = []

    def add(prefix, obj):
        if isinstance(obj, dict):
            if prefix:
                prefix += "."
            for k, v in obj.items():
                add(prefix + k, v)
        else:
            result.append((prefix, obj))

    add("", memory_stats_as_nested_dict(device))
    result.sort()
    return collections.OrderedDict(result)


def mem_get_info(device=None):
    _lazy_init()
    return _C._cuda_memGetInfo(_index(device))


def set_per_process_memory_fraction(fraction, device=None):
    _lazy_init()
    _C._cuda_setMemoryFraction(fraction, _index(device))


def get_allocator_backend():
    return _C._cuda_getAllocatorBackend()


class _CUDAAllocator:
    def __init__(self, allocator):
        self._allocator = allocator

    def allocator(self):
        return self._allocator


def _get_current_allocator():
    return _CUDAAllocator(_C._cuda_getAllocator())


def _snapshot(device=None):
    return _C._cuda_memorySnapshot(None)


def _dump_snapshot(filename="dump_snapshot.pickle"):
    with open(filename, "wb") as f:
        pickle.dump(_snapshot(), f)


if _fake.FLAVOUR in ("new", "v21", "cpu"):
    def _record_memory_history_legacy(enabled, record_context=True, trace_alloc_max_entries=1,
                                      trace_alloc_record_context=False, device=None,
                                      record_context_cpp=False, clear_history=False):
        _C._cuda_record_memory_history_legacy(enabled, record_context, trace_alloc_max_entries,
                                              trace_alloc_record_context, record_context_cpp,
                                              clear_history)

    def _record_memory_history(enabled="all", *args, **kwargs):
        if isinstance(enabled, bool):
            return _record_memory_history_legacy(enabled, *args, **kwargs)
        return _record_memory_history_impl(enabled, *args, **kwargs)

    if _fake.FLAVOUR == "v21":
        def _record_memory_history_impl(enabled="all", context="all", stacks="all",
                                        max_entries=sys.maxsize, device=None):
            _C._cuda_record_memory_history(enabled, context, stacks, max_entries)
    else:
        def _record_memory_history_impl(enabled="all", context="all", stacks="all",
                                        max_entries=sys.maxsize, device=None, clear_history=False,
                                        compile_context=False, global_record_annotations=False,
                                        skip_actions=None):
            _C._cuda_record_memory_history(enabled, context, stacks, max_entries, clear_history,
                                           compile_context, global_record_annotations,
                                           skip_actions or [])

        _record_memory_history.__signature__ = signature(_record_memory_history_impl)

elif _fake.FLAVOUR == "legacy":
    def _record_memory_history(enabled, record_context=True, trace_alloc_max_entries=1,
                               trace_alloc_record_context=False, device=None,
                               _enable_expensive_cpp=False):
        _C._cuda_record_memory_history_legacy(enabled, record_context, trace_alloc_max_entries,
                                              trace_alloc_record_context, _enable_expensive_cpp)

if _fake.FLAVOUR == "nohistory":
    del _snapshot
