"""The small interface both UDP transports implement, and the receive thread that drives one."""

from __future__ import annotations

import logging
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from edgegossip.transport.pacing import Pacer

# libzmq 4.3.x udp_engine buffer, group framing included: a longer RADIO body overflows the
# heap (FACTS), so the wire never frames one for the zmq transport
ZMQ_MAX_DATAGRAM = 8192

log = logging.getLogger(__name__)

Endpoint = tuple[str, int]
Handler = Callable[[memoryview], None]
DropSink = Callable[[str], None]
# fast(rows, lengths, start, stop, prefix, taken) -> how many rows among start .. stop - 1 it
# took, row start among them if any, each marked in taken (a uint8 flag per row); rows it took
# were handled completely, the rest go through the handler one by one, in order
FastPath = Callable[[np.ndarray, np.ndarray, int, int, np.ndarray, np.ndarray], int]


@dataclass
class PacedLink:
    """What a compiled sender needs to frame, pace and send a whole round to one peer itself
    (edgegossip._wire_c.send_paced): the socket, the peer's IPv4 address and port, UDP GSO, and
    the pacer's bucket (rate, burst, when what it booked has left). The transport takes the
    bucket and GSO back with settle()."""

    fd: int
    ip4: np.ndarray
    port: int
    gso: bool
    rate: float  # bytes a second; 0: unpaced
    burst_s: float
    next_at: float
    stop: np.ndarray  # one byte, set when the transport closes: the send ends at the next batch


class Transport(ABC):
    """Datagram transport. send() takes a whole framed datagram ``[len][group][body]``; the
    receive loop hands bodies (framing removed) of datagrams for our group to a handler."""

    name: str
    pacer: Pacer | None = None  # what paces send() and send_batch(), where the transport paces

    def pace(self, rate_bytes_per_s: float | None) -> None:
        """Pace what is sent from now on at this rate (the rate controller's word)."""
        if self.pacer is not None:
            self.pacer.set_rate(rate_bytes_per_s)

    def departure(self) -> float:
        """When (time.perf_counter) the next datagram may leave: what the pacer booked ahead."""
        return self.pacer.next_at if self.pacer is not None and self.pacer.rate else 0.0

    @abstractmethod
    def bind(self, endpoint: Endpoint) -> Endpoint:
        """Start receiving on endpoint; returns the bound endpoint (port 0 picks one)."""

    @abstractmethod
    def send(self, peer: Endpoint, datagram: memoryview) -> None:
        """Send one datagram, paced; blocks rather than drop it on our side."""

    def send_batch(self, peer: Endpoint, rows: np.ndarray, lengths: np.ndarray, n: int) -> None:
        """Send rows[i, :lengths[i]] for i < n, paced, in order."""
        for i in range(n):
            self.send(peer, memoryview(rows[i, : lengths[i]]))

    def batch_hint(self, datagram_bytes: int) -> int:
        """Datagrams per send_batch call this transport handles well."""
        return 1

    def paced_link(self, peer: Endpoint) -> PacedLink | None:
        """The socket and pacer for a compiled sender to send to peer itself, or None (send
        through send_batch)."""
        return None

    def settle(self, link: PacedLink) -> None:
        """Take back the pacer's bucket and GSO state a compiled send left in link."""
        raise NotImplementedError("a transport that offers paced_link() takes it back")

    @abstractmethod
    def recv_loop(
        self, handler: Handler, drop: DropSink, stop: threading.Event, fast: FastPath | None = None
    ) -> None:
        """Receive until stop is set; every read has a timeout so stop is seen promptly. A
        transport that reads in batches may offer each batch to `fast` first."""

    @abstractmethod
    def close(self) -> None: ...

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class ReceiveThread:
    """Runs transport.recv_loop on a daemon thread; a handler exception is logged, not fatal."""

    def __init__(
        self, transport: Transport, handler: Handler, drop: DropSink, fast: FastPath | None = None
    ):
        self.transport = transport
        self.stop_event = threading.Event()

        def guarded(body: memoryview) -> None:
            try:
                handler(body)
            except Exception:
                log.exception("datagram handler failed")
                drop("handler_error")

        def guarded_fast(rows, lengths, start, stop, prefix, taken) -> int:
            assert fast is not None  # handed on only when there is a fast path
            try:
                return fast(rows, lengths, start, stop, prefix, taken)
            except Exception:
                log.exception("fast receive path failed")
                return 0

        self._thread = threading.Thread(
            target=transport.recv_loop,
            args=(guarded, drop, self.stop_event, guarded_fast if fast is not None else None),
            name=f"recv-{transport.name}",
            daemon=True,
        )

    def start(self) -> ReceiveThread:
        self._thread.start()
        return self

    def stop(self, timeout: float = 2.0) -> None:
        self.stop_event.set()
        self._thread.join(timeout)
