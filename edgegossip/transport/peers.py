"""Where each peer's datagrams go. A peer named by host name is looked up once, not per datagram
(the batched send path takes addresses only, and a lookup per datagram would cost more than the
send). A name that does not resolve yet is not fatal: in a compose network the DNS server learns
a container's name some seconds after it starts (and drops queries while it reloads), on a LAN a
powered-off Pi's mDNS name does not answer. Such a peer is retried in the background and its
datagrams are skipped (counted) meanwhile, as gossip would lose them anyway."""

from __future__ import annotations

import logging
import socket
import threading
import time

from edgegossip.transport.base import Endpoint

log = logging.getLogger(__name__)
RETRY_S = 2.0
# A lookup can itself take seconds (a DNS server that drops queries: glibc waits out each
# server's timeout), so a start that waits for names says so at this pace, not per attempt
SAY_EVERY_S = 10.0


def lookup(host: str, port: int) -> str | None:
    try:
        return str(socket.getaddrinfo(host, port, socket.AF_INET, socket.SOCK_DGRAM)[0][4][0])
    except (socket.gaierror, UnicodeError):
        return None


def _is_ipv4(host: str) -> bool:
    try:
        socket.inet_aton(host)
        return host.count(".") == 3  # inet_aton takes "1" and "1.2" too
    except OSError:
        return False


class PeerBook(dict):
    """worker id -> (host, port) as configured; `endpoint(id)` is the resolved address or None."""

    def __init__(self, peers: dict[int, Endpoint]):
        super().__init__(peers)
        self._resolved: dict[int, Endpoint] = {p: e for p, e in peers.items() if _is_ipv4(e[0])}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.skipped = 0  # sends to a peer whose name had not resolved

    def endpoint(self, peer: int) -> Endpoint | None:
        return self._resolved.get(peer)

    @property
    def unresolved(self) -> list[int]:
        return sorted(set(self) - set(self._resolved))

    def _try_all(self) -> list[int]:
        for peer in self.unresolved:
            host, port = self[peer]
            addr = lookup(host, port)
            if addr is not None:
                self._resolved[peer] = (addr, port)
        return self.unresolved

    def resolve(self, wait_s: float = 30.0) -> list[int]:
        """Resolve every peer, waiting up to wait_s for names still unknown; those left are
        retried in the background from then on. Returns the ids still unresolved. A wait
        longer than SAY_EVERY_S says which names it waits for, and again every SAY_EVERY_S:
        a device that has not started training for minutes shows why in its log."""
        started = time.monotonic()
        deadline = started + wait_s
        said = started
        while self._try_all() and time.monotonic() < deadline:
            now = time.monotonic()
            if now - said >= SAY_EVERY_S:
                said = now
                log.warning(
                    "waiting for peer names to resolve (%.0f s of at most %.0f s): %s",
                    now - started,
                    wait_s,
                    self._names(self.unresolved),
                )
            if self._stop.wait(0.5):
                break
        left = self.unresolved
        if left:
            log.warning(
                "peer names not resolved yet, retrying every %.0f s meanwhile: %s",
                RETRY_S,
                self._names(left),
            )
            self._thread = threading.Thread(target=self._retry, name="resolve", daemon=True)
            self._thread.start()
        return left

    def replace(self, peers: dict[int, Endpoint]) -> None:
        """The peers as they are now (agent/reload.py): the removed forgotten, the new looked
        up in the background like any name not resolved yet."""
        for peer in set(self) - set(peers):
            del self[peer]
            self._resolved.pop(peer, None)
        for peer, (host, port) in peers.items():
            if self.get(peer) != (host, port):
                self[peer] = (host, port)
                self._resolved.pop(peer, None)
                if _is_ipv4(host):
                    self._resolved[peer] = (host, port)
        if self.unresolved and (self._thread is None or not self._thread.is_alive()):
            self._thread = threading.Thread(target=self._retry, name="resolve", daemon=True)
            self._thread.start()

    def _names(self, ids: list[int]) -> str:
        return ", ".join(f"{p} ({self[p][0]})" for p in ids)

    def _retry(self) -> None:
        while not self._stop.wait(RETRY_S):
            before = set(self.unresolved)
            left = self._try_all()
            for peer in sorted(before - set(left)):
                log.info(
                    "peer %d (%s) resolved to %s", peer, self[peer][0], self._resolved[peer][0]
                )
            if not left:
                return

    def close(self) -> None:
        self._stop.set()
