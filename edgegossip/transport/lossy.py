"""Loss injected in the receive path, for fleets emulated without root (loopback): a datagram
dropped here is counted as `injected_loss`, and every output labels the loss as injected.

Each sender's datagrams meet a pattern of their own (transport/lossmodel.py), as each link's
packets do in namespaces: independent loss, or bursts of a mean length (Gilbert-Elliott). The
sender is read from the datagram's header, unverified: a forged id only moves a datagram to
another sender's pattern, and the tag check after this refuses it anyway."""

from __future__ import annotations

from edgegossip.transport.base import DropSink, Handler
from edgegossip.transport.lossmodel import LossModel

_SENDER = 8  # the sender id's offset in the header (dataplane/wire.py), where a body starts


def injected_loss(handler: Handler, model: LossModel, drop: DropSink, seed: int) -> Handler:
    """Wrap a datagram handler so that each sender's datagrams vanish before it as `model`
    loses them."""
    patterns: dict[int, list] = {}  # sender id: [its pattern, the count of its datagrams]

    def lossy(body: memoryview) -> None:
        sender = int.from_bytes(body[_SENDER : _SENDER + 2], "little") if len(body) > 9 else -1
        entry = patterns.get(sender)
        if entry is None:
            # bytes, not an array: indexing one per datagram is the receive path's cost
            entry = patterns[sender] = [model.pattern([seed, sender & 0xFFFF]).tobytes(), 0]
        pattern, n = entry
        entry[1] = n + 1
        if pattern[n % len(pattern)]:
            drop("injected_loss")
            return
        handler(body)

    return lossy
