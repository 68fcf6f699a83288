"""UDP transports: `udp` (native sockets, the default) and `zmq` (libzmq RADIO/DISH)."""

from __future__ import annotations

from edgegossip.transport.base import Endpoint, ReceiveThread, Transport

NAMES = ("udp", "zmq")


def make_transport(
    name: str, group: bytes = b"eg", rate_bytes_per_s: float | None = None, gso: bool = True
) -> Transport:
    if name == "udp":
        from edgegossip.transport.udp import UdpTransport

        return UdpTransport(group, rate_bytes_per_s, gso=gso)
    if name == "zmq":
        from edgegossip.transport.zmq import ZmqTransport

        return ZmqTransport(group, rate_bytes_per_s)
    raise ValueError(f"unknown transport {name!r}; choose one of {', '.join(NAMES)}")


__all__ = ["Endpoint", "ReceiveThread", "Transport", "make_transport", "NAMES"]
