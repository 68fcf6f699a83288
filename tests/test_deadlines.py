"""Per-link exchange deadlines (protocol/deadlines.py), worked by hand."""

import pytest

from edgegossip.protocol.deadlines import Deadlines


def _adaptive(**kw):
    return Deadlines(
        "adaptive", **{"initial_s": 10.0, "min_s": 0.2, "max_s": 120.0, "settle_s": 0.5, **kw}
    )


def test_fixed_never_moves():
    d = Deadlines("fixed", 10.0, 0.2, 120.0, 0.5)
    for _ in range(5):
        d.observe(1, 0.0, 0.1, 10.0, True)
    assert d.for_peer(1) == 10.0 and d.snapshot() == {}


def test_adaptive_uses_the_configured_value_until_three_transfers_are_seen():
    d = _adaptive()
    d.observe(1, 100.0, 101.0, 110.0, True)
    d.observe(1, 200.0, 202.0, 210.0, True)
    assert d.for_peer(1) == 10.0
    d.observe(1, 300.0, 303.0, 310.0, True)
    # transfers 1, 2, 3 s; the 90% quantile of three is the largest: 1.5 * 3 + 0.5
    assert d.for_peer(1) == pytest.approx(5.0)
    assert d.for_peer(2) == 10.0  # another link knows nothing yet


def test_a_transfer_cut_off_by_its_deadline_doubles_what_it_had():
    d = _adaptive()
    for t in (0.1, 0.1, 0.1):
        d.observe(1, 0.0, t, 10.0, True)
    assert d.for_peer(1) == pytest.approx(0.65)
    # the link slowed down: a reply still arriving 0.1 s before its 0.65 s deadline
    d.observe(1, 0.0, 0.55, 0.65, False)
    assert d.for_peer(1) == pytest.approx(1.5 * 1.3 + 0.5)
    # a partial reply that went quiet long before its deadline (lost datagrams) is not cut off
    d2 = _adaptive()
    for t in (0.1, 0.1, 0.1, 0.2):
        d2.observe(1, 0.0, t, 10.0, t == 0.1)
    assert d2.for_peer(1) == pytest.approx(1.5 * 0.2 + 0.5)


def test_nothing_arrived_tells_nothing_and_bounds_hold():
    d = _adaptive(max_s=4.0)
    for _ in range(3):
        d.observe(1, 0.0, None, 10.0, False)
    assert d.for_peer(1) == 10.0  # still the first guess
    for _ in range(3):
        d.observe(1, 0.0, 7.0, 10.0, True)
    assert d.for_peer(1) == 4.0  # 1.5 * 7 + 0.5, capped
    fast = _adaptive(min_s=0.2, settle_s=0.0)
    for _ in range(3):
        fast.observe(1, 0.0, 0.001, 10.0, True)
    assert fast.for_peer(1) == 0.2  # floored
    assert fast.snapshot() == {"1": 0.2}
