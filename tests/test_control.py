"""The agent's control endpoint as a real process on loopback: CURVE, allow-listed keys only,
status/pause/resume/checkpoint/stop, and requests that must change nothing."""

import time

import pytest
import zmq
import zmq.auth

from edgegossip.control import client
from tests.helpers.waiting import until
from tests.test_agent import _cfg, _start


@pytest.fixture
def certs(tmp_path):
    d = tmp_path / "certs"
    allowed = d / "allowed"
    allowed.mkdir(parents=True)
    for name in ("server", "operator", "stranger"):
        zmq.auth.create_certificates(str(d), name)
    (allowed / "operator.key").write_bytes((d / "operator.key").read_bytes())
    return d


def _port(free_udp_port):
    import socket

    from tests.helpers.ports import free_port

    return free_port(socket.SOCK_STREAM)


def _ask(port, op, certs, who="operator", timeout_s=3.0):
    return client.request(
        "127.0.0.1",
        port,
        op,
        str(certs / f"{who}.key_secret"),
        str(certs / "server.key"),
        timeout_s,
    )


def _raw(port, certs, body: bytes) -> dict:
    import json

    c_pub, c_sec = zmq.auth.load_certificate(str(certs / "operator.key_secret"))
    s_pub, _ = zmq.auth.load_certificate(str(certs / "server.key"))
    sock = zmq.Context.instance().socket(zmq.REQ)
    sock.linger = 0
    sock.curve_publickey, sock.curve_secretkey, sock.curve_serverkey = c_pub, c_sec, s_pub
    sock.connect(f"tcp://127.0.0.1:{port}")
    sock.send(body)
    assert sock.poll(5000), "no reply to a malformed request"
    reply = json.loads(sock.recv())
    sock.close(0)
    return reply


def _served(tmp_path, free_udp_port, certs, port, **kw):
    """A local-only agent's config with its control endpoint on loopback port `port`."""
    return _cfg(
        tmp_path,
        free_udp_port,
        algorithm="local",
        peers=(),
        workers=1,
        endpoint=f"127.0.0.1:{port}",
        server_key=str(certs / "server.key_secret"),
        client_keys=str(certs / "allowed"),
        **kw,
    )


def test_control_endpoint(tmp_path, free_udp_port, mnist_data, procs, certs):
    port = _port(free_udp_port)
    cfg = _served(tmp_path, free_udp_port, certs, port, eval_every=50)
    p = _start(cfg, tmp_path)
    procs.append(p)
    st = until(lambda: _try(port, certs))
    assert st["agent"] == 0 and st["state"] == "training" and len(st["config_hash"]) == 12
    st = until(lambda: (s := _ask(port, "status", certs))["accuracy"] is not None and s)
    assert 0 <= st["accuracy"] <= 1 and st["step"] >= 50 and st["peak_rss_mb"] > 0

    # a key that is not allow-listed gets no answer, and nothing changes
    with pytest.raises(client.ControlError, match="allow-listed"):
        _ask(port, "stop", certs, who="stranger", timeout_s=1.5)
    # malformed, unknown, oversized: an error reply each, and training goes on
    assert _raw(port, certs, b"\xff\x00garbage")["error"] == "request is not JSON"
    assert "unknown op" in _raw(port, certs, b'{"op": "rm -rf"}')["error"]
    assert _raw(port, certs, b"[1, 2]")["ok"] is False
    big = _ask(port, "status", certs)["step"]
    until(lambda: _ask(port, "status", certs)["step"] > big)
    assert p.poll() is None

    assert _ask(port, "pause", certs)["state"] == "paused"
    time.sleep(0.5)
    s1 = _ask(port, "status", certs)
    time.sleep(1.0)
    s2 = _ask(port, "status", certs)
    assert s1["state"] == s2["state"] == "paused" and s1["step"] == s2["step"]
    ck = _ask(port, "checkpoint", certs)  # served while paused
    assert ck["step"] == s2["step"] and ck["path"].endswith("checkpoint.npz")
    assert _ask(port, "resume", certs)["state"] == "training"
    until(lambda: _ask(port, "status", certs)["step"] > s2["step"])

    assert _ask(port, "stop", certs)["state"] == "stopping"
    p.communicate(timeout=30)
    assert p.returncode == 0


def _try(port, certs):
    try:
        return _ask(port, "status", certs, timeout_s=1.0)
    except client.ControlError:
        return None


def test_control_endpoint_config_errors():
    from edgegossip import config

    base = {
        "agent": {"id": 0, "listen": "127.0.0.1:5000"},
        "train": {"algorithm": "local", "workers": 1},
    }
    with pytest.raises(config.ConfigError, match="control.server_key: needed"):
        config.from_dict({**base, "control": {"endpoint": "127.0.0.1:5001"}})
    with pytest.raises(config.ConfigError, match="control.endpoint"):
        config.from_dict(
            {**base, "control": {"endpoint": "nope", "server_key": "a", "client_keys": "b"}}
        )


def test_a_flood_of_idle_connections_is_survived(tmp_path, free_udp_port, mnist_data, procs, certs):
    """Issue 21, item 4: idle TCP connections to the control port, kept up for seconds against
    an agent with few descriptors, once made checkpoint writes fail with EMFILE and the agent
    exit, and the operator got no answer after the flood stopped. Handshakes are bounded now,
    a failed checkpoint is counted, and the agent answers once the flood ends. The flood starts
    as soon as the port takes connections, before the first metrics record: a lazy import in
    that record (np.median's of numpy.ma) once failed for want of a descriptor and ended the
    agent. A failing checkpoint is logged when the failures start, not at every one."""
    import os
    import resource
    import socket
    import subprocess
    import sys

    from edgegossip import config

    port = _port(free_udp_port)
    cfg = _served(tmp_path, free_udp_port, certs, port, eval_every=20, checkpoint_every=10)
    path = tmp_path / "agent.toml"
    path.write_text(config.to_toml(cfg))
    nofile = 96

    def few_descriptors():
        resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))

    p = subprocess.Popen(
        [sys.executable, "-m", "edgegossip.cli.app", "agent", "--config", str(path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "OPENBLAS_NUM_THREADS": "1"},
        preexec_fn=few_descriptors,
    )
    procs.append(p)

    def port_open() -> bool:
        with socket.socket() as s:
            return s.connect_ex(("127.0.0.1", port)) == 0

    until(port_open, what="the control port", every=0.001)
    flood: list[socket.socket] = []
    end = time.monotonic() + 6
    while time.monotonic() < end:  # keep more connections open than the agent has descriptors
        flood = [s for s in flood if s.fileno() != -1]
        while len(flood) < 2 * nofile:
            s = socket.socket()
            s.setblocking(False)
            s.connect_ex(("127.0.0.1", port))
            flood.append(s)
        time.sleep(0.2)
        for s in flood[: nofile // 4]:  # and reopen some, as a flood that goes on would
            s.close()
    assert p.poll() is None, p.communicate(timeout=10)
    for s in flood:
        s.close()
    st = until(lambda: _try(port, certs), timeout=30, what="an answer after the flood")
    assert st["step"] > 0 and st["state"] == "training"
    assert _ask(port, "stop", certs)["state"] == "stopping"
    out, err = p.communicate(timeout=30)
    assert p.returncode == 0, err[-2000:]
    assert err.count("checkpoint not written") <= err.count("checkpoint written again") + 1, err


@pytest.mark.parametrize("allow,answered", [("127.0.0.2", False), ("127.0.0.0/8", True)])
def test_the_control_port_takes_only_the_allowed_addresses(
    tmp_path, free_udp_port, mnist_data, procs, certs, allow, answered
):
    """Issue 21, item 4: the control port accepts connections from control.allow_from only
    (fleet.toml's [fleet] control_from); from elsewhere even an allow-listed key gets nothing."""
    port = _port(free_udp_port)
    cfg = _served(tmp_path, free_udp_port, certs, port, allow_from=allow, max_steps=0)
    p = _start(cfg, tmp_path)
    procs.append(p)
    if answered:
        assert until(lambda: _try(port, certs))["state"] == "training"
    else:
        time.sleep(3)
        assert _try(port, certs) is None and p.poll() is None
    p.terminate()
    p.communicate(timeout=30)


def test_control_from_goes_from_fleet_toml_into_every_agent_toml(tmp_path):
    from edgegossip.fleet import agentconf, create, inventory
    from edgegossip.fleet.inventory import InventoryError

    hosts = [{"name": f"pi{i}", "address": f"192.0.2.{i + 1}", "user": "pi"} for i in (0, 1)]
    f = create.create(tmp_path / "f", "t", hosts, {"train": {}}, progress=lambda m: None)
    text = (f.root / "fleet.toml").read_text()
    (f.root / "fleet.toml").write_text(
        text.replace("[fleet]\n", '[fleet]\ncontrol_from = ["192.0.2.100", "10.1.0.0/16"]\n', 1)
    )
    f = inventory.load(f.root)
    assert f.control_from == ("192.0.2.100", "10.1.0.0/16")
    assert agentconf.render(f, f.devices[0]).allow_from == "192.0.2.100,10.1.0.0/16"
    inventory.save(f)
    assert inventory.load(f.root).control_from == f.control_from
    (f.root / "fleet.toml").write_text(
        (f.root / "fleet.toml").read_text().replace('"10.1.0.0/16"', '"not a net"')
    )
    with pytest.raises(InventoryError, match="control_from"):
        inventory.load(f.root)
