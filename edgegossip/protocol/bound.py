"""How far one peer's round may move this device's model (issue 67): a device holding its own
keys can send any well-formed parameters, so every merge is bounded here, before the
algorithm's own rule runs.

A merge applies a peer's difference y - ref: ref is what the algorithm moves from (our pre-step
snapshot for Elastic Gossip and pull, x itself for push-sum, our block for RPS). Each arrived
chunk's difference is clipped to

    tau_c = tau * sqrt(d_c / d)

(d_c the chunk's coordinates, d the model's): self-centred clipping (He, Karimireddy and Jaggi,
"Byzantine-robust decentralized learning via ClippedGossip", 2022) chunk by chunk, so a round
of which only some chunks arrived keeps the bound, and a whole round moves ref by tau at most.

tau = CLIP x the typical distance: the lower median, over this device's peers, of each peer's
median distance over its last HISTORY rounds (a round's distance is measured on what arrived,
scaled to the whole model). One peer, or any minority of them, cannot widen it; it follows
training as the models draw together or apart, with nothing to tune per model. It is never
below CLIP x LEAST x ||ref|| (||ref||: the model's size, scaled to the whole model) nor above
MOST x ||ref||, which is also the radius until min(2, peers) peers have been heard (a model at
exactly 0, a fresh zero initialisation, admits the first rounds as they are). The ceiling is
what keeps an attack from widening the radius it is measured against: rounds that spread the
honest models apart raise the typical distance.

A round farther than REFUSE x tau is refused whole: nothing of it is merged (push-sum still
takes the weight its running sum brought, as if the round carried our own value: the sums are
never clipped, or weight would not be conserved). Each peer has a suspicion, a running mean of
where its rounds landed: 0 within the radius, 1 refused, and between the two from BEYOND (just
past the radius) up to 1 (at REFUSE x tau). Honest rounds land past the radius now and then,
while the models move apart fast; a peer whose every round lands past it is not honest, however
little past: a replay of an old model sits just beyond the radius of models that train away from
it, and its pull back, each round up to the radius, cost 2.5 points before it counted. Its say,
the share of its clipped difference a merge applies, is 1 - suspicion, and a suspicion above
SUSPECT names it in `suspect_peers` and raises the alarm suspect_peer.
"""

from __future__ import annotations

import logging
import math
from collections import deque

import numpy as np

from edgegossip import kernels
from edgegossip.dataplane.chunking import ChunkPlan

log = logging.getLogger(__name__)

CLIP = 2.0  # tau, in typical distances: an honest peer's round is rarely clipped
REFUSE = 4.0  # a round farther than this many taus is refused whole
HISTORY = 16  # distances kept per peer
# the least typical distance, in model sizes: peers that start from one initial model are at
# distance 0, and a radius learnt then would refuse the rounds of the next minutes' drift
LEAST = 0.01
# the largest radius, in model sizes: a sign flip is two sizes away, so at most a quarter of its
# pull gets past and its suspicion climbs; without it, two sign-flipping devices of eight
# spread the honest models until the radius they set let the flips in (0.689 against 0.849)
MOST = 0.5
GAIN = 1 / 8  # weight of the newest round in a peer's suspicion
SUSPECT = 0.5  # a suspicion above this names the peer
# what a round just past the radius adds to its sender's suspicion: SUSPECT, so that a peer
# whose every round lands past the radius is named, one whose rounds do now and then is not
BEYOND = SUSPECT


def _hit(reach: float) -> float:
    """What a round at reach radii (its distance / tau, at most REFUSE) adds to its sender's
    suspicion: 0 within the radius, BEYOND just past it, 1 at a refusal."""
    if reach <= 1.0:
        return 0.0
    return min(1.0, BEYOND + (1.0 - BEYOND) * (reach - 1.0) / (REFUSE - 1.0))


class Bound:
    def __init__(self, plan: ChunkPlan, peers: list[int], kind: str = "clip"):
        self.on = kind == "clip"  # train.bound: none admits every round as it is
        self.d = plan.n_params
        self.ce = plan.chunk_elems
        self._sq = np.zeros(plan.n_chunks, np.float64)
        self._scale = np.ones(plan.n_chunks, np.float32)
        self.seen: dict[int, deque[float]] = {}
        self.suspicion: dict[int, float] = {}
        self.peers = list(peers)
        self.clipped = 0
        self.refused = 0
        self.tau: float | None = None  # the last radius used

    def set_peers(self, peers: list[int]) -> None:
        self.peers = list(peers)
        for gone in set(self.seen) - set(peers):
            del self.seen[gone]
            self.suspicion.pop(gone, None)

    def _typical(self) -> float | None:
        heard = sorted(float(np.median(h)) for j, h in self.seen.items() if j in self.peers)
        if len(heard) < min(2, len(self.peers)) or not heard:
            return None
        return heard[(len(heard) - 1) // 2]

    def _radius(self, ref: np.ndarray) -> float | None:
        """tau, or None while there is nothing to measure a round against: no peer heard yet
        and a model at 0 (a fresh zero initialisation)."""
        size = float(np.linalg.norm(ref)) * math.sqrt(self.d / max(1, ref.shape[0]))
        typical = self._typical()
        if typical is None:
            return MOST * size if size > 0 else None
        return min(CLIP * max(typical, LEAST * size), MOST * size)

    def admit(self, peer: int, y: np.ndarray, ref: np.ndarray, mask: np.ndarray) -> bool:
        """Clip y in place toward ref, chunk by chunk where mask says a chunk arrived (y, ref
        and mask may be a block of the model that starts on a chunk boundary); False if the
        round is refused (y untouched, nothing of it to merge)."""
        if not self.on:
            return True
        n, ce = y.shape[0], self.ce
        m = -(-n // ce)
        sq, scale = self._sq[:m], self._scale[:m]
        kernels.chunk_distances(y, ref, mask, ce, sq)
        arrived = np.asarray(mask[:m]) != 0
        lens = np.full(m, float(ce))
        lens[-1] = n - (m - 1) * ce
        d_arrived = float(lens[arrived].sum())
        if d_arrived == 0:
            return True
        dist = math.sqrt(float(sq.sum()) * self.d / d_arrived)
        tau = self._radius(ref)
        self.seen.setdefault(peer, deque(maxlen=HISTORY)).append(dist)
        if tau is None:
            return True
        self.tau = tau
        if dist > REFUSE * tau:
            self.refused += 1
            self._suspect(peer, 1.0)
            return False
        with np.errstate(divide="ignore"):
            clip = np.minimum(1.0, tau * np.sqrt(lens / self.d) / np.sqrt(sq))
        self.clipped += bool((clip[arrived] < 1.0).any())
        say = 1.0 - self._suspect(peer, _hit(dist / tau))
        scale[:] = clip * say
        if (scale[arrived] != 1.0).any():
            kernels.scale_toward(y, ref, mask, scale, ce)
        return True

    def _suspect(self, peer: int, hit: float) -> float:
        """Peer's suspicion after a round whose hit was 1 (refused), 0 (within the radius) or
        between (how far past it, on the way to REFUSE)."""
        before = self.suspicion.get(peer, 0.0)
        s = before + GAIN * (hit - before)
        self.suspicion[peer] = s
        if (s > SUSPECT) != (before > SUSPECT):
            if s > SUSPECT:
                log.warning("alarm suspect_peer: peer %d's rounds are clipped or refused", peer)
            else:
                log.info("peer %d no longer suspect", peer)
        return s

    @property
    def suspects(self) -> list[int]:
        return sorted(j for j, s in self.suspicion.items() if s > SUSPECT)

    def metrics(self) -> dict:
        return {
            "merges_clipped": self.clipped,
            "merges_refused": self.refused,
            "merge_radius": None if self.tau is None else round(self.tau, 6),
            "suspicion_by_peer": {str(j): round(s, 3) for j, s in sorted(self.suspicion.items())},
            "suspect_peers": self.suspects,
        }
