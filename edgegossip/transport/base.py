"""The small interface both UDP transports implement, and the receive thread that drives one."""

from __future__ import annotations

import logging
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable

log = logging.getLogger(__name__)

Endpoint = tuple[str, int]
Handler = Callable[[memoryview], None]
DropSink = Callable[[str], None]


class Transport(ABC):
    """Datagram transport. send() takes a whole framed datagram ``[len][group][body]``; the
    receive loop hands bodies (framing removed) of datagrams for our group to a handler."""

    name: str

    @abstractmethod
    def bind(self, endpoint: Endpoint) -> Endpoint:
        """Start receiving on endpoint; returns the bound endpoint (port 0 picks one)."""

    @abstractmethod
    def send(self, peer: Endpoint, datagram: memoryview) -> None:
        """Send one datagram, paced; blocks rather than drop it on our side."""

    @abstractmethod
    def recv_loop(self, handler: Handler, drop: DropSink, stop: threading.Event) -> None:
        """Receive until stop is set; every read has a timeout so stop is seen promptly."""

    @abstractmethod
    def close(self) -> None: ...

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class ReceiveThread:
    """Runs transport.recv_loop on a daemon thread; a handler exception is logged, not fatal."""

    def __init__(self, transport: Transport, handler: Handler, drop: DropSink):
        self.transport = transport
        self.stop_event = threading.Event()

        def guarded(body: memoryview) -> None:
            try:
                handler(body)
            except Exception:  # noqa: BLE001 - a bug in filing one datagram must not stop receiving
                log.exception("datagram handler failed")
                drop("handler_error")

        self._thread = threading.Thread(
            target=transport.recv_loop, args=(guarded, drop, self.stop_event),
            name=f"recv-{transport.name}", daemon=True)

    def start(self) -> ReceiveThread:
        self._thread.start()
        return self

    def stop(self, timeout: float = 2.0) -> None:
        self.stop_event.set()
        self._thread.join(timeout)
