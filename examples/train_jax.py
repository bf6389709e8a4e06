"""Train a tiny jitted CNN on the digits database with plain JAX and picpac's JaxLoader.

    python examples/train_jax.py                # 12 epochs, CPU
    python examples/train_jax.py --epochs 1     # one short epoch

The database is examples/digits.py's (built on the first run, kept in --db). The optimizer is
optax's Adam when optax is installed, else plain SGD with momentum written out below. The loader
fills the last batch of a pass up (``pad``), so every batch has one shape and the step is compiled
once; the filler is weighted 0 in the loss and left out of the accuracy. The last line printed is
``held-out accuracy A``.
"""
from __future__ import annotations

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import digits

STREAM = digits.STREAM


def main(argv=None) -> float:
    parser = digits.arguments(__doc__)
    parser.add_argument("--lr", type=float, default=None, help="default: 2e-3 with optax's Adam, 0.05 with SGD")
    args = parser.parse_args(argv)
    digits.build(args.db)

    import jax
    import jax.numpy as jnp

    from picpac.adapters.jax import JaxLoader

    try:
        import optax
    except ImportError:
        optax = None

    def init(key):
        shapes = {"c1": (3, 3, 1, 16), "c2": (3, 3, 16, 32), "d1": (8 * 8 * 32, 64), "d2": (64, digits.CLASSES)}
        params = {}
        for (name, shape), k in zip(shapes.items(), jax.random.split(key, len(shapes))):
            fan_in = 1
            for size in shape[:-1]:
                fan_in *= size
            params[name] = jax.random.normal(k, shape) * jnp.sqrt(2.0 / fan_in)
            params[name + "b"] = jnp.zeros(shape[-1])
        return params

    def conv(x, w, b):  # NHWC, 'SAME', then ReLU and 2x2 max pooling
        y = jax.lax.conv_general_dilated(x, w, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC")) + b
        return jax.lax.reduce_window(jax.nn.relu(y), -jnp.inf, jax.lax.max, (1, 2, 2, 1), (1, 2, 2, 1), "VALID")

    def logits_of(params, images):
        x = conv(images, params["c1"], params["c1b"])            # 32 -> 16
        x = conv(x, params["c2"], params["c2b"])                 # 16 -> 8
        x = jax.nn.relu(x.reshape(len(x), -1) @ params["d1"] + params["d1b"])
        return x @ params["d2"] + params["d2b"]

    def loss_of(params, images, labels, weights):
        logp = jax.nn.log_softmax(logits_of(params, images))
        nll = -jnp.take_along_axis(logp, labels[:, None], axis=1)[:, 0]
        return (nll * weights).sum() / weights.sum()

    if optax is not None:
        optimizer = optax.adam(args.lr or 2e-3)
    else:
        lr = args.lr or 0.05

        class optimizer:  # optax's interface: the two calls used here
            @staticmethod
            def init(params):
                return jax.tree.map(jnp.zeros_like, params)

            @staticmethod
            def update(grads, velocity, params=None):
                velocity = jax.tree.map(lambda v, g: 0.9 * v + g, velocity, grads)
                return jax.tree.map(lambda v: -lr * v, velocity), velocity

    @jax.jit
    def step(params, state, images, labels, weights):
        loss, grads = jax.value_and_grad(loss_of)(params, images, labels, weights)
        updates, state = optimizer.update(grads, state, params)
        return jax.tree.map(lambda p, u: p + u, params, updates), state, loss

    @jax.jit
    def correct(params, images, labels, weights):
        return ((logits_of(params, images).argmax(1) == labels) * weights).sum()

    def weights_of(labels, pad):
        return (jnp.arange(len(labels)) < len(labels) - pad).astype(jnp.float32)

    loader = JaxLoader(args.db, **STREAM, **digits.TRAIN)            # (B, 32, 32, 1) float32, int32 labels
    held_out = JaxLoader(args.db, **STREAM, **digits.HELD_OUT)
    params = init(jax.random.key(0))
    state = optimizer.init(params)
    started = time.perf_counter()
    accuracy = 0.0
    for epoch in range(args.epochs):
        loader.set_epoch(epoch)
        losses = []
        for images, labels, pad in loader:
            params, state, loss = step(params, state, images, labels, weights_of(labels, pad))
            losses.append(loss)
        hits = total = 0
        for images, labels, pad in held_out:
            hits += int(correct(params, images, labels, weights_of(labels, pad)))
            total += len(labels) - pad
        accuracy = hits / total
        print(f"epoch {epoch} loss {float(jnp.mean(jnp.stack(losses))):.4f} held-out {accuracy:.4f} "
              f"({time.perf_counter() - started:.1f} s)", flush=True)
    loader.close(), held_out.close()
    print(f"held-out accuracy {accuracy:.4f} ({'optax adam' if optax is not None else 'sgd'})", flush=True)
    return accuracy


if __name__ == "__main__":
    main()
