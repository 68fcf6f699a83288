"""Loopback ports for tests that start servers."""

import socket


def free_port(kind=socket.SOCK_DGRAM) -> int:
    """A loopback port nothing holds right now (UDP by default, or SOCK_STREAM)."""
    s = socket.socket(socket.AF_INET, kind)
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port
