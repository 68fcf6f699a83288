"""What a hostile device sends instead of its model: the published attacks on robust
aggregation, so that what one or two stolen devices can do to a fleet, and the merge bound
(protocol/bound.py) against it, are measured on the emulator (`emulate --hostile NODES:ATTACK`
sets the managed setting train.attack on those devices; docs/security.md has the figures).

Each attack makes the parameters a round carries from this device's own (`own`), the last few
models its peers' rounds brought it (`seen`: what its own links carry to it, newest last) and
the first of them (`first`). flip-labels is honest on the wire: the device trains on its data
with every label c as classes - 1 - c (agent/shard.py), as a poisoned data set would.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

import numpy as np

Make = Callable[[np.ndarray, list[np.ndarray], np.ndarray], np.ndarray]
SEEN = 4  # peers' models kept for the attacks that use their spread


def _scaled(factor: float) -> Make:
    return lambda own, seen, first: seen[-1] * np.float32(factor)


def _noise(own, seen, first):
    """The last peer model plus Gaussian noise ten times its per-coordinate size."""
    last = seen[-1]
    sigma = 10 * float(np.linalg.norm(last)) / np.sqrt(max(1, last.shape[0]))
    return last + np.random.default_rng(len(seen)).normal(0, sigma, last.shape).astype(np.float32)


def _little(own, seen, first):
    """Baruch et al. 2019, "A little is enough": the peers' mean less one standard deviation,
    per coordinate, so it sits within their spread."""
    stack = np.stack(seen)
    return (stack.mean(0) - stack.std(0)).astype(np.float32)


def _inner_product(own, seen, first):
    """Xie et al. 2020, inner-product manipulation, in model space: -1/2 the peers' mean."""
    return (-0.5 * np.stack(seen).mean(0)).astype(np.float32)


ATTACKS: dict[str, Make | None] = {
    "scaled-1000": _scaled(1000.0),
    "scaled-1e6": _scaled(1e6),
    "sign-flip": _scaled(-1.0),
    "noise": _noise,
    "little-is-enough": _little,
    "inner-product": _inner_product,
    "stale": lambda own, seen, first: first,  # a replay of the first model it heard
    "flip-labels": None,  # honest rounds of a model trained on flipped labels
}
NAMES = ("none", *ATTACKS)
# whose protocol (protocol/gossip.py) sends what an attack makes; RPS and all-reduce have none
ALGORITHMS = ("elastic-gossip", "gossip-pull", "gossip-push")


class Attack:
    """One device's attack: keeps what its peers send it, and makes what it sends ("none" and
    flip-labels make nothing: what it sends is its own model)."""

    def __init__(self, name: str):
        self.make = ATTACKS.get(name)
        self.seen: deque[np.ndarray] = deque(maxlen=SEEN)
        self.first: np.ndarray | None = None

    def heard(self, y: np.ndarray) -> None:
        self.seen.append(y.copy())
        if self.first is None:
            self.first = self.seen[-1]

    def apply(self, vec: np.ndarray) -> None:
        """Overwrite the parameters about to be sent (vec, a snapshot) with the attack's."""
        if self.make is None:
            return
        seen = list(self.seen) or [vec.copy()]
        first = self.first if self.first is not None else seen[0]
        np.copyto(vec, self.make(vec, seen, first))
