"""Loss injected in the receive path, for fleets emulated without root (loopback): a datagram
dropped here is counted as `injected_loss`, and every output labels the loss as injected."""

from __future__ import annotations

import random

from edgegossip.transport.base import DropSink, Handler


def injected_loss(handler: Handler, loss: float, drop: DropSink, seed: int) -> Handler:
    """Wrap a datagram handler so that `loss` of datagrams vanish before it."""
    rng = random.Random(seed)

    def lossy(body: memoryview) -> None:
        if rng.random() < loss:
            drop("injected_loss")
            return
        handler(body)

    return lossy
