"""Native transport on plain UDP sockets, byte-compatible with libzmq RADIO/DISH over udp://."""

from __future__ import annotations

import errno
import socket
import threading

import numpy as np

from edgegossip import extensions
from edgegossip.transport.base import (
    DropSink,
    Endpoint,
    FastPath,
    Handler,
    PacedLink,
    Transport,
)
from edgegossip.transport.pacing import BURST_S, Pacer

_udp = extensions.load("_udp_c")  # None when not built (or not Linux): one call per datagram
recv_batch = _udp.recv_batch if _udp is not None else None
send_batch = _udp.send_batch if _udp is not None else None
next_linger = _udp.next_linger if _udp is not None else None

RECV_BUFFER = 9216  # a row: above any datagram we send (8192); a larger one is seen as truncated
BATCH = 128  # datagrams per recvmmsg call: a longest pause's worth at 3 senders' 18 Mbit/s
SO_RCVBUFFORCE = getattr(socket, "SO_RCVBUFFORCE", 33)
SOCKET_RCVBUF = 32 << 20  # about 25 ms at 10 Gbit/s: outlasts a receive thread's time slice
# A batch that came back short means the thread woke for a few datagrams. It then sleeps a while, so
# the next call finds a batch waiting: a datagram a wake-up cost the agent's training more than the
# datagram itself (the wake-up preempts a training thread and takes the GIL). The pause halves when
# a batch comes back full and grows while batches come back half empty, so about a batch waits in
# the socket: at most four paced bursts of traffic, which the device's buffer (rmem_max 8 MB,
# fleet/remote.py) holds up to 1.6 Gbit/s. A wake-up, not a datagram, is what the receive thread
# pays for: with at most 10 ms it read 17.5 datagrams a wake-up at 22 us of CPU each, with 20 ms (64
# rows) 31 at 15 us, with 40 ms 60 at 12 us, the loss observed unchanged (int8, `emulate --nodes 4
# --duration 60`, docs/changelog.md). The rule: _udp_c.next_linger.
LINGER_MAX_S = 4 * BURST_S
LINGER_MIN_S = 0.0005


class UdpTransport(Transport):
    name = "udp"

    def __init__(
        self,
        group: bytes = b"eg",
        rate_bytes_per_s: float | None = None,
        poll_s: float = 0.1,
        gso: bool = True,
    ):
        self.prefix = bytes([len(group)]) + group
        self.pacer: Pacer = Pacer(rate_bytes_per_s)
        self.poll_s = poll_s
        self._tx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self._rx: socket.socket | None = None
        self._prefix_arr = np.frombuffer(self.prefix, np.uint8)
        # UDP GSO: the kernel cuts one buffer into the same datagrams further down the stack,
        # after netfilter, which sees the buffer whole: the emulated links cut it as it leaves
        # the node (emulate/netns.node_link_up) so that their loss stays per datagram
        self.gso = gso and send_batch is not None
        self._ip4: dict[str, np.ndarray | None] = {}
        self._closing = np.zeros(1, np.uint8)  # a compiled send in flight stops at its next batch
        self._taken: np.ndarray | None = None  # deliver(): rows of the batch the fast path took
        self.batches = 0  # receive calls that brought datagrams, and how many
        self.datagrams = 0

    def bind(self, endpoint: Endpoint) -> Endpoint:
        rx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        rx.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        # a bigger buffer absorbs bursts while the receive thread waits for a core or the GIL;
        # SO_RCVBUF is capped at net.core.rmem_max, SO_RCVBUFFORCE (CAP_NET_ADMIN) is not
        try:
            rx.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, SOCKET_RCVBUF)
        except OSError:
            rx.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, SOCKET_RCVBUF)
        rx.bind(endpoint)
        rx.settimeout(self.poll_s)
        self._rx = rx
        return rx.getsockname()

    def receive_fd(self) -> int:
        """The bound socket's descriptor, for a compiled receive loop (emulate/floor.py)."""
        if self._rx is None:
            raise RuntimeError("bind() first")
        return self._rx.fileno()

    def send(self, peer: Endpoint, datagram: memoryview) -> None:
        self.pacer.wait(len(datagram))
        self._tx.sendto(datagram, peer)

    def _address(self, host: str) -> np.ndarray | None:
        if host not in self._ip4:
            try:
                self._ip4[host] = np.frombuffer(socket.inet_aton(host), np.uint8)
            except OSError:  # a host name: let sendto resolve it
                self._ip4[host] = None
        return self._ip4[host]

    def paced_link(self, peer: Endpoint) -> PacedLink | None:
        ip4 = self._address(peer[0])
        if send_batch is None or ip4 is None:
            return None
        p = self.pacer
        return PacedLink(
            self._tx.fileno(),
            ip4,
            peer[1],
            self.gso,
            p.rate or 0.0,
            p.burst_s,
            p.next_at,
            self._closing,
        )

    def settle(self, link: PacedLink) -> None:
        self.pacer.next_at = link.next_at
        self.gso = self.gso and link.gso

    def send_batch(self, peer: Endpoint, rows: np.ndarray, lengths: np.ndarray, n: int) -> None:
        ip4 = self._address(peer[0])
        if send_batch is None or ip4 is None:
            return super().send_batch(peer, rows, lengths, n)
        # the pacer's wait is slept inside the call: one GIL hand-over a batch, not two
        pause_us = int(self.pacer.reserve(int(lengths[:n].sum()), n) * 1e6)
        sent, err = send_batch(
            self._tx.fileno(), rows, lengths, n, ip4, peer[1], self.gso, pause_us
        )
        if err in (errno.EINVAL, errno.EIO) and self.gso:
            # a kernel without UDP GSO (before 4.18), or a device that cannot checksum it
            self.gso = False
            sent2, err = send_batch(
                self._tx.fileno(), rows[sent:], lengths[sent:], n - sent, ip4, peer[1], False
            )
            sent += sent2
        if err:
            raise OSError(err, f"sendmmsg to {peer[0]}:{peer[1]} failed after {sent} of {n}")

    def batch_hint(self, datagram_bytes: int) -> int:
        """Datagrams per send_batch that keep a batch within the pacer's burst."""
        return self.pacer.datagrams_per_burst(datagram_bytes)

    def recv_loop(
        self, handler: Handler, drop: DropSink, stop: threading.Event, fast: FastPath | None = None
    ) -> None:
        rx = self._rx
        if rx is None:
            raise RuntimeError("bind() first")
        if recv_batch is not None:
            self._recv_batched(rx, handler, drop, stop, fast)
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

    def deliver(
        self,
        bufs: np.ndarray,
        rows: list[memoryview],
        lengths: np.ndarray,
        n: int,
        handler: Handler,
        drop: DropSink,
        fast: FastPath | None,
    ) -> None:
        """Hand the n datagrams of a batch on: what `fast` takes whole (a sender's rows at a
        time), the rest one by one, in order."""
        taken = self._taken
        if taken is None or len(taken) < len(bufs):
            taken = self._taken = np.zeros(len(bufs), np.uint8)
        taken[:n] = 0
        prefix = self._prefix_arr
        for i in range(n):
            if taken[i]:
                continue
            if fast is not None and fast(bufs, lengths, i, n, prefix, taken):
                continue  # row i was taken, with its sender's rows after it
            self._dispatch(rows[i], int(lengths[i]), handler, drop)

    def _recv_batched(
        self,
        rx: socket.socket,
        handler: Handler,
        drop: DropSink,
        stop: threading.Event,
        fast: FastPath | None,
    ) -> None:
        bufs = np.zeros((BATCH, RECV_BUFFER), dtype=np.uint8)
        lengths = np.zeros(BATCH, dtype=np.intp)
        rows = [memoryview(bufs[i]) for i in range(BATCH)]
        fd = rx.fileno()
        timeout_ms = int(self.poll_s * 1000)
        # this loop runs only with the compiled batch calls
        assert recv_batch is not None and next_linger is not None
        linger = LINGER_MIN_S
        pause_us = 0  # taken inside the next call, once the last batch came back short
        while not stop.is_set():
            try:
                n = recv_batch(fd, bufs, lengths, timeout_ms, pause_us)
            except OSError:
                if stop.is_set() or rx.fileno() < 0:
                    return
                raise
            self.deliver(bufs, rows, lengths, n, handler, drop, fast)
            if n:
                self.batches += 1
                self.datagrams += n
            # a full batch: more may be waiting, so read on at once
            linger = next_linger(linger, n, BATCH, LINGER_MIN_S, LINGER_MAX_S)
            pause_us = int(linger * 1e6) if 0 < n < BATCH else 0

    def _recv_single(
        self, rx: socket.socket, handler: Handler, drop: DropSink, stop: threading.Event
    ) -> None:
        buf = bytearray(RECV_BUFFER)
        view = memoryview(buf)
        while not stop.is_set():
            try:
                n, _, flags, _ = rx.recvmsg_into([buf])
            except (TimeoutError, BlockingIOError, InterruptedError):
                continue
            except OSError:
                if stop.is_set():
                    return
                raise
            self._dispatch(view, -1 if flags & socket.MSG_TRUNC else n, handler, drop)

    def close(self) -> None:
        self._closing[0] = 1
        self._tx.close()
        if self._rx is not None:
            self._rx.close()
