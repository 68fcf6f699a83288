"""Native transport on plain UDP sockets, byte-compatible with libzmq RADIO/DISH over udp://."""

from __future__ import annotations

import socket
import threading

import numpy as np

from edgegossip.transport.base import DropSink, Endpoint, Handler, Transport
from edgegossip.transport.pacing import Pacer

try:
    from edgegossip._udp_c import recv_batch
except ImportError:  # not built (or not Linux): one recv_into per datagram
    recv_batch = None

RECV_BUFFER = 9216   # a row: above any datagram we send (8192); a larger one is seen as truncated
BATCH = 64           # datagrams per recvmmsg call
SOCKET_RCVBUF = 4 << 20


class UdpTransport(Transport):
    name = "udp"

    def __init__(self, group: bytes = b"eg", rate_bytes_per_s: float | None = None,
                 poll_s: float = 0.1):
        self.prefix = bytes([len(group)]) + group
        self.pacer = Pacer(rate_bytes_per_s)
        self.poll_s = poll_s
        self._tx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self._rx: socket.socket | None = None

    def bind(self, endpoint: Endpoint) -> Endpoint:
        rx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        rx.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        # the kernel caps this at net.core.rmem_max; a bigger buffer absorbs bursts while the
        # receive thread waits for the GIL
        rx.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, SOCKET_RCVBUF)
        rx.bind(endpoint)
        rx.settimeout(self.poll_s)
        self._rx = rx
        return rx.getsockname()

    def send(self, peer: Endpoint, datagram: memoryview) -> None:
        self.pacer.wait(len(datagram))
        self._tx.sendto(datagram, peer)

    def recv_loop(self, handler: Handler, drop: DropSink, stop: threading.Event) -> None:
        rx = self._rx
        if rx is None:
            raise RuntimeError("bind() first")
        if recv_batch is not None:
            self._recv_batched(rx, handler, drop, stop)
        else:
            self._recv_single(rx, handler, drop, stop)

    def _dispatch(self, view: memoryview, n: int, handler: Handler, drop: DropSink) -> None:
        plen = len(self.prefix)
        if n < 0:
            drop("oversized")
        elif n <= plen:
            drop("truncated")
        elif view[:plen] != self.prefix:
            drop("bad_group")
        else:
            handler(view[plen:n])

    def _recv_batched(self, rx: socket.socket, handler: Handler, drop: DropSink,
                      stop: threading.Event) -> None:
        bufs = np.zeros((BATCH, RECV_BUFFER), dtype=np.uint8)
        lengths = np.zeros(BATCH, dtype=np.intp)
        rows = [memoryview(bufs[i]) for i in range(BATCH)]
        fd = rx.fileno()
        timeout_ms = int(self.poll_s * 1000)
        while not stop.is_set():
            try:
                n = recv_batch(fd, bufs, lengths, timeout_ms)
            except OSError:
                if stop.is_set() or rx.fileno() < 0:
                    return
                raise
            for i in range(n):
                self._dispatch(rows[i], int(lengths[i]), handler, drop)

    def _recv_single(self, rx: socket.socket, handler: Handler, drop: DropSink,
                     stop: threading.Event) -> None:
        buf = bytearray(RECV_BUFFER)
        view = memoryview(buf)
        while not stop.is_set():
            try:
                n, _, flags, _ = rx.recvmsg_into([buf])
            except (socket.timeout, BlockingIOError, InterruptedError):
                continue
            except OSError:
                if stop.is_set():
                    return
                raise
            self._dispatch(view, -1 if flags & socket.MSG_TRUNC else n, handler, drop)

    def close(self) -> None:
        self._tx.close()
        if self._rx is not None:
            self._rx.close()
