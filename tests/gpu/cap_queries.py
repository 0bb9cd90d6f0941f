"""What a capped device looks like from Python (step `cap` of scripts/gpu-check.sh,
tests/gpu/cap_check.sh): prints RESULT {"mem_get_info": [free, total], "props_total": ..., "nvml":
{...} or null}."""
import ctypes
import json

import torch

free, total = torch.cuda.mem_get_info(0)
out = {"mem_get_info": [free, total], "props_total": torch.cuda.get_device_properties(0).total_memory}
try:
    import pynvml  # nvidia-ml-py

    pynvml.nvmlInit()
    h = pynvml.nvmlDeviceGetHandleByIndex(0)
    m = pynvml.nvmlDeviceGetMemoryInfo(h)
    out["nvml"] = {"total": m.total, "free": m.free, "used": m.used, "via": "pynvml"}
except Exception as e:  # noqa: BLE001 -- pynvml absent: ask libnvidia-ml ourselves, as pynvml does
    try:
        lib = ctypes.CDLL("libnvidia-ml.so.1")

        class Mem(ctypes.Structure):
            _fields_ = [("total", ctypes.c_ulonglong), ("free", ctypes.c_ulonglong), ("used", ctypes.c_ulonglong)]

        assert lib.nvmlInit_v2() == 0
        h = ctypes.c_void_p()
        assert lib.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(h)) == 0
        m = Mem()
        assert lib.nvmlDeviceGetMemoryInfo(h, ctypes.byref(m)) == 0
        out["nvml"] = {"total": m.total, "free": m.free, "used": m.used, "via": f"ctypes ({type(e).__name__} from pynvml)"}
    except Exception as e2:  # noqa: BLE001
        out["nvml"] = None
        out["nvml_error"] = f"{type(e2).__name__}: {e2}"
print("RESULT " + json.dumps(out), flush=True)
