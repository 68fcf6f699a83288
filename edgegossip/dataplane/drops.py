"""Why a datagram was dropped: the one list of reasons, and the counter every receive path
(validation, the compiled fast path, injected loss) counts into."""

from __future__ import annotations

from collections import Counter

DROP_REASONS = (
    "truncated",
    "oversized",
    "bad_group",
    "bad_version",
    "bad_type",
    "bad_dtype",
    "wrong_fleet",
    "wrong_receiver",
    "unknown_sender",
    "not_encrypted",
    "bad_tag",
    "old_session",
    "session_jump",
    "replayed",
    "stale",
    "seq_jump",
    "out_of_bounds",
    "non_finite",
    "old_round",
    "round_jump",
    "no_buffer",
    "collected",
)


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
