"""The agent side of the control endpoint: one thread, one ROUTER socket, CURVE server.

The thread never touches the model: it reads counters the training loop publishes and sets
flags the loop reads between steps (stop, pause, a checkpoint request it answers when written).
Only a valid `stop` can end training; a malformed or unknown request gets an error reply."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from pathlib import Path

import zmq

from edgegossip.control import messages

log = logging.getLogger(__name__)


HANDSHAKE_MS = 2000


class Controls:
    """What the control thread may do to a running agent, and how the loop honours it."""

    def __init__(self, status: Callable[[], dict], stop: threading.Event):
        self.status = status
        self.stop = stop
        self.paused = threading.Event()
        self._ckpt_lock = threading.Lock()
        self._ckpt_wanted = threading.Event()
        self._ckpt_done = threading.Event()
        self._ckpt_result: dict = {}

    def request_checkpoint(self, timeout: float = 20.0) -> dict:
        with self._ckpt_lock:
            self._ckpt_done.clear()
            self._ckpt_wanted.set()
            if not self._ckpt_done.wait(timeout):
                self._ckpt_wanted.clear()
                raise TimeoutError("the training loop did not write a checkpoint in time")
            return dict(self._ckpt_result)

    def serve_checkpoint(self, write: Callable[[], dict]) -> None:
        """Called by the training loop between steps."""
        if self._ckpt_wanted.is_set():
            self._ckpt_wanted.clear()
            self._ckpt_result = write()
            self._ckpt_done.set()

    def wait_while_paused(self, write_checkpoint: Callable[[], dict]) -> None:
        while self.paused.is_set() and not self.stop.is_set():
            self.serve_checkpoint(write_checkpoint)
            self.stop.wait(0.1)


def allowed_keys(folder: str) -> set[bytes]:
    """The Z85 public keys of the certificates in folder (zmq.auth's format)."""
    from zmq.auth.certs import load_certificate  # light; zmq.auth.thread would pull in asyncio

    if not Path(folder).is_dir():
        raise OSError(f"{folder}: no such folder")
    return {load_certificate(str(p))[0] for p in sorted(Path(folder).glob("*.key"))}


class ZapHandler:
    """libzmq's authentication hook (ZAP, RFC 27): a CURVE client whose key is in `allowed`
    completes the handshake; any other gets status 400 and never reaches the socket. A thread
    of its own on inproc://zeromq.zap.01, as zmq.auth.thread does, without its asyncio import
    (8 MB of resident memory on a device)."""

    def __init__(self, ctx: zmq.Context, allowed: set[bytes]):
        self.allowed = {zmq.utils.z85.decode(k) for k in allowed}
        self.sock = ctx.socket(zmq.REP)
        self.sock.linger = 0
        self.sock.bind("inproc://zeromq.zap.01")
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="control-zap", daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            if not self.sock.poll(200):
                continue
            frames = self.sock.recv_multipart()
            version, request_id = frames[0], frames[1] if len(frames) > 1 else b""
            ok = len(frames) >= 7 and frames[5] == b"CURVE" and frames[6] in self.allowed
            self.sock.send_multipart(
                [
                    version,
                    request_id,
                    b"200" if ok else b"400",
                    b"OK" if ok else b"not allowed",
                    b"",
                    b"",
                ]
            )
            if not ok:
                log.info("control: refused a client key")

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(2)
        self.sock.close(0)


class ControlServer:
    def __init__(
        self,
        endpoint: str,
        server_key: str,
        client_keys: str,
        controls: Controls,
        allow_from: str = "",
    ):
        """allow_from: addresses or networks, comma-separated, whose connections libzmq accepts
        at all (others are closed at once, holding no descriptor); empty: any."""
        import zmq.utils.z85  # noqa: F401  (ZapHandler)
        from zmq.auth.certs import load_certificate

        self.controls = controls
        self.ctx = zmq.Context()
        self.auth = None
        self._thread: threading.Thread | None = None
        self._closing = threading.Event()
        try:
            public, secret = load_certificate(server_key)
            self.auth = ZapHandler(self.ctx, allowed_keys(client_keys))
            self.sock = self.ctx.socket(zmq.ROUTER)
            self.sock.curve_server = True
            self.sock.curve_publickey, self.sock.curve_secretkey = public, secret
            self.sock.setsockopt(zmq.MAXMSGSIZE, messages.MAX_REQUEST)
            # a connection that has not finished its CURVE handshake in this time is closed: a
            # flood of idle connections holds descriptors for seconds, not for good
            self.sock.setsockopt(zmq.HANDSHAKE_IVL, HANDSHAKE_MS)
            for net in filter(None, (n.strip() for n in allow_from.split(","))):
                self.sock.setsockopt(zmq.TCP_ACCEPT_FILTER, net.encode())
            self.sock.linger = 0
            self.sock.bind(f"tcp://{endpoint}")
        except Exception:
            if self.auth is not None:
                self.auth.stop()
            self.ctx.destroy(linger=0)
            raise

    def start(self) -> ControlServer:
        self._thread = threading.Thread(target=self._serve, name="control", daemon=True)
        self._thread.start()
        return self

    def _serve(self) -> None:
        poller = zmq.Poller()
        poller.register(self.sock, zmq.POLLIN)
        while not self._closing.is_set():
            if not poller.poll(200):
                continue
            frames = self.sock.recv_multipart()
            if len(frames) < 2:
                continue
            ident, body = frames[0], frames[-1]
            reply = self._answer(body)
            self.sock.send_multipart([ident, b"", reply] if len(frames) == 3 else [ident, reply])

    def _answer(self, body: bytes) -> bytes:
        try:
            op = messages.parse(body)
        except messages.BadRequest as e:
            return messages.error(str(e))
        c = self.controls
        try:
            if op == "status":
                return messages.encode({"ok": True, **c.status()})
            if op == "checkpoint":
                return messages.encode({"ok": True, **c.request_checkpoint()})
            if op == "stop":
                c.stop.set()
                return messages.encode({"ok": True, "state": "stopping"})
            if op == "pause":
                c.paused.set()
                return messages.encode({"ok": True, "state": "paused"})
            c.paused.clear()
            return messages.encode({"ok": True, "state": "training"})
        except Exception as e:  # a reply, never a dead control thread
            log.exception("control request %s failed", op)
            return messages.error(f"{op} failed: {e}")

    def close(self) -> None:
        self._closing.set()
        if self._thread is not None:
            self._thread.join(2)
        self.sock.close(0)
        if self.auth is not None:
            self.auth.stop()
        self.ctx.term()
