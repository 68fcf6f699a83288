"""Why a datagram was dropped: the one list of reasons, and the counter every receive path
(validation, the compiled fast path, injected loss) counts into."""

from __future__ import annotations

from collections import Counter

# Every reason a datagram is dropped, declared once: its kind and what it means. "refused": it
# failed a check (framing, fleet, key, tag, freshness, bounds); "late": it arrived and was
# authentic, but nothing could use it any more. A datagram that never arrived is "lost", which
# no receiver can see one by one: it is counted from the gaps in each link's sequence numbers
# (replay.py), never here.
DROPS: dict[str, tuple[str, str]] = {
    "truncated": ("refused", "shorter than its header and tag"),
    "oversized": ("refused", "longer than a chunk of this model can be"),
    "bad_group": ("refused", "framed for another RADIO/DISH group"),
    "bad_version": ("refused", "another wire version"),
    "bad_type": ("refused", "an unknown message type"),
    "unwanted_type": ("refused", "a message type this fleet's algorithm never collects"),
    "bad_dtype": ("refused", "a payload encoding other than this fleet's"),
    "wrong_fleet": ("refused", "another fleet's id"),
    "wrong_receiver": ("refused", "meant for another receiver"),
    "unknown_sender": ("refused", "a sender this device holds no key for"),
    "not_encrypted": ("refused", "in the clear where the fleet encrypts"),
    "bad_tag": ("refused", "its tag does not verify: forged, altered, or another key or model"),
    "old_session": ("refused", "from a sender incarnation older than the last seen"),
    "session_jump": ("refused", "a session number too far ahead to be honest"),
    "replayed": ("refused", "a sequence number already seen on the link"),
    "stale": ("refused", "a sequence number behind the replay window"),
    "seq_jump": ("refused", "a sequence number too far ahead to be honest"),
    "out_of_bounds": ("refused", "a chunk outside this model's parameter vector"),
    "non_finite": ("refused", "a NaN or an infinity in its payload"),
    "round_jump": ("refused", "a round number too far ahead to be honest"),
    "bad_feedback": ("refused", "a feedback report of the wrong size"),
    "old_round": ("late", "a chunk of a round older than the one before the current"),
    "no_buffer": ("late", "no receive buffer free for its round"),
    "collected": ("late", "its round was already merged"),
    # the loopback emulator's stand-in for the network: such a datagram never reached the
    # inbox, so the link's sequence gap counts it as lost already
    "injected_loss": ("lost", "dropped by the loopback emulator's injected loss"),
}
DROP_REASONS = tuple(DROPS)
KINDS = ("lost", "late", "refused")


def fates(drops: dict[str, int], arrived: int, expected: int) -> dict[str, int]:
    """{"lost", "late", "refused"}: what happened to the datagrams a receiver did not merge,
    from its drops by reason and its links' sequence gaps (arrived of expected)."""
    out = {"lost": max(0, expected - arrived), "late": 0, "refused": 0}
    for reason, n in drops.items():
        kind = DROPS.get(reason, ("refused",))[0]
        if kind != "lost":  # counted from the gaps
            out[kind] += n
    return out


class DropCounter:
    """Counts accepted datagrams and drops by reason; written by one receive thread."""

    def __init__(self) -> None:
        self.drops: Counter[str] = Counter()
        self.accepted = 0
        self.accepted_bytes = 0

    def drop(self, reason: str, n: int = 1) -> None:
        self.drops[reason] += n

    @property
    def dropped(self) -> int:
        return sum(self.drops.values())

    def snapshot(self) -> dict:
        return {
            "accepted": self.accepted,
            "accepted_bytes": self.accepted_bytes,
            "dropped": self.dropped,
            "drops": dict(self.drops),
        }
