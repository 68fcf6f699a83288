"""Issue 57, item 2: `emulate --medium wifi`, one Wi-Fi channel that every station shares, each
frame between two stations crossing it twice (station to access point, access point to
station), in the kernel (emulate/netns.py, Lan._add_air). Checked with real sockets: stations
that all saturate the channel get about equal shares, and together never more than half its
rate (every frame twice); then a fleet trains across it and reports what the air carried."""

import json
import subprocess
import sys
import time

import pytest
from click.testing import CliRunner

from edgegossip.cli.app import cli
from edgegossip.emulate import netns

SECONDS = 3.0
# the mixed fleet below: in three runs on an idle machine its average model scored 0.79-0.81
# and each device was within 0.026 of it; a busy machine gives the devices fewer steps and
# fewer exchanges in the same seconds (each device starts only 16-24 in the run: an exchange
# that meets a peer busy answering another waits out its 5 s deadline)
LEARNED, HOLDS = 0.6, 0.06  # a CI run on this machine: 0.696
PAYLOAD = 1400  # bytes per datagram; 1442 on the wire with IPv4, UDP and Ethernet headers
WIRE = PAYLOAD + 42

# node i floods node (i + 1) % n; a receiver counts its bytes from first to last datagram
RECEIVER = """import socket, sys, time
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind((sys.argv[1], 5000)); s.settimeout(1.5)
n, first, last = 0, None, None
print("ready", flush=True)
while True:
    try:
        b = s.recv(2048)
    except socket.timeout:
        break
    last = time.monotonic(); first = first or last; n += len(b)
print(n, (last - first) if first else 0.0)
"""
SENDER = """import socket, sys, time
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); b = bytes(int(sys.argv[3]))
end = time.monotonic() + float(sys.argv[2])
while time.monotonic() < end:
    s.sendto(b, (sys.argv[1], 5000))
"""


def _flood(lan, n: int) -> list[float]:
    """Each station's goodput, Mbit/s, while all of them send as fast as they can."""
    receivers = []
    for i in range(n):
        p = subprocess.Popen(
            [*lan.exec_args(i), sys.executable, "-c", RECEIVER, lan.address(i)],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert p.stdout is not None and p.stdout.readline().strip() == "ready"
        receivers.append(p)
    senders = [
        subprocess.Popen(
            [*lan.exec_args(i), sys.executable, "-c", SENDER]
            + [lan.address((i + 1) % n), str(SECONDS), str(PAYLOAD)]
        )
        for i in range(n)
    ]
    for p in senders:
        p.wait(timeout=60)
    out = []
    for p in receivers:
        got, span = p.communicate(timeout=60)[0].split()
        assert float(span) > SECONDS / 2, "a station got almost nothing through"
        out.append(int(got) * 8 / float(span) / 1e6)
    return out


@pytest.mark.root
def test_stations_share_one_channel_and_each_frame_crosses_it_twice(root_only):
    rate = 8.0  # Mbit/s: well below what one sender loop offers, so every station saturates
    lan = netns.Lan(4, rate=f"{rate:g}mbit", medium="wifi", run_id=203).up()
    try:
        shares = _flood(lan, 4)
        air = lan.air()
    finally:
        lan.down()
    total = sum(shares)
    # every frame crosses the air twice: the stations together deliver at most half the rate
    # (in payload, PAYLOAD / WIRE of it); htb's bucket lets a little more through at the start
    ceiling = rate / 2 * PAYLOAD / WIRE
    assert 0.8 * ceiling < total < 1.05 * ceiling, (shares, ceiling)
    for s in shares:  # each saturating station about 1/N of it
        assert 0.8 * total / 4 < s < 1.2 * total / 4, shares
    assert air["dropped"] > 0  # offered far beyond the channel: its queues overflowed
    delivered = total * 1e6 / 8 * SECONDS  # bytes, about: the shares' spans are near SECONDS
    assert air["bytes"] > 2 * 0.8 * delivered  # each delivered frame crossed the air twice


def test_wifi_needs_namespaces_and_a_rate_and_is_not_exported(tmp_path):
    cases = [
        (["--backend", "loopback", "--medium", "wifi"], "--medium wifi is a queue in the kernel"),
        (["--backend", "netns", "--medium", "wifi", "--rate", "none"], "give --rate"),
        (["--export", "compose", "--out", str(tmp_path / "c"), "--medium", "wifi"], "compose"),
    ]
    for args, words in cases:
        res = CliRunner().invoke(cli, ["emulate", "--duration", "5", *args])
        assert res.exit_code in (2, 4), res.output  # 4: netns without root
        if res.exit_code == 2:
            assert words in res.output and len(res.output.strip().splitlines()) == 1, res.output


@pytest.mark.root
def test_a_mixed_fleet_on_one_channel_trains_skewed_data_to_one_model(root_only, tmp_path):
    """Issue 57's fleet, small: 8 boards of two profiles (4 Pi 4s, 4 Pi 5s) on one 10 Mbit/s
    channel, 10% loss in bursts of 4, each device's data a Dirichlet(0.1) cut of MNIST, logreg,
    24 s of which the last 12 are the closing phase, the average model sampled as it goes, with
    docs/usage.md's settings for skewed data (lr 0.01, momentum 0.9, p = 1/4).
    Each board is held to its profile's share and memory, the kernel's quota holds the Pi 4s
    back and they train slower; the run's device groups are removed after it; the air
    carried every datagram sent, twice, less what it dropped; the fleet learned one model and
    each device holds it at the end."""
    from edgegossip.data.split import split_mnist
    from edgegossip.emulate import cgroups

    list(split_mnist(tmp_path / "data", 8, "dirichlet", beta=0.1))
    t0 = time.monotonic()
    p = subprocess.run(
        [sys.executable, "-m", "edgegossip.cli.app", "emulate", "--devices", "4:pi4,4:pi5"]
        + ["--device-scale", "0.3", "--medium", "wifi", "--rate", "10mbit", "--loss", "0.1"]
        + ["--loss-model", "gilbert-elliott", "--burst", "4", "--data", str(tmp_path / "data")]
        + ["--model", "logreg", "--p", "1/4", "--lr", "0.01", "--momentum", "0.9"]
        + ["--duration", "24", "--closing", "12"]
        + ["--checkpoint-every-s", "2", "--curve", "--out", str(tmp_path / "run"), "--json"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert p.returncode == 0, p.stderr[-2000:]
    s = json.loads(p.stdout)
    agents = s["agents"]
    pi4, pi5 = agents[:4], agents[4:]
    assert {(a["device"], a["cpu_share"], a["memory_limit_mb"]) for a in pi4} == {
        ("pi4", 0.1014, 8192)
    }
    assert {(a["device"], a["cpu_share"]) for a in pi5} == {("pi5", 0.3)}
    assert all(a["cpu_throttled_s"] > 0.5 for a in pi4), agents  # held to their quota
    assert all(0 < a["memory_peak_mb"] < a["memory_limit_mb"] for a in pi4), agents
    assert {a["oom_kills"] for a in pi4} == {0}, agents
    # a third of a Pi 5's share (0.338); on a busy machine a Pi 5 may get less than its own
    assert max(a["steps_per_s"] for a in pi4) < min(a["steps_per_s"] for a in pi5), agents
    sent = sum(a["datagrams_sent"] for a in agents)
    air = s["air"]
    assert air["packets"] >= 2 * sent - air["dropped"] > 0, (air, sent)
    average = s["average_model_accuracy"]
    assert average > LEARNED, average
    for a in agents:
        assert abs(a["accuracy"] - average) < HOLDS, (a["accuracy"], average)
    curve = s["average_model_curve"]
    assert [r["time_s"] for r in curve] == sorted(r["time_s"] for r in curve) and len(curve) >= 3
    assert curve[-1]["devices"] == 8 and curve[-1]["accuracy"] > curve[0]["accuracy"], curve
    for controller in ("cpu", "memory"):  # the run's device groups are gone
        base = cgroups._base("x", controller).parent
        assert not [d for d in base.iterdir() if d.name.startswith("edgegossip-")]
    print(f"mixed wifi fleet: {time.monotonic() - t0:.0f} s, air {air}, curve {curve}")


def _congested_run(tmp_path, congestion: str, seconds: int) -> dict:
    p = subprocess.run(
        [sys.executable, "-m", "edgegossip.cli.app", "emulate", "--nodes", "6", "--medium"]
        + [
            "wifi",
            "--rate",
            "2mbit",
            "--loss",
            "0.05",
            "--model",
            "logreg",
            "--p",
            "1/2",
            "--payload",
            "float32",
        ]
        + ["--duration", str(seconds), "--congestion", congestion]
        + ["--out", str(tmp_path / congestion), "--json"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert p.returncode == 0, p.stderr[-2000:]
    return json.loads(p.stdout)


@pytest.mark.root
def test_senders_that_follow_their_reports_stop_flooding_a_shared_channel(root_only, tmp_path):
    """Issue 66, item 1, small: six devices whose exchanges offer far more than a 2 Mbit/s
    channel carries. At a fixed pace the access point drops much of what they send; with
    net.congestion = aimd (the default) each backs off on its links' queueing delay and the
    channel drops next to nothing, while the 5% random loss stays (no reason to slow down)."""
    fixed = _congested_run(tmp_path, "fixed", 10)  # floods from its first round
    aimd = _congested_run(tmp_path, "aimd", 20)  # learns each link's base delay first
    assert fixed["air"]["congestion_loss"] > 0.3, fixed["air"]  # 0.51-0.53 here
    # 0.025-0.033 here idle, 0.058 in a CI run: at most a fifth of the fixed pace's
    assert aimd["air"]["congestion_loss"] <= 0.1, aimd["air"]
    for a in aimd["agents"]:
        assert a["congested_intervals"] > 0, a
    print(f"fixed air {fixed['air']}, aimd air {aimd['air']}")
