"""RPS over unreliable networks (Yu et al., ICML 2019, arXiv 1810.07766).

The model is cut into n = W blocks (whole chunks each); worker k serves block k. After its local
step, one iteration is:

1. Reduce-scatter: every worker sends its block k to server k; each chunk may be lost. Server k
   averages, per chunk, the copies that arrived with its own (always included):
       x_k[B_k] <- (x_k[B_k] + sum_w m_w * x_w[B_k]) / (1 + sum_w m_w)
2. All-gather: server k sends the averaged block to every worker; a worker keeps its own block
   where a chunk of it did not arrive:
       x_w[B_k] <- m_k * avg_k + (1 - m_k) * x_w[B_k]
"""

from __future__ import annotations

import numpy as np

from edgegossip import kernels
from edgegossip.algorithms.base import Algorithm, World
from edgegossip.dataplane import wire
from edgegossip.dataplane.chunking import ChunkPlan


def block_slice(plan: ChunkPlan, block: int, n_blocks: int) -> tuple[slice, range]:
    chunks = plan.block_chunks(block, n_blocks)
    a, b = plan.elem_range(chunks)
    return slice(a, b), chunks


def reduce(
    own_block: np.ndarray,
    received: list[tuple[np.ndarray, np.ndarray]],
    chunk_elems: int,
    acc: np.ndarray | None = None,
    count: np.ndarray | None = None,
) -> None:
    """Server side: own_block <- per-chunk average of itself and the copies that arrived.
    Masks are per chunk of the block. acc and count may be passed in to avoid allocation."""
    n = own_block.shape[0]
    nchunks = -(-n // chunk_elems) if n else 0
    if acc is None:
        acc = np.empty(n, np.float32)
    if count is None:
        count = np.empty(nchunks, np.int32)
    np.copyto(acc[:n], own_block)
    count[:nchunks] = 1
    for y, mask in received:
        kernels.masked_accumulate(acc[:n], count[:nchunks], y, mask, chunk_elems)
    kernels.masked_average(own_block, acc[:n], count[:nchunks], chunk_elems)


def gather(block: np.ndarray, averaged: np.ndarray, mask: np.ndarray, chunk_elems: int) -> None:
    """Worker side: take the server's average where it arrived, keep our own elsewhere."""
    kernels.masked_copy(block, averaged, mask, chunk_elems)


class Rps(Algorithm):
    name = "rps"
    settings = ("rps_period",)
    peers = "all"
    receive_buffers = 0
    messages = frozenset({wire.MsgType.REDUCE, wire.MsgType.GATHER})
    rps_blocks = True
    protocol = "edgegossip.protocol.rps:RpsProtocol"

    @classmethod
    def sim_step(cls, world: World) -> None:
        """Local steps, then one iteration over all W blocks (reduce-scatter, all-gather)."""
        world.local_steps()
        xs, plan, net, W, wire_copy = world.xs, world.plan, world.net, world.n, world.wire_copy
        fresh = wire_copy.codec.name != "float32"  # each received block needs its own buffer
        ce = plan.chunk_elems
        averaged = []
        for k in range(W):
            sl, chunks = block_slice(plan, k, W)
            received = []
            for w in range(W):
                if w != k:
                    mask = net.send(w, chunks)[chunks.start : chunks.stop]
                    y = xs[w][sl]
                    received.append((wire_copy(y, np.empty_like(y)) if fresh else y, mask))
            reduce(xs[k][sl], received, ce)
            averaged.append((sl, chunks))
        for k, (sl, chunks) in enumerate(averaged):
            served = wire_copy(xs[k][sl])  # the averaged block as it goes out
            for w in range(W):
                if w != k:
                    mask = net.send(k, chunks)[chunks.start : chunks.stop]
                    gather(xs[w][sl], served, mask, ce)
