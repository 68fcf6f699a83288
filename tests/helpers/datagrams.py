"""Re-seal a datagram after a test changed it: an insider's mistake, correctly tagged."""

from edgegossip.dataplane import wire
from edgegossip.dataplane.keys import LinkKeys


def reseal(body: bytearray, key, group: bytes = wire.DEFAULT_GROUP) -> bytearray:
    """Tag an authenticated-mode body (group framing removed) in place under the link key."""
    h = wire.unpack(memoryview(bytes(body)))
    end = wire.HEADER_SIZE + h.length
    aead = LinkKeys.of(key).aead(h.sender, h.receiver)
    body[end:] = aead.seal(wire.nonce(h), wire.frame_prefix(group) + bytes(body[:end]))
    return body
