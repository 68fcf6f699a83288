"""The five data-plane attacks sent to a real agent process on each transport. The test plays
the agent's two peers A and C (it holds the fleet secret, as a sniffing insider or a replaying
outsider with captured traffic would need only the captures) and reads the agent's own metrics:
every attack is dropped under its reason, and every legitimate datagram sent right after an
attack is accepted."""

import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from edgegossip import config
from edgegossip.config import AgentConfig, Peer
from edgegossip.dataplane import wire
from edgegossip.dataplane.chunking import ChunkPlan
from edgegossip.dataplane.outbox import Encoder
from edgegossip.metrics import read
from edgegossip.transport import make_transport

A, B, C = 0, 1, 2
SECRET = "attack-test-fleet-secret"


def _start(cfg: AgentConfig, folder):
    folder.mkdir(exist_ok=True)
    path = folder / "agent.toml"
    path.write_text(config.to_toml(cfg))
    return subprocess.Popen(
        [sys.executable, "-m", "edgegossip.cli.app", "agent", "--config", str(path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "OPENBLAS_NUM_THREADS": "1"},
    )


def _stop(p) -> None:
    p.send_signal(signal.SIGTERM)
    out, err = p.communicate(timeout=30)
    assert p.returncode == 0, err


def _final(out) -> dict:
    return [r for r in read(out / "metrics.jsonl") if r.get("event") == "stop"][-1]


@pytest.mark.parametrize("kind", ["udp", "zmq"])
def test_attacks_on_a_running_agent(tmp_path, free_udp_port, mnist_data, kind):
    ports = [free_udp_port() for _ in range(3)]
    cfg = AgentConfig(
        id=B,
        listen=f"127.0.0.1:{ports[B]}",
        workers=3,
        model="logreg",
        peers=(Peer(A, "127.0.0.1", ports[A]), Peer(C, "127.0.0.1", ports[C])),
        key=SECRET,
        fleet=5,
        p=0.0,
        transport=kind,
        payload="float32",  # the rounds below are framed as float32, the counts per its chunks
        eval_every=50,
        output=str(tmp_path / "b"),
    )
    key = wire.derive_key(SECRET)
    plan = ChunkPlan(7850, cfg.chunk_bytes)  # logreg
    x = np.ones(plan.n_params, np.float32)
    a = Encoder(plan, key, 5, A, session=7)
    c = Encoder(plan, key, 5, C, session=3)
    out = make_transport(kind, rate_bytes_per_s=20e6)
    dest = ("127.0.0.1", ports[B])

    def frames(enc, rnd, receiver=B):
        # A's rounds open exchanges (REPLY), as a peer's do: B answers and merges each, where
        # a round nothing collects would have its buffer given back, the rest dropped
        chunks = enc.chunks(x, wire.MsgType.PARAMS, rnd, receiver=receiver, flags=wire.FLAG_REPLY)
        return [bytes(d) for d in chunks]

    def send(datagrams):
        for d in datagrams:
            out.send(dest, memoryview(d))
        time.sleep(0.3)

    n = plan.n_chunks
    agent = _start(cfg, tmp_path / "run1")
    try:
        time.sleep(4)  # loaded MNIST, bound its socket
        send(frames(a, 1, receiver=C) + frames(c, 1, receiver=A))  # 1: replay across destinations
        send(frames(a, 1))  # A's real traffic to B
        send(frames(a, 2))
        send(frames(a, 2**31)[:1] + frames(a, 2**32 - 1)[:1])  # 4: poisoned rounds
        send(frames(a, 3))
        honest = a._seq[B]
        a._seq[B] = 2**63 - 1
        send(frames(a, 4)[:1])  # 5: poisoned sequence
        a._seq[B] = honest
        send(frames(a, 4))
        old_session = frames(a, 5)
        send(old_session)
        a = Encoder(plan, key, 5, A, session=8)  # 3: A restarts, round 1
        send(frames(a, 1))
        send(old_session)  # its old session replayed
        captured = frames(a, 2)
        send(captured)
    finally:
        _stop(agent)
    first = _final(tmp_path / "b")
    assert first["drops"] == {
        "wrong_receiver": 2 * n,
        "round_jump": 2,
        "seq_jump": 1,
        "old_session": n,
    }, first["drops"]
    assert first["datagrams_received"] == 7 * n

    agent = _start(cfg, tmp_path / "run2")  # 2: B restarts
    try:
        time.sleep(4)
        send(captured + frames(a, 3))
    finally:
        _stop(agent)
    second = _final(tmp_path / "b")  # counters are per process
    assert sum(second["drops"].values()) == n, second["drops"]
    assert set(second["drops"]) <= {"replayed", "stale"}
    assert second["datagrams_received"] == n  # A's next round, right after the replay
    out.close()
