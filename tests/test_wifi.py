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
def test_a_fleet_trains_across_one_wifi_channel(root_only, tmp_path, mnist_data):
    """Three logreg agents on a 10 Mbit/s channel, 10% loss, 6 s: they learn, and the summary
    says what the air carried (at least every datagram sent, twice, less what it dropped)."""
    t0 = time.monotonic()
    p = subprocess.run(
        [sys.executable, "-m", "edgegossip.cli.app", "emulate", "--nodes", "3"]
        + ["--medium", "wifi", "--rate", "10mbit", "--model", "logreg", "--duration", "6"]
        + ["--loss", "0.1", "--p", "1/4", "--out", str(tmp_path / "run"), "--json"],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert p.returncode == 0, p.stderr[-2000:]
    s = json.loads(p.stdout)
    assert s["average_model_accuracy"] > 0.85, s["average_model_accuracy"]
    sent = sum(a["datagrams_sent"] for a in s["agents"])
    air = s["air"]
    assert air["packets"] >= 2 * sent - air["dropped"] > 0, (air, sent)
    assert 0 <= air["congestion_loss"] < 1
    print(f"wifi fleet: {time.monotonic() - t0:.0f} s, air {air}")
