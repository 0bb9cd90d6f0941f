"""A small CNN trained with JAX (flax and optax where installed, else plain JAX), for the
determinism check of tests/gpu/jax_determinism.sh: prints each step's loss as a float hex, so that
two runs can be compared bit for bit.

Usage: python3 jax_train.py [STEPS]   prints "loss <step> <hex>" lines and "done"
"""
import sys

import jax
import jax.numpy as jnp
import numpy as np

STEPS = int(sys.argv[1]) if len(sys.argv) > 1 else 20
BATCH = 128


def data(step):
    rng = np.random.default_rng(step)
    x = rng.standard_normal((BATCH, 32, 32, 3), dtype=np.float32)
    y = rng.integers(0, 10, BATCH)
    return jnp.asarray(x), jnp.asarray(y)


try:
    import flax.linen as nn
    import optax

    class CNN(nn.Module):
        @nn.compact
        def __call__(self, x):
            x = nn.relu(nn.Conv(64, (3, 3))(x))
            x = nn.relu(nn.Conv(64, (3, 3))(x))
            x = nn.avg_pool(x, (2, 2), (2, 2))
            x = nn.relu(nn.Conv(128, (3, 3))(x))
            x = nn.avg_pool(x, (2, 2), (2, 2))
            x = x.reshape((x.shape[0], -1))
            x = nn.relu(nn.Dense(256)(x))
            return nn.Dense(10)(x)

    model = CNN()
    params = model.init(jax.random.PRNGKey(0), jnp.zeros((1, 32, 32, 3)))
    opt = optax.adam(1e-3)
    state = opt.init(params)

    def loss_fn(p, x, y):
        logits = model.apply(p, x)
        return optax.softmax_cross_entropy_with_integer_labels(logits, y).mean()

    @jax.jit
    def step(p, s, x, y):
        loss, g = jax.value_and_grad(loss_fn)(p, x, y)
        u, s = opt.update(g, s, p)
        return optax.apply_updates(p, u), s, loss

    kind = "flax+optax"
except ImportError:
    k = jax.random.split(jax.random.PRNGKey(0), 4)
    params = {
        "c1": jax.random.normal(k[0], (3, 3, 3, 64)) * 0.1,
        "c2": jax.random.normal(k[1], (3, 3, 64, 128)) * 0.05,
        "d": jax.random.normal(k[2], (16 * 16 * 128, 10)) * 0.01,
    }
    state = None

    def forward(p, x):
        dn = ("NHWC", "HWIO", "NHWC")
        x = jax.nn.relu(jax.lax.conv_general_dilated(x, p["c1"], (1, 1), "SAME", dimension_numbers=dn))
        x = jax.nn.relu(jax.lax.conv_general_dilated(x, p["c2"], (2, 2), "SAME", dimension_numbers=dn))
        return x.reshape((x.shape[0], -1)) @ p["d"]

    def loss_fn(p, x, y):
        logp = jax.nn.log_softmax(forward(p, x))
        return -jnp.take_along_axis(logp, y[:, None], 1).mean()

    @jax.jit
    def step(p, s, x, y):
        loss, g = jax.value_and_grad(loss_fn)(p, x, y)
        return jax.tree_util.tree_map(lambda a, b: a - 0.01 * b, p, g), s, loss

    kind = "plain JAX"

print("model", kind, jax.__version__, flush=True)
for i in range(STEPS):
    x, y = data(i)
    params, state, loss = step(params, state, x, y)
    print("loss", i, float(loss).hex(), flush=True)
print("done", flush=True)
