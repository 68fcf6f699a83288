"""All-reduce SGD over ZeroMQ TCP: the reliable, retransmitting baseline (ring all-reduce).

Workers form a ring by id. Each step the gradient is cut into W blocks; in W - 1 reduce-scatter
phases each worker sends one block to its successor and adds the block it receives from its
predecessor; in W - 1 all-gather phases the summed blocks travel round the ring. Every worker
ends with the same mean gradient and takes the same optimizer step. Traffic per worker per step:
2 (W - 1) / W of the model. TCP retransmits what the network drops, so loss costs time, not
accuracy; a peer that stops answering stalls the ring, which is why the gossip algorithms exist.
The ring listens on the agent's UDP port number, over TCP.
"""

from __future__ import annotations

import struct
import time

import numpy as np
import zmq

from edgegossip.errors import EdgegossipError
from edgegossip.models.optim import NesterovSGD
from edgegossip.protocol.base import Context, Protocol, Stopped

HEAD = struct.Struct("<QII")  # step, phase, block
TIMEOUT_S = 120.0
SLICE_MS = 200  # wait in slices so SIGTERM is seen while a neighbour is slow


class RingStalled(EdgegossipError, RuntimeError):
    pass


class RingAllReduce(Protocol):
    def __init__(self, ctx: Context):
        super().__init__(ctx)
        cfg = ctx.cfg
        self.W = cfg.workers
        self.me = cfg.id
        self.zctx: zmq.Context = zmq.Context.instance()
        host, port = cfg.listen_endpoint
        self.pull = self.zctx.socket(zmq.PULL)
        self.pull.setsockopt(zmq.LINGER, 0)
        self.pull.bind(f"tcp://{host}:{port}")
        nxt = ctx.peers[(self.me + 1) % self.W]
        self.push = self.zctx.socket(zmq.PUSH)
        self.push.setsockopt(zmq.LINGER, 0)
        self.push.connect(f"tcp://{nxt[0]}:{nxt[1]}")
        n = ctx.plan.n_params
        bounds = [n * k // self.W for k in range(self.W + 1)]
        self.blocks = [slice(bounds[k], bounds[k + 1]) for k in range(self.W)]
        self.sum = np.empty(n, np.float32)
        self.step_no = 0
        self.bytes_sent = 0

    def _wait(self, sock: zmq.Socket, event: int, phase: int) -> None:
        deadline = time.monotonic() + TIMEOUT_S
        while not sock.poll(SLICE_MS, event):
            if self.ctx.stop.is_set():
                raise Stopped()
            if time.monotonic() > deadline:
                raise RingStalled(
                    f"ring all-reduce stalled at step {self.step_no} phase {phase}: "
                    "a neighbour is not answering"
                )

    def _exchange(self, phase: int, send_block: int) -> tuple[int, np.ndarray]:
        sl = self.blocks[send_block]
        self._wait(self.push, zmq.POLLOUT, phase)
        # copy=True: libzmq sends from its own copy; with copy=False it would read self.sum
        # while later phases overwrite it, and a slow link turns that into diverging replicas
        self.push.send_multipart(
            [HEAD.pack(self.step_no, phase, send_block), self.sum[sl].tobytes()], copy=True
        )
        self._wait(self.pull, zmq.POLLIN, phase)
        head, body = self.pull.recv_multipart(copy=False)
        self.bytes_sent += (sl.stop - sl.start) * 4
        step, ph, block = HEAD.unpack(bytes(head.buffer))
        if not 0 <= block < self.W or len(body.buffer) != 4 * (
            self.blocks[block].stop - self.blocks[block].start
        ):
            raise RingStalled(f"ring message for block {block} has the wrong size")
        if (step, ph) != (self.step_no, phase):
            raise RingStalled(
                f"ring out of step: got step {step} phase {ph}, expected {self.step_no} {phase}"
            )
        return block, np.frombuffer(body.buffer, np.float32)

    def step(self, x: np.ndarray, g: np.ndarray, opt: NesterovSGD) -> None:
        W, me = self.W, self.me
        np.copyto(self.sum, g)
        for phase in range(W - 1):  # reduce-scatter
            block, data = self._exchange(phase, (me - phase) % W)
            self.sum[self.blocks[block]] += data
        for phase in range(W - 1):  # all-gather
            block, data = self._exchange(W - 1 + phase, (me + 1 - phase) % W)
            self.sum[self.blocks[block]] = data
        self.sum *= np.float32(1.0 / W)
        opt.step(x, self.sum)
        self.step_no += 1
        self.ctx.exchanges["completed"] += 1

    def metrics(self) -> dict:
        # a reliable TCP ring: what it sent is what arrived, and nothing is dropped
        return {
            "bytes_sent": self.bytes_sent,
            "datagrams_sent": 0,
            "bytes_received": self.bytes_sent,
            "datagrams_received": 0,
            "datagrams_dropped": 0,
            "drops": {},
        }

    def close(self) -> None:
        self.push.close(linger=0)
        self.pull.close(linger=0)
