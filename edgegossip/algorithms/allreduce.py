"""All-reduce SGD, the reliable baseline: every step the workers' gradients are averaged,

    g = (1/W) sum_w g_w;   x_w <- step(x_w, g)   for every w,

over a retransmitting transport, so all replicas stay identical. A ring all-reduce moves
2 (W - 1) / W of the model per worker per step, which is what we count as its traffic.
"""

from __future__ import annotations

import numpy as np

from edgegossip.algorithms.base import Algorithm, World


def average(grads: list[np.ndarray], out: np.ndarray) -> np.ndarray:
    np.copyto(out, grads[0])
    for g in grads[1:]:
        out += g
    out *= np.float32(1.0 / len(grads))
    return out


def ring_bytes_per_step(model_bytes: int, workers: int) -> float:
    return 2.0 * (workers - 1) / workers * model_bytes


class AllReduce(Algorithm):
    name = "allreduce"
    datagrams = False  # a ZeroMQ TCP ring: retransmitting, no link keys, no inbox
    peers = "all"
    whole_gradient = True
    protocol = "edgegossip.protocol.allreduce:RingAllReduce"

    @classmethod
    def sim_step(cls, world: World) -> None:
        average(world.grads, world.avg_grad)
        for w in range(world.n):
            world.opts[w].step(world.xs[w], world.avg_grad)
        world.ring_bytes += ring_bytes_per_step(world.plan.model_bytes, world.n)

    @classmethod
    def sim_bytes_per_worker(cls, world: World) -> float:
        return world.ring_bytes
