"""`edgegossip bench shard`: what holding a device's MNIST shard deflated (data/packed.py) saves
and costs, against the same rows held plain (the reference), in one process.

Rows: the memory the shard and its held-out slice take, the time to hand the training loop a
normalised batch of 32 shuffled rows, and one held-out evaluation of the seed MLP; beside them
the MLP's own training step (forward, backward, Nesterov update) on the same batch, so the cost
reads as a share of a step."""

from __future__ import annotations

import time

import numpy as np

from edgegossip.bench.timing import best_time
from edgegossip.data import device
from edgegossip.models.mlp import MLP
from edgegossip.models.optim import NesterovSGD


def run(workers: int = 4, eval_examples: int = 2000, batch: int = 32) -> dict:
    packed = device.from_mnist(0, workers, "iid", 0, eval_examples)
    plain = device.DeviceData(
        np.asarray(packed.x), packed.y, np.asarray(packed.x_eval), packed.y_eval
    )
    model = MLP.seed_mlp(0)
    x = model.init(0)
    g = np.zeros(model.n_params, np.float32)
    opt = NesterovSGD(model.n_params)
    rng = np.random.default_rng(0)
    order = rng.permutation(packed.rows)
    xb, yb = plain.batch(order[:batch])

    def train_step() -> None:
        model.loss_grad(x, g, xb, yb, rng)
        opt.step(x, g)

    step_ms = best_time(train_step, repeat=5) * 1e3
    rows = []
    for name, data in (("plain", plain), ("packed", packed)):
        k = [0]

        def one_batch(data=data, k=k) -> None:
            lo = (k[0] * batch) % (len(order) - batch)
            k[0] += 1
            data.batch(order[lo : lo + batch])

        batch_us = best_time(one_batch) * 1e6
        t0 = time.perf_counter()
        data.accuracy(model, x, eval_examples)
        eval_ms = (time.perf_counter() - t0) * 1e3
        held = _nbytes(data.x) + _nbytes(data.x_eval)
        rows.append(
            {
                "rows": name,
                "examples": data.rows + len(data.x_eval),
                "mb": round(held / 1e6, 2),
                "batch_us": round(batch_us, 1),
                "eval_ms": round(eval_ms, 1),
                "mlp_step_ms": round(step_ms, 2),
                "batch_share_of_step": round(batch_us / 1e3 / step_ms, 4),
            }
        )
    return {"benchmark": "shard", "workers": workers, "results": rows}


def _nbytes(x) -> int:
    return int(x.nbytes)
