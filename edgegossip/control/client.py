"""The operator side: one request to one agent's control endpoint, one reply or an error."""

from __future__ import annotations

import json

import zmq
import zmq.auth

from edgegossip.control import messages
from edgegossip.errors import EdgegossipError


class ControlError(EdgegossipError, RuntimeError):
    pass


def request(
    host: str, port: int, op: str, client_secret: str, server_public: str, timeout_s: float = 3.0
) -> dict:
    """Send {"op": op}; the reply as a dict (ok true), or ControlError with one line."""
    c_pub, c_sec = zmq.auth.load_certificate(client_secret)
    s_pub, _ = zmq.auth.load_certificate(server_public)
    ctx: zmq.Context = zmq.Context.instance()
    sock = ctx.socket(zmq.REQ)
    try:
        sock.linger = 0
        sock.curve_publickey, sock.curve_secretkey, sock.curve_serverkey = c_pub, c_sec, s_pub
        sock.connect(f"tcp://{host}:{port}")
        sock.send(messages.encode({"op": op}))
        if not sock.poll(int(timeout_s * 1000)):
            raise ControlError(
                f"no answer from {host}:{port} in {timeout_s:g} s (agent not running, "
                "or this operator's key is not allow-listed)"
            )
        raw = sock.recv()
    finally:
        sock.close(0)
    try:
        reply = json.loads(raw)
    except (ValueError, RecursionError):
        reply = None
    if not isinstance(reply, dict):
        raise ControlError(
            f"malformed reply from {host}:{port} ({len(raw)} bytes, not a JSON object)"
        )
    if reply.get("ok") is not True:
        raise ControlError(str(reply.get("error", "error")).splitlines()[0][:300] or "error")
    return reply
