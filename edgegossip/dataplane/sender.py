"""Background sender: the training loop hands over a snapshot of its parameters and goes on;
this thread cuts it into datagrams and sends them paced, so a slow link never stalls a step.

Snapshots come from a small pool of preallocated vectors, so memory stays bounded: when every
buffer is in flight a new send is skipped (and counted) rather than queued. One snapshot can
serve several destinations (broadcast), so an RPS iteration to W - 1 peers needs one buffer."""

from __future__ import annotations

import logging
import queue
import threading
from dataclasses import dataclass

import numpy as np

from edgegossip.dataplane import wire
from edgegossip.dataplane.outbox import Encoder
from edgegossip.transport.base import Endpoint, Transport

log = logging.getLogger(__name__)


def send_vector(transport: Transport, encoder: Encoder, endpoint: Endpoint, receiver: int,
                vec: np.ndarray, msg_type: int, round: int, chunks: range | None = None,
                block: int = 0, flags: int = 0) -> None:
    """Frame vec (or its chunks) for worker `receiver` and send it to its endpoint, batched as
    the transport prefers."""
    size = len(encoder.prefix) + wire.HEADER_SIZE + encoder.plan.chunk_bytes + wire.TAG_SIZE
    batch = transport.batch_hint(size)
    for n in encoder.batches(vec, msg_type, round, chunks, block, flags, receiver, batch):
        transport.send_batch(endpoint, encoder.rows, encoder.lengths, n)


@dataclass
class Job:
    peer: int
    vec: np.ndarray | None
    msg_type: int
    round: int
    chunks: range | None
    block: int
    flags: int
    last: bool = True  # the last job using vec: it returns the buffer to the pool


class Sender:
    def __init__(self, transport: Transport, encoder: Encoder, n_params: int,
                 endpoints: dict[int, Endpoint], pool: int = 4):
        self.transport = transport
        self.encoder = encoder
        self.endpoints = endpoints  # worker id -> where its datagrams go
        self._free: queue.Queue[np.ndarray] = queue.Queue()
        for _ in range(pool):
            self._free.put(np.empty(n_params, np.float32))
        self._jobs: queue.Queue[Job | None] = queue.Queue()
        self._thread = threading.Thread(target=self._run, name="sender", daemon=True)
        self._thread.start()
        self.errors = 0
        self.skipped = 0

    def send(self, peer: int, vec: np.ndarray, msg_type: int, round: int,
             chunks: range | None = None, block: int = 0, flags: int = 0) -> bool:
        """Queue a copy of vec (or of its chunks); False if every buffer is busy (skipped)."""
        return self.broadcast([(peer, chunks, block)], vec, msg_type, round, flags)

    def broadcast(self, targets: list[tuple[int, range | None, int]], vec: np.ndarray,
                  msg_type: int, round: int, flags: int = 0) -> bool:
        """Queue one copy of vec for every (peer, chunks, block) in targets; False, sending
        nothing, if every buffer is busy."""
        if not targets:
            return True
        try:
            buf = self._free.get_nowait()
        except queue.Empty:
            self.skipped += len(targets)
            return False
        np.copyto(buf, vec)
        for k, (peer, chunks, block) in enumerate(targets):
            self._jobs.put(Job(peer, buf, msg_type, round, chunks, block, flags,
                               last=k == len(targets) - 1))
        return True

    def request(self, peer: int, round: int, flags: int = 0) -> None:
        self._jobs.put(Job(peer, None, -1, round, None, 0, flags))  # type: ignore[arg-type]

    @property
    def busy(self) -> int:
        return self._jobs.qsize()

    def _run(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                return
            try:
                endpoint = self.endpoints[job.peer]
                if job.vec is None:
                    self.transport.send(endpoint, self.encoder.request(job.round, job.flags, job.peer))
                    continue
                send_vector(self.transport, self.encoder, endpoint, job.peer, job.vec,
                            job.msg_type, job.round, job.chunks, job.block, job.flags)
            except OSError as e:  # unreachable peer, interface gone: the datagrams are lost
                self.errors += 1
                log.debug("send to %s failed: %s", job.peer, e)
            finally:
                if job.vec is not None and job.last:
                    self._free.put(job.vec)

    def close(self, timeout: float = 2.0) -> None:
        self._jobs.put(None)
        self._thread.join(timeout)
