"""RPS between devices without a barrier (algorithm: edgegossip/algorithms/rps.py).

Worker k serves block k of W. Every `rps_period` local steps, if its sender is idle, worker k:
1. sends block s of its parameters to every server s != k (REDUCE, its own round counter);
2. as server, averages its block with the newest REDUCE round from each peer that has finished
   arriving and that it has not used before (per-chunk masks; its own copy always counts), and
   sends the averaged block to every peer (GATHER).
A worker applies a server's GATHER once its round has finished arriving: masked copy of the
chunks that came, its own block kept where they did not. Workers run at their own pace, so a
server averages the copies that reached it since its last iteration: the asynchronous reading
of the paper's reduce-scatter / all-gather. With a lossy payload each block sent carries the
rounding of the ones before forward (algorithms/rps.py: Carry), as in the simulator.
"""

from __future__ import annotations

import numpy as np

from edgegossip.algorithms import rps
from edgegossip.dataplane import payload, wire
from edgegossip.protocol.base import Context, Protocol
from edgegossip.protocol.bound import Bound

SETTLE_S = 0.5


class RpsProtocol(Protocol):
    def __init__(self, ctx: Context):
        super().__init__(ctx)
        self.W = ctx.cfg.workers
        self.me = ctx.cfg.id
        self.round = 0
        self.used_reduce: dict[int, int] = {}  # peer -> last REDUCE round averaged in
        self.seen_gather: dict[int, int] = {}  # server -> last GATHER round noted
        self.pending_gather: dict[int, int] = {}
        self.latest_reduce: dict[int, int] = {}
        self._y = np.empty(ctx.plan.n_params, np.float32)
        self._mask = np.zeros(ctx.plan.n_chunks, np.uint8)
        self._acc = np.empty(ctx.plan.n_params, np.float32)
        self._count = np.empty(ctx.plan.n_chunks, np.int32)
        self.blocks = [rps.block_slice(ctx.plan, k, self.W) for k in range(self.W)]
        codec = payload.codec(ctx.cfg.payload)
        self.carry = rps.Carry(codec, ctx.plan, self.W) if rps.carries(codec) else None
        self.bound = Bound(
            ctx.plan, sorted(ctx.peers), ctx.cfg.bound
        )  # per block: what a peer may move

    def _carried(self, vec: np.ndarray, blocks: list[int]) -> None:
        """A snapshot's blocks as they go out, their rounding carried forward (if lossy)."""
        if self.carry is not None:
            for k in blocks:
                sl = self.blocks[k][0]
                self.carry(vec[sl], sl)

    def before_step(self, x: np.ndarray, step: int) -> None:
        for ev in self.rounds.events():
            if ev.msg_type == wire.MsgType.REDUCE:
                self.latest_reduce[ev.sender] = ev.round
            elif ev.msg_type == wire.MsgType.GATHER:
                self.pending_gather[ev.sender] = ev.round

    def after_step(self, x: np.ndarray, step: int) -> None:
        ctx = self.ctx
        ce = ctx.plan.chunk_elems
        for server, r in list(self.pending_gather.items()):
            if self.rounds.ready(server, wire.MsgType.GATHER, r, SETTLE_S):
                sl, chunks = self.blocks[server]
                got = self.rounds.collect(server, wire.MsgType.GATHER, r, 0.0, self._y, self._mask)
                self.record(self._mask, got, len(chunks))
                mask = self._mask[chunks.start : chunks.stop]
                if self.bound.admit(server, self._y[sl], x[sl], mask):
                    rps.gather(x[sl], self._y[sl], mask, ce)
                del self.pending_gather[server]
        if step % ctx.cfg.rps_period or self.sender.busy:
            return
        snap = self.snapshots.take(x)
        if snap is None:
            ctx.exchanges["skipped"] += 1
            return
        self.round += 1
        self._carried(snap.vec, list(ctx.peers))
        self.sender.broadcast(
            [(s, self.blocks[s][1], s) for s in ctx.peers], snap, wire.MsgType.REDUCE, self.round
        )
        snap.release()
        sl, chunks = self.blocks[self.me]
        received = []
        for w, r in self.latest_reduce.items():
            if r > self.used_reduce.get(w, 0) and self.rounds.ready(
                w, wire.MsgType.REDUCE, r, SETTLE_S
            ):
                got = self.rounds.collect(w, wire.MsgType.REDUCE, r, 0.0, self._y, self._mask)
                self.used_reduce[w] = r
                mask = self._mask[chunks.start : chunks.stop]
                if got and self.bound.admit(w, self._y[sl], x[sl], mask):
                    received.append((self._y[sl].copy(), mask.copy()))
        rps.reduce(x[sl], received, ce, self._acc, self._count)
        snap = self.snapshots.take(x)
        if snap is None:  # the REDUCE copy is still being sent: serve this block next time
            ctx.exchanges["skipped"] += 1
            return
        self._carried(snap.vec, [self.me])
        self.sender.broadcast(
            [(peer, chunks, self.me) for peer in ctx.peers], snap, wire.MsgType.GATHER, self.round
        )
        snap.release()

    def metrics(self) -> dict:
        return {**super().metrics(), **self.bound.metrics()}
