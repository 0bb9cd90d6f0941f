"""JAX under a cap (step `cap` of scripts/gpu-check.sh): XLA's default BFC allocator preallocates
XLA_PYTHON_CLIENT_MEM_FRACTION (default 0.75) of the device memory it sees through cuMemGetInfo.
Prints RESULT {"bytes_limit": ..., "memory_stats": {...}, "checksum": ...}."""
import json

import jax
import jax.numpy as jnp

d = jax.devices()[0]
x = jax.random.normal(jax.random.PRNGKey(0), (1024, 1024), dtype=jnp.float32)
y = float(jax.jit(lambda m: (m @ m).sum())(x))
stats = d.memory_stats() or {}
print("RESULT " + json.dumps({"device": str(d), "bytes_limit": stats.get("bytes_limit"),
                              "memory_stats": {k: v for k, v in stats.items() if isinstance(v, int)},
                              "checksum": y.hex()}), flush=True)
