"""CuPy under the shim: default memory pool, a matmul and many allocations; prints RESULT json."""
import json

import cupy as cp

cp.random.seed(0)
a = cp.random.rand(2048, 2048, dtype=cp.float32)
b = a @ a
checksum = float(b.sum())
for i in range(500):
    x = cp.empty((i % 50 + 1) * 100_000, dtype=cp.float32)
    x.fill(i)
    assert float(x[-1]) == float(i)
    del x
pool = cp.get_default_memory_pool()
print("RESULT " + json.dumps({"checksum": checksum.hex(), "pool_used": pool.used_bytes(),
                              "pool_total": pool.total_bytes()}), flush=True)
