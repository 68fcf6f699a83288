"""Issue 67, item 1: the merge bound (protocol/bound.py) on rounds built here, chunk by chunk:
how far a round may move the model, learnt from the peers' distances, and who is suspected."""

import numpy as np
import pytest

from edgegossip.dataplane import wire
from edgegossip.dataplane.chunking import ChunkPlan
from edgegossip.protocol import bound
from edgegossip.protocol.bound import Bound

PLAN = ChunkPlan(7850, wire.default_chunk_bytes())


def _round(x, rng, dist, mask=None):
    """A peer's round at `dist` typical distances from x (a typical distance: 5% of the
    model's size, above the bound's least), and its mask (all arrived)."""
    noise = rng.standard_normal(x.shape[0]).astype(np.float32)
    y = x + noise * np.float32(dist * _typical(x) / np.linalg.norm(noise))
    return y, np.ones(PLAN.n_chunks, np.uint8) if mask is None else mask


def _typical(x) -> float:
    return 0.05 * float(np.linalg.norm(x))


def _warm(b, x, rng, peers=(1, 2, 3), dist=1.0, rounds=4):
    for _ in range(rounds):
        for j in peers:
            y, m = _round(x, rng, dist)
            assert b.admit(j, y, x, m)


def test_honest_peers_move_the_model_as_they_are():
    rng = np.random.default_rng(0)
    x = rng.standard_normal(PLAN.n_params).astype(np.float32) * 10
    b = Bound(PLAN, [1, 2, 3])
    _warm(b, x, rng)
    y, m = _round(x, rng, 1.2)
    kept = y.copy()
    assert b.admit(1, y, x, m)
    np.testing.assert_array_equal(y, kept)  # within the radius, say 1: untouched
    assert b.clipped == 0 and b.refused == 0 and b.suspects == []
    assert b.tau == pytest.approx(bound.CLIP * _typical(x), rel=0.05)


def test_a_far_round_is_clipped_to_the_radius_and_a_partial_one_to_its_share():
    """The whole round moves x by tau at most; a round of which a quarter of the chunks
    arrived by tau * sqrt(1/4) at most, so what arrives keeps the bound."""
    rng = np.random.default_rng(1)
    x = rng.standard_normal(PLAN.n_params).astype(np.float32) * 10
    b = Bound(PLAN, [1, 2, 3])
    _warm(b, x, rng)
    y, m = _round(x, rng, 3.0 * bound.CLIP)  # beyond tau, within the refusal
    assert b.admit(3, y, x, m)
    assert np.linalg.norm(y - x) <= b.tau * 1.0001 and b.clipped == 1
    mask = np.zeros(PLAN.n_chunks, np.uint8)
    mask[::4] = 1
    y, _ = _round(x, rng, 3.0 * bound.CLIP)
    assert b.admit(3, y, x, mask)
    sel = np.repeat(mask.astype(bool), PLAN.chunk_elems)[: PLAN.n_params]
    share = sel.sum() / PLAN.n_params
    assert np.linalg.norm((y - x)[sel]) <= b.tau * np.sqrt(share) * 1.0001


def test_a_scaled_model_is_refused_and_its_sender_suspected():
    """The attack of issue 67: another device's model times -1000, again and again. Each is
    refused (nothing merged), the sender's suspicion climbs past SUSPECT and names it; the
    honest peers stay unsuspected and the radius stays theirs."""
    rng = np.random.default_rng(2)
    x = rng.standard_normal(PLAN.n_params).astype(np.float32)
    b = Bound(PLAN, [1, 2, 3])
    _warm(b, x, rng, dist=0.5)
    for _ in range(10):
        y = x * np.float32(-1000)
        kept = y.copy()
        assert not b.admit(3, y, x, np.ones(PLAN.n_chunks, np.uint8))
        np.testing.assert_array_equal(y, kept)
        _warm(b, x, rng, peers=(1, 2), dist=0.5, rounds=1)
    assert b.refused == 10 and b.suspects == [3]
    assert b.tau == pytest.approx(bound.CLIP * 0.5 * _typical(x), rel=0.05)  # honest peers'
    assert b.metrics()["suspect_peers"] == [3]


def test_a_suspect_peers_say_shrinks_and_comes_back_when_it_behaves():
    rng = np.random.default_rng(3)
    x = rng.standard_normal(PLAN.n_params).astype(np.float32) * 10
    b = Bound(PLAN, [1, 2, 3])
    _warm(b, x, rng)
    for _ in range(3):  # just past the radius: clipped, as honest rounds are now and then
        y, m = _round(x, rng, 1.2 * bound.CLIP)
        b.admit(3, y, x, m)
    assert b.suspects == [] and b.clipped == 3
    for _ in range(10):  # far past it, short of a refusal
        y, m = _round(x, rng, 3.5 * bound.CLIP)
        b.admit(3, y, x, m)
    assert b.suspects == [3] and b.refused == 0
    y, m = _round(x, rng, 1.0)
    assert b.admit(3, y, x, m)
    assert np.linalg.norm(y - x) < 0.7 * _typical(x)  # its say is 1 - suspicion (< 1/2 here)
    for _ in range(20):
        y, m = _round(x, rng, 1.0)
        b.admit(3, y, x, m)
    assert b.suspects == []


def test_a_peer_always_just_past_the_radius_is_named_one_now_and_then_is_not():
    """A replay of an old model sits just beyond the radius of models that train away from
    it, every round: it is named and its say falls to about a half. An honest peer lands past the radius
    now and then (one round in four here) and keeps its name clean."""
    rng = np.random.default_rng(4)
    x = rng.standard_normal(PLAN.n_params).astype(np.float32) * 10
    b = Bound(PLAN, [1, 2, 3])
    _warm(b, x, rng)
    for k in range(40):
        y, m = _round(x, rng, 1.1 * bound.CLIP)
        b.admit(3, y, x, m)
        y, m = _round(x, rng, 1.1 * bound.CLIP if k % 4 == 0 else 1.0)
        b.admit(2, y, x, m)
        _warm(b, x, rng, peers=(1,), rounds=1)
    assert b.suspects == [3] and b.refused == 0
    assert b.suspicion[2] < bound.SUSPECT / 2
    y, m = _round(x, rng, 1.0)
    assert b.admit(3, y, x, m)
    assert np.linalg.norm(y - x) < 0.6 * _typical(x)  # its say: about a half


def test_a_fresh_zero_model_admits_the_first_rounds_and_none_turns_it_off():
    x = np.zeros(PLAN.n_params, np.float32)
    b = Bound(PLAN, [1, 2])
    y = np.full(PLAN.n_params, 8.0, np.float32)
    assert b.admit(1, y, x, np.ones(PLAN.n_chunks, np.uint8)) and (y == 8).all()
    off = Bound(PLAN, [1, 2], "none")
    x = np.ones(PLAN.n_params, np.float32)
    y = x * np.float32(-1e6)
    assert off.admit(1, y, x, np.ones(PLAN.n_chunks, np.uint8)) and off.refused == 0
