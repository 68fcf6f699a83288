"""The agent's clock: its state from systemd-timesyncd's marks, a bounded wait, and an agent
that trains whatever the clock says and reports it."""

import threading
import time

from edgegossip import clock


def test_state_follows_timesyncd_marks(tmp_path):
    ts = tmp_path / "timesync"
    assert clock.state(ts) == "unknown"  # no timesyncd: nothing says either way
    ts.mkdir()
    assert clock.state(ts) == "unsynchronised"
    (ts / "synchronized").touch()
    assert clock.state(ts) == "synchronised"


def test_wait_is_bounded_and_ends_when_the_clock_is_synchronised(tmp_path):
    ts = tmp_path / "timesync"
    ts.mkdir()
    stop = threading.Event()
    t0 = time.monotonic()
    assert clock.wait(1.5, stop, ts) == "unsynchronised"
    assert 1.4 <= time.monotonic() - t0 < 10
    threading.Timer(0.5, lambda: (ts / "synchronized").touch()).start()
    t0 = time.monotonic()
    assert clock.wait(30, stop, ts) == "synchronised"
    assert time.monotonic() - t0 < 10  # not the 30 s
    (ts / "synchronized").unlink()
    stop.set()  # a stop ends the wait at once
    t0 = time.monotonic()
    assert clock.wait(30, stop, ts) == "unsynchronised" and time.monotonic() - t0 < 5
    assert clock.wait(30, threading.Event(), tmp_path / "none") == "unknown"  # never waits


def test_an_agent_without_a_synchronised_clock_waits_its_bound_then_trains(
    tmp_path, monkeypatch, mnist_data
):
    from edgegossip.agent import Agent
    from edgegossip.config import AgentConfig
    from edgegossip.metrics import read

    ts = tmp_path / "timesync"
    ts.mkdir()  # timesyncd runs, and no time server ever answers
    monkeypatch.setattr(clock, "TIMESYNC", ts)
    cfg = AgentConfig(
        id=0,
        listen="127.0.0.1:1",
        algorithm="local",
        workers=1,
        model="logreg",
        max_steps=300,
        eval_every=100,
        record_every_s=0,
        clock_wait_s=1.5,
        output=str(tmp_path / "out"),
    )
    final = Agent(cfg).run()
    assert final["step"] == 300 and final["clock"] == "unsynchronised"
    recs = read(tmp_path / "out" / "metrics.jsonl")
    waited = [r for r in recs if r.get("event") == "clock"]
    assert len(waited) == 1 and waited[0]["clock"] == "unsynchronised"
    assert 1.4 <= waited[0]["waited_s"] < 10
    steps = [r for r in recs if r.get("event") is None and "step" in r]
    assert steps and all(r["clock"] == "unsynchronised" for r in steps)


def test_fleet_status_says_when_a_clock_is_unsynchronised():
    from edgegossip.cli.fleet.status import COLUMNS, _flat

    assert "clock" in COLUMNS
    row = _flat({"name": "pi0", "state": "training", "clock": "unsynchronised"})
    assert row["clock"] == "unsynchronised" and "clock unsynchronised" in row["note"]
    assert _flat({"name": "pi1", "state": "training", "clock": "synchronised"})["note"] == ""
