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

import numpy as np

from edgegossip import kernels
from edgegossip.dataplane import wire
from edgegossip.dataplane.chunking import ChunkPlan
from edgegossip.dataplane.plane import DataPlane, PlaneSpec
from edgegossip.dataplane.sender import send_vector

KEY = wire.derive_key("edgegossip-demo")
FLEET = 77


def run_peer(
    me: int,
    my_addr: tuple[str, int],
    other: tuple[str, int],
    transport: str,
    n_params: int,
    rounds: int,
    alpha: float,
    inject: float,
    rate: float,
    deadline_s: float,
) -> None:
    plan = ChunkPlan(n_params, wire.default_chunk_bytes())
    x = np.full(n_params, float(me), dtype=np.float32)
    pre = np.empty_like(x)
    y = np.empty_like(x)
    mask = np.zeros(plan.n_chunks, np.uint8)
    # no UDP GSO: under `--backend netns` nftables would drop a GSO buffer's datagrams together
    spec = PlaneSpec(
        transport,
        my_addr,
        FLEET,
        me,
        rate_bytes_per_s=rate,
        gso=False,
        inject_loss=inject,
        loss_seed=me,
        senders=frozenset({1 - me}),
    )
    plane = DataPlane(spec, plan, KEY)
    t, inbox, enc = plane.transport, plane.inbox, plane.encoder
    time.sleep(0.5)  # both peers bound before the first round
    try:
        for r in range(rounds):
            np.copyto(pre, x)
            send_vector(t, enc, other, 1 - me, pre, wire.MsgType.PARAMS, r)
            got = inbox.rounds.collect(
                1 - me, wire.MsgType.PARAMS, r, time.monotonic() + deadline_s, y, mask, settle=0.3
            )
            kernels.elastic_pull(x, pre, y, mask, plan.chunk_elems, alpha)
            print(
                json.dumps(
                    {
                        "peer": me,
                        "round": r,
                        "chunks": plan.n_chunks,
                        "arrived": got,
                        "mean": float(x.mean(dtype=np.float64)),
                    }
                ),
                flush=True,
            )
        time.sleep(0.5)
    finally:
        plane.close()
    snap = inbox.counter.snapshot()
    arrived, expected = inbox.links.loss()
    print(
        json.dumps(
            {
                "peer": me,
                "final": True,
                "datagrams_sent": enc.datagrams,
                "bytes_sent": enc.bytes,
                "link_arrived": arrived,
                "link_expected": expected,
                **snap,
            }
        ),
        flush=True,
    )


def main(argv: list[str]) -> None:
    me = int(argv[0])
    host, port = argv[1].rsplit(":", 1)
    ohost, oport = argv[2].rsplit(":", 1)
    transport, n_params, rounds, alpha, inject, rate, deadline = argv[3:10]
    run_peer(
        me,
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


if __name__ == "__main__":
    main(sys.argv[1:])
