"""JAX under the shim (default BFC preallocation, or XLA_PYTHON_CLIENT_ALLOCATOR=platform);
prints RESULT json with a checksum of a jitted computation and of many allocations."""
import json

import jax
import jax.numpy as jnp

key = jax.random.PRNGKey(0)
x = jax.random.normal(key, (2048, 2048), dtype=jnp.float32)
y = jax.jit(lambda m: (m @ m).sum())(x)
total = float(y)
acc = 0.0
for i in range(100):
    z = jnp.full(((i % 20) + 1) * 100_000, float(i), dtype=jnp.float32)
    acc += float(z[-1])
    del z
print("RESULT " + json.dumps({"checksum": total.hex(), "acc": acc, "devices": str(jax.devices())}), flush=True)
