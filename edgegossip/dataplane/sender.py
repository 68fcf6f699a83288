"""Background sender: the training loop hands over a snapshot of its parameters and goes on;
this thread cuts it into datagrams and sends them paced, so a slow link never stalls a step.

Snapshots come from one small pool of preallocated vectors (Snapshots) that the protocol and
this thread share: the protocol takes a copy of x, hands it to send() (no second copy) and keeps
it as long as its exchange needs it (Elastic Gossip applies its own pre-step copy when the
peer's answer is in); the buffer returns to the pool when both are done with it. When every
buffer is in use a new exchange is skipped (and counted) rather than queued, so memory stays
bounded: on a 512 MB board every copy of the model counts. One snapshot can serve several
destinations (broadcast), so an RPS iteration to W - 1 peers needs one buffer."""

from __future__ import annotations

import logging
import queue
import threading
from dataclasses import dataclass

import numpy as np

from edgegossip.dataplane import wire
from edgegossip.dataplane.outbox import WHOLE, Encoder, Framing
from edgegossip.transport.base import Endpoint, Transport
from edgegossip.transport.peers import PeerBook

log = logging.getLogger(__name__)


def send_vector(
    transport: Transport,
    encoder: Encoder,
    endpoint: Endpoint,
    receiver: int,
    vec: np.ndarray,
    msg_type: int,
    round: int,
    framing: Framing = WHOLE,
) -> None:
    """Frame vec (or its chunks) for worker `receiver` and send it to its endpoint, batched as
    the transport prefers."""
    chunks, block, flags, weight = framing
    size = (
        len(encoder.prefix)
        + wire.HEADER_SIZE
        + encoder.codec.encoded_len(encoder.plan.chunk_elems)
        + wire.TAG_SIZE
    )
    batch = transport.batch_hint(size)
    link = transport.paced_link(endpoint)
    if link is not None:
        try:
            if encoder.send_paced(link, vec, msg_type, round, framing, receiver, batch):
                return
        finally:
            transport.settle(link)
    for n in encoder.batches(vec, msg_type, round, chunks, block, flags, receiver, batch, weight):
        transport.send_batch(endpoint, encoder.rows, encoder.lengths, n)


class Snapshot:
    """A copy of the parameters, shared by whoever holds it; back to the pool on the last
    release()."""

    __slots__ = ("vec", "_refs", "_pool")

    def __init__(self, vec: np.ndarray, pool: Snapshots):
        self.vec = vec
        self._refs = 0
        self._pool = pool

    def hold(self) -> Snapshot:
        self._pool._hold(self)
        return self

    def release(self) -> None:
        self._pool._release(self)


class Snapshots:
    """`size` preallocated parameter copies; buffers are touched (made resident) only when
    first used."""

    def __init__(self, n_params: int, size: int):
        self._free = [Snapshot(np.empty(n_params, np.float32), self) for _ in range(size)]
        self._lock = threading.Lock()
        self.skipped = 0  # takes refused because every copy was in use

    def take(self, x: np.ndarray, count: bool = True) -> Snapshot | None:
        """A copy of x held once by the caller, or None (counted, unless count is False: a
        checkpoint that waits for a free copy skips no exchange) if every buffer is in use."""
        with self._lock:
            if not self._free:
                self.skipped += count
                return None
            snap = self._free.pop()
            snap._refs = 1
        np.copyto(snap.vec, x)
        return snap

    def _hold(self, snap: Snapshot) -> None:
        with self._lock:
            snap._refs += 1

    def _release(self, snap: Snapshot) -> None:
        with self._lock:
            snap._refs -= 1
            if snap._refs == 0:
                self._free.append(snap)


@dataclass
class Job:
    peer: int
    snap: Snapshot | None
    msg_type: int
    round: int
    chunks: range | None
    block: int
    flags: int
    weight: int = 0  # push-sum running sum of the link, counts (algorithms/gossip_push.py)


class Sender:
    def __init__(self, transport: Transport, encoder: Encoder, peers: PeerBook):
        self.transport = transport
        self.encoder = encoder
        self.peers = peers  # worker id -> where its datagrams go
        self._jobs: queue.Queue[Job | None] = queue.Queue()
        self._thread = threading.Thread(target=self._run, name="sender", daemon=True)
        self._thread.start()
        self.errors = 0

    def send(
        self,
        peer: int,
        snap: Snapshot,
        msg_type: int,
        round: int,
        chunks: range | None = None,
        block: int = 0,
        flags: int = 0,
        weight: int = 0,
    ) -> None:
        """Queue snap's parameters (or their chunks) for peer; the snapshot is held until sent."""
        self.broadcast([(peer, chunks, block)], snap, msg_type, round, flags, weight)

    def broadcast(
        self,
        targets: list[tuple[int, range | None, int]],
        snap: Snapshot,
        msg_type: int,
        round: int,
        flags: int = 0,
        weight: int = 0,
    ) -> None:
        """Queue snap for every (peer, chunks, block) in targets."""
        for peer, chunks, block in targets:
            self._jobs.put(Job(peer, snap.hold(), msg_type, round, chunks, block, flags, weight))

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
                endpoint = self.peers.endpoint(job.peer)
                if endpoint is None:  # its name does not resolve (yet): lost like a datagram
                    self.peers.skipped += 1
                    continue
                if job.snap is None:
                    self.transport.send(
                        endpoint, self.encoder.request(job.round, job.flags, job.peer)
                    )
                    continue
                send_vector(
                    self.transport,
                    self.encoder,
                    endpoint,
                    job.peer,
                    job.snap.vec,
                    job.msg_type,
                    job.round,
                    Framing(job.chunks, job.block, job.flags, job.weight),
                )
            except OSError as e:  # unreachable peer, interface gone: the datagrams are lost
                self.errors += 1
                log.debug("send to %s failed: %s", job.peer, e)
            finally:
                if job.snap is not None:
                    job.snap.release()

    def close(self, timeout: float = 2.0) -> None:
        self._jobs.put(None)
        self._thread.join(timeout)
