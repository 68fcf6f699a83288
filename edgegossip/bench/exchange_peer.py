"""Two peers exchanging a model over lossy UDP: the data plane end to end, in real processes.

Each round both peers send their pre-exchange parameters, wait for the other's until a deadline,
and apply the symmetric elastic pull on the chunks that arrived:

    x_i <- x_i - alpha * m_j * (x_i - x_j)

Peer 0 starts at 0 and peer 1 at 1, so with full delivery and alpha = 0.5 both means meet at 0.5
after one round; lost chunks show up as a mask fraction below 1 and a gap that closes more slowly.
Run as `python -m edgegossip.bench.exchange_peer PEER_ID MY_ADDR OTHER_ADDR ...` by
`edgegossip exchange`.
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass

import numpy as np

from edgegossip import kernels
from edgegossip.dataplane import wire
from edgegossip.dataplane.chunking import ChunkPlan
from edgegossip.dataplane.plane import DataPlane, PlaneSpec
from edgegossip.dataplane.sender import send_vector
from edgegossip.transport.lossmodel import LossModel

KEY = wire.derive_key("edgegossip-demo")
FLEET = 77


@dataclass(frozen=True)
class Peer:
    """One end of the exchange, as `edgegossip exchange` starts it."""

    me: int
    my_addr: tuple[str, int]
    other: tuple[str, int]
    transport: str
    n_params: int
    rounds: int
    alpha: float
    inject: float  # loss injected on receive (loopback)
    rate: float  # bytes per second
    deadline_s: float


def _plane(p: Peer, plan: ChunkPlan) -> DataPlane:
    # no UDP GSO: under `--backend netns` nftables would drop a GSO buffer's datagrams together
    spec = PlaneSpec(
        p.transport,
        p.my_addr,
        FLEET,
        p.me,
        rate_bytes_per_s=p.rate,
        gso=False,
        inject=LossModel("bernoulli", p.inject) if p.inject else None,
        loss_seed=p.me,
        senders=frozenset({1 - p.me}),
    )
    return DataPlane(spec, plan, KEY)


def _say(row: dict) -> None:
    print(json.dumps(row), flush=True)


def run_peer(p: Peer) -> None:
    plan = ChunkPlan(p.n_params, wire.default_chunk_bytes())
    x = np.full(p.n_params, float(p.me), dtype=np.float32)
    pre = np.empty_like(x)
    y = np.empty_like(x)
    mask = np.zeros(plan.n_chunks, np.uint8)
    plane = _plane(p, plan)
    t, inbox, enc, other = plane.transport, plane.inbox, plane.encoder, 1 - p.me
    time.sleep(0.5)  # both peers bound before the first round
    try:
        for r in range(p.rounds):
            np.copyto(pre, x)
            send_vector(t, enc, p.other, other, pre, wire.MsgType.PARAMS, r)
            deadline = time.monotonic() + p.deadline_s
            got = inbox.rounds.collect(other, wire.MsgType.PARAMS, r, deadline, y, mask, settle=0.3)
            kernels.elastic_pull(x, pre, y, mask, plan.chunk_elems, p.alpha)
            mean = float(x.mean(dtype=np.float64))
            _say({"peer": p.me, "round": r, "chunks": plan.n_chunks, "arrived": got, "mean": mean})
        time.sleep(0.5)
    finally:
        plane.close()
    arrived, expected = inbox.links.loss()
    _say(
        {
            "peer": p.me,
            "final": True,
            "datagrams_sent": enc.datagrams,
            "bytes_sent": enc.bytes,
            "link_arrived": arrived,
            "link_expected": expected,
            **inbox.counter.snapshot(),
        }
    )


def main(argv: list[str]) -> None:
    host, port = argv[1].rsplit(":", 1)
    ohost, oport = argv[2].rsplit(":", 1)
    transport, n_params, rounds, alpha, inject, rate, deadline = argv[3:10]
    run_peer(
        Peer(
            int(argv[0]),
            (host, int(port)),
            (ohost, int(oport)),
            transport,
            int(n_params),
            int(rounds),
            float(alpha),
            float(inject),
            float(rate),
            float(deadline),
        )
    )


if __name__ == "__main__":
    main(sys.argv[1:])
