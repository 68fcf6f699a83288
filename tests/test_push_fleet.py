"""Issue 47: a gossip-push fleet where a device is off keeps mixing. Three configured agents on
loopback (logreg on real MNIST), one of which never runs, or is off for at least 8 s and comes back:
the live agents still merge and their push-sum weights stay above the floor, the silent peer
is named in their records, and a returning peer's weight and merges recover. Before running
sums and probes, both live agents' weights drained to 0 within a minute."""

import signal
import time

import pytest

from edgegossip.config import AgentConfig
from edgegossip.metrics import read
from edgegossip.protocol.gossip_push import WEIGHT_FLOOR
from tests.helpers.loopback import fleet_configs
from tests.helpers.waiting import until
from tests.test_agent import _start

pytestmark = pytest.mark.timeout(300)
WINDOW_S = 8
OFF_S = 8  # the device that goes off stays off at least this long (silence takes 2-6 s)


def _fleet(tmp_path, free_udp_port) -> list[AgentConfig]:
    return fleet_configs(
        tmp_path,
        [free_udp_port() for _ in range(3)],
        range(3),
        algorithm="gossip-push",
        model="logreg",
        eval_every=100,
        checkpoint_every=500,
        deadline_s=1.0,
        p=0.01,
        key="push-fleet-test-secret",
    )


def _run(cfg: AgentConfig, tmp_path):
    (tmp_path / f"c{cfg.id}").mkdir(exist_ok=True)
    return _start(cfg, tmp_path / f"c{cfg.id}")


def _records(tmp_path, i: int) -> list[dict]:
    """Agent i's step records since its last start (its counters count from there)."""
    path = tmp_path / f"a{i}" / "metrics.jsonl"
    recs = read(path) if path.is_file() else []
    starts = [k for k, r in enumerate(recs) if r.get("event") == "start"]
    since = recs[starts[-1] :] if starts else recs
    return [r for r in since if "step" in r and r.get("event") is None]


def _merges(r: dict) -> int:
    return r["exchanges"].get("completed", 0) + r["exchanges"].get("partial", 0)


def _merging_in_the_last(tmp_path, i: int, window_s: float) -> tuple[int, dict]:
    """Merges agent i made in its last window_s of records, and its last record."""
    recs = _records(tmp_path, i)
    assert recs, f"agent {i} wrote no record"
    last = recs[-1]
    start = [r for r in recs if r["time"] <= last["time"] - window_s]
    assert start, f"agent {i} has not run {window_s} s"
    return _merges(last) - _merges(start[-1]), last


def _stop(procs) -> None:
    for a in procs:
        if a.poll() is None:
            a.send_signal(signal.SIGTERM)
    for a in procs:
        a.communicate(timeout=30)


def test_a_peer_that_never_runs_does_not_drain_the_fleet(
    tmp_path, free_udp_port, mnist_data, procs
):
    """Waits (bounded) for both live agents to have merged within their last WINDOW_S, with
    weight above the floor: a fixed 15 s once saw agent 0 receive nothing on a busy machine."""
    cfgs = _fleet(tmp_path, free_udp_port)
    live = [_run(c, tmp_path) for c in cfgs[:2]]
    procs += live

    def merging(i: int) -> bool:
        recs = _records(tmp_path, i)
        if not recs or recs[-1]["time"] - recs[0]["time"] < WINDOW_S:
            return False
        merged, last = _merging_in_the_last(tmp_path, i, WINDOW_S)
        return merged > 0 and last["push_weight"] > WEIGHT_FLOOR and last["silent_peers"] == [2]

    until(
        lambda: all(merging(i) for i in (0, 1)),
        timeout=180,
        what="agents 0 and 1 merging, weight above the floor, agent 2 named silent",
    )
    for a in live:
        assert a.poll() is None, a.communicate(timeout=5)
    for i in (0, 1):
        last = _records(tmp_path, i)[-1]
        assert "weight_below_floor" not in last["alarms"], last
        assert last["push_probes"] > 0  # the silent peer got probes, not weight
    _stop(live)


def _mixing(tmp_path, i: int) -> bool:
    """Agent i merged in its last WINDOW_S of records, holds weight above the floor and names
    no peer silent (False while it has not run that long)."""
    recs = _records(tmp_path, i)
    if not recs:
        return False
    last = recs[-1]
    start = [r for r in recs if r["time"] <= last["time"] - WINDOW_S]
    return bool(
        start
        and _merges(last) > _merges(start[-1])
        and last["push_weight"] > WEIGHT_FLOOR
        and last["silent_peers"] == []
    )


def test_a_peer_off_for_a_while_comes_back_and_mixes_again(
    tmp_path, free_udp_port, mnist_data, procs
):
    """Each phase waits for the event it asserts (bounded), not a fixed time: on a busy
    machine 12 s was once too short for a first checkpoint and 30 s for silence to be named."""
    cfgs = _fleet(tmp_path, free_udp_port)
    agents = [_run(c, tmp_path) for c in cfgs]
    procs += agents
    until(
        lambda: (tmp_path / "a2" / "checkpoint.npz").is_file() and _records(tmp_path, 2),
        timeout=120,
        what="agent 2's first checkpoint",
    )
    agents[2].kill()  # a power cut: back from its last checkpoint
    agents[2].wait()
    off = time.monotonic()
    until(  # said while it is off
        lambda: all(
            _records(tmp_path, i) and _records(tmp_path, i)[-1]["silent_peers"] == [2]
            for i in (0, 1)
        ),
        timeout=120,
        what="agents 0 and 1 naming agent 2 silent",
    )
    time.sleep(max(0.0, OFF_S - (time.monotonic() - off)))  # off for OFF_S at least
    agents[2] = _run(cfgs[2], tmp_path)
    procs.append(agents[2])
    until(
        lambda: all(_mixing(tmp_path, i) for i in (0, 1, 2)),
        timeout=180,
        what="every agent merging again with weight above the floor and no silent peer",
    )
    _stop(agents)
