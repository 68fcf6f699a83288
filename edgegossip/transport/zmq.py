"""ZeroMQ RADIO/DISH over udp:// (libzmq draft API): one DISH bound per agent, one RADIO per peer.

libzmq 4.3.x defects this design works around (../shared/FACTS.md): a body above
8192 - 1 - len(group) bytes overflows the sender's heap, so the Encoder never builds one and
send() refuses one; a stray datagram whose first byte is >= 0x80 aborts a DISH, fixed by the
patch in native/patches that `scripts/install-pyzmq-draft.sh` builds in; the default SNDHWM drops
bursts silently, so RADIOs set XPUB_NODROP (backpressure) and we pace sends ourselves.
"""

from __future__ import annotations

import threading

import zmq

from edgegossip.errors import UsageError
from edgegossip.transport.base import (
    ZMQ_MAX_DATAGRAM,
    DropSink,
    Endpoint,
    FastPath,
    Handler,
    Transport,
)
from edgegossip.transport.pacing import Pacer

HWM = 100_000


class DraftMissing(UsageError, RuntimeError):
    """The zmq transport was chosen where pyzmq is the package index's (no draft API)."""


def require_draft() -> None:
    if not zmq.has("draft"):
        raise DraftMissing(
            "net.transport zmq needs pyzmq with the libzmq draft API (RADIO/DISH), which the "
            "package index's lacks: install with scripts/install-device.sh --zmq-draft (or "
            "scripts/install-pyzmq-draft.sh), or use transport udp"
        )


class ZmqTransport(Transport):
    name = "zmq"

    def __init__(
        self,
        group: bytes = b"eg",
        rate_bytes_per_s: float | None = None,
        poll_s: float = 0.1,
        context: zmq.Context | None = None,
    ):
        require_draft()
        self.group = group
        self.plen = 1 + len(group)
        self.pacer: Pacer = Pacer(rate_bytes_per_s)
        self.poll_ms = int(poll_s * 1000)
        self.ctx = context or zmq.Context.instance()
        self._radios: dict[Endpoint, zmq.Socket] = {}
        self._dish: zmq.Socket | None = None
        self._lock = threading.Lock()

    def bind(self, endpoint: Endpoint) -> Endpoint:
        host, port = endpoint
        if port == 0:
            raise ValueError("the zmq transport needs an explicit port")
        dish = self.ctx.socket(zmq.DISH)
        dish.setsockopt(zmq.RCVHWM, HWM)  # a full RCVHWM makes libzmq rebuild the UDP socket
        dish.setsockopt(zmq.LINGER, 0)
        dish.bind(f"udp://{host}:{port}")
        dish.join(self.group.decode())
        self._dish = dish
        return endpoint

    def _radio(self, peer: Endpoint) -> zmq.Socket:
        radio = self._radios.get(peer)
        if radio is None:
            radio = self.ctx.socket(zmq.RADIO)
            radio.setsockopt(zmq.XPUB_NODROP, 1)
            radio.setsockopt(zmq.SNDHWM, HWM)
            radio.setsockopt(zmq.SNDTIMEO, 5000)
            radio.setsockopt(zmq.LINGER, 1000)
            radio.connect(f"udp://{peer[0]}:{peer[1]}")
            self._radios[peer] = radio
        return radio

    def send(self, peer: Endpoint, datagram: memoryview) -> None:
        if len(datagram) > ZMQ_MAX_DATAGRAM:
            raise ValueError(
                f"datagram of {len(datagram)} bytes exceeds libzmq's {ZMQ_MAX_DATAGRAM}"
            )
        self.pacer.wait(len(datagram))
        with self._lock:  # zmq sockets are not thread-safe
            self._radio(peer).send(datagram[self.plen :], group=self.group.decode(), copy=True)

    def recv_loop(
        self, handler: Handler, drop: DropSink, stop: threading.Event, fast: FastPath | None = None
    ) -> None:
        # a DISH hands over one message per call: there is no batch to offer `fast`
        dish = self._dish
        if dish is None:
            raise RuntimeError("bind() first")
        poller = zmq.Poller()
        poller.register(dish, zmq.POLLIN)
        while not stop.is_set():
            if not poller.poll(self.poll_ms):
                continue
            while True:
                try:
                    frame = dish.recv(zmq.NOBLOCK, copy=False)
                except zmq.Again:
                    break
                except zmq.ZMQError:
                    if stop.is_set():
                        return
                    raise
                handler(frame.buffer)

    def close(self) -> None:
        with self._lock:
            for radio in self._radios.values():
                radio.close(linger=0)
            self._radios.clear()
        if self._dish is not None:
            self._dish.close(linger=0)
            self._dish = None
