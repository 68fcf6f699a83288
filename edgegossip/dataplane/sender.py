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
import time
from dataclasses import dataclass

import numpy as np

from edgegossip.dataplane import congestion
from edgegossip.dataplane.congestion import FEEDBACK_S, Controller, Report
from edgegossip.dataplane.outbox import WHOLE, Encoder, Framing
from edgegossip.transport.base import Endpoint, Transport
from edgegossip.transport.pacing import WIRE_OVERHEAD
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
    batch = transport.batch_hint(encoder.datagram_bytes)
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
    """The sender thread: sends each queued job, paced as the rate controller says
    (dataplane/congestion), in slices of FEEDBACK_S so a long round follows the controller while
    it is sent, and between slices the receive thread's reports on the links coming in."""

    def __init__(
        self,
        transport: Transport,
        encoder: Encoder,
        peers: PeerBook,
        controller: Controller | None = None,
    ):
        self.transport = transport
        self.encoder = encoder
        self.peers = peers  # worker id -> where its datagrams go
        rate = transport.pacer.rate if transport.pacer is not None else None
        self.controller = controller or congestion.make("fixed", rate)
        self.controller.session = encoder.session
        self._reports: dict[int, Report] = {}  # the newest report due to each peer
        self._reports_lock = threading.Lock()
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

    def report(self, peer: int, report: Report) -> None:
        """Our report on the link from peer, to send at the next slice (receive thread)."""
        with self._reports_lock:
            self._reports[peer] = report

    @property
    def busy(self) -> int:
        return self._jobs.qsize()

    def room(self, message_bytes: int, horizon_s: float) -> int | None:
        """How many messages of message_bytes the controller's pace sends in horizon_s (None:
        unpaced, no bound)."""
        rate = self.controller.device_rate()
        return None if rate is None else int(horizon_s * rate / max(1, message_bytes))

    def _reports_now(self) -> None:
        """The reports due, while the thread has nothing else to send; a failed send is lost
        like a datagram."""
        try:
            self._send_reports()
        except OSError as e:
            self.errors += 1
            log.debug("a report failed: %s", e)

    def _send_reports(self) -> None:
        with self._reports_lock:
            due, self._reports = self._reports, {}
        for peer, report in due.items():
            endpoint = self.peers.endpoint(peer)
            if endpoint is None:
                continue
            self._pace(peer)
            self.transport.send(endpoint, self.encoder.feedback(report, peer))
            self._sent(peer, self.encoder.seq(peer), time.perf_counter())

    def _pace(self, peer: int) -> None:
        self.transport.pace(self.controller.rate(peer))

    def _sent(self, peer: int, first: int, t_first: float) -> None:
        """Tell the controller that first .. the link's last sequence number left since
        t_first."""
        self.controller.sent(peer, first, self.encoder.seq(peer), t_first, time.perf_counter())

    def _slices(self, span: range, peer: int) -> list[range]:
        """span cut into runs of chunks that take about FEEDBACK_S at the peer's pace."""
        rate = self.controller.rate(peer)
        if rate is None:
            return [span]
        frame = self.encoder.datagram_bytes + WIRE_OVERHEAD
        n = max(1, int(rate * FEEDBACK_S / frame))
        return [span[i : i + n] for i in range(0, len(span), n)]

    def _send_job(self, job: Job, endpoint: Endpoint) -> None:
        peer = job.peer
        if job.snap is None:
            self._pace(peer)
            t0 = time.perf_counter()
            self.transport.send(endpoint, self.encoder.request(job.round, job.flags, peer))
            self._sent(peer, self.encoder.seq(peer), t0)
            return
        span = range(self.encoder.plan.n_chunks) if job.chunks is None else job.chunks
        for part in self._slices(span, peer):
            self._send_reports()
            self._pace(peer)
            first = self.encoder.seq(peer) + 1
            t0 = max(time.perf_counter(), self.transport.departure())
            framing = Framing(part, job.block, job.flags, job.weight)
            send_vector(
                self.transport,
                self.encoder,
                endpoint,
                peer,
                job.snap.vec,
                job.msg_type,
                job.round,
                framing,
            )
            self._sent(peer, first, t0)

    def _run(self) -> None:
        while True:
            try:
                job = self._jobs.get(timeout=FEEDBACK_S / 2)
            except queue.Empty:
                self._reports_now()
                continue
            if job is None:
                return
            try:
                endpoint = self.peers.endpoint(job.peer)
                if endpoint is None:  # its name does not resolve (yet): lost like a datagram
                    self.peers.skipped += 1
                    continue
                self._send_job(job, endpoint)
                self._send_reports()
            except OSError as e:  # unreachable peer, interface gone: the datagrams are lost
                self.errors += 1
                log.debug("send to %s failed: %s", job.peer, e)
            finally:
                if job.snap is not None:
                    job.snap.release()

    def close(self, timeout: float = 2.0) -> None:
        self._jobs.put(None)
        self._thread.join(timeout)
