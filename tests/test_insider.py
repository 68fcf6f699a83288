"""Issue 54, items 1 and 2: what one device holding its own link's key can do to its
neighbours, on real agents over loopback, on both transports. Two honest gossip-push agents A
and B, and the harness as their third peer C: it sends REDUCE rounds that a gossip agent never
collects (they used to hold both receive buffers of each neighbour, so nothing of the honest
peer was merged while C sent), and valid PARAMS rounds whose running sum never moves (every
round heard used to earn C two pushes of half a weight, and both honest weights fell to one
count for good). While C sends, A and B go on merging each other's rounds, and C holds at most
LEND_SHARE of each, and (issue 67) gives it back within a few of C's rounds while C still
sends; once C stops, what it held comes back."""

import time

import numpy as np
import pytest

from edgegossip.config import AgentConfig
from edgegossip.dataplane import wire
from edgegossip.dataplane.chunking import ChunkPlan
from edgegossip.dataplane.outbox import Encoder
from edgegossip.metrics import read
from edgegossip.protocol.gossip_push import LEND_SHARE
from edgegossip.transport import make_transport
from tests.helpers.loopback import fleet_configs
from tests.helpers.waiting import until
from tests.test_agent import _start

pytestmark = pytest.mark.timeout(240)
A, B, C = 0, 1, 2
SECRET = "insider-test-fleet-secret"
ATTACK_S = 8
WINDOW_S = 4  # merging between A and B is checked in every window of this while C sends


def _cfgs(tmp_path, ports, kind) -> list[AgentConfig]:
    return fleet_configs(
        tmp_path,
        ports,
        (A, B),
        algorithm="gossip-push",
        model="logreg",
        transport=kind,
        payload="float32",
        eval_every=20,
        record_every_s=0.5,
        checkpoint_every=100_000,
        deadline_s=1.0,
        p=0.01,
        key=SECRET,
        fleet=5,
    )


def _records(tmp_path, i) -> list[dict]:
    path = tmp_path / f"a{i}" / "metrics.jsonl"
    recs = read(path) if path.is_file() else []
    return [r for r in recs if "step" in r and r.get("event") is None]


def _merged_from(rec: dict, peer: int) -> int:
    return rec.get("merged_by_peer", {}).get(str(peer), 0)


class Insider:
    """C: the fleet's key (so its own links' keys), its own session, rounds to A and B."""

    def __init__(self, kind, ports):
        self.plan = ChunkPlan(7850, wire.default_chunk_bytes())  # logreg
        self.enc = Encoder(self.plan, wire.derive_key(SECRET), 5, C, session=3)
        self.out = make_transport(kind, rate_bytes_per_s=20e6)
        self.out.bind(("127.0.0.1", ports[C]))  # where A and B answer it
        self.dest = {i: ("127.0.0.1", ports[i]) for i in (A, B)}
        self.x = np.zeros(self.plan.n_params, np.float32)
        self.round = 0

    def send(self, i, msg_type, whole: bool) -> None:
        self.round += 1
        chunks = None if whole else [0]
        for d in self.enc.chunks(self.x, msg_type, self.round, chunks, receiver=i, weight=0):
            self.out.send(self.dest[i], d)

    def attack(self, seconds: float, during) -> None:
        """REDUCE rounds opened every 0.1 s and a PARAMS round with an unmoving running sum
        every 0.25 s, to A and B; during(now) is called between them."""
        end = time.monotonic() + seconds
        k = 0
        while time.monotonic() < end:
            for i in (A, B):
                self.send(i, wire.MsgType.REDUCE, whole=False)
                if k % 3 == 0:
                    self.send(i, wire.MsgType.PARAMS, whole=True)
            k += 1
            during(time.monotonic())
            time.sleep(0.1)


@pytest.mark.parametrize("kind", ["udp", "zmq"])
def test_one_insider_can_disturb_only_its_own_links(
    tmp_path, free_udp_port, mnist_data, procs, kind
):
    ports = [free_udp_port() for _ in range(3)]
    cfgs = _cfgs(tmp_path, ports, kind)
    for c in cfgs:
        (tmp_path / f"c{c.id}").mkdir()
    insider = Insider(kind, ports)
    procs += [_start(c, tmp_path / f"c{c.id}") for c in cfgs]
    # honest mixing first: each has merged a round of the other's
    until(
        lambda: all(
            _records(tmp_path, i) and _merged_from(_records(tmp_path, i)[-1], 1 - i) > 0
            for i in (A, B)
        ),
        timeout=90,
        what="A and B merging each other's rounds",
    )
    windows: list[tuple[int, int]] = []
    start = [_merged_from(_records(tmp_path, i)[-1], 1 - i) for i in (A, B)]
    mark = [time.monotonic()]

    def during(now):
        if now - mark[0] >= WINDOW_S:
            got = [_merged_from(_records(tmp_path, i)[-1], 1 - i) for i in (A, B)]
            windows.append((got[0] - start[0], got[1] - start[1]))
            start[:] = got
            mark[0] = now

    insider.attack(ATTACK_S, during)
    lasts = [_records(tmp_path, i)[-1] for i in (A, B)]
    for p in procs:
        assert p.poll() is None, p.communicate(timeout=5)
    assert len(windows) >= ATTACK_S // WINDOW_S - 1, windows
    for w in windows:  # merging between the honest devices never stopped while C sent
        assert min(w) > 0, windows
    for last in lasts:
        assert last["drops"].get("unwanted_type", 0) > 0, last["drops"]
        # C's sum never moved: it holds LEND_SHARE of each honest weight at the most, so A and
        # B keep at least 2 * (1 - LEND_SHARE) between them (one weight alone swings by halves)
        assert 0 <= last["push_lent"].get(str(C), 0) <= LEND_SHARE + 1e-6, last
        # and what it held came back while it still answered (issue 67: DRY_ROUNDS), not
        # only once it went silent
        assert last["push_reclaimed"] > 0 and C not in last["silent_peers"], last
    # one weight alone swings by halves at every push (0.125 seen in CI); the pair's does not
    assert sum(last["push_weight"] for last in lasts) > 0.5, lasts
    stopped = time.monotonic()
    # C goes silent: what it held of each honest weight comes back
    until(
        lambda: all(
            _records(tmp_path, i)[-1].get("push_lent", {}).get(str(C), 1) == 0 for i in (A, B)
        ),
        timeout=60,
        what="A and B taking back the weight C held",
    )
    until(
        lambda: all(_records(tmp_path, i)[-1]["push_weight"] > 0.25 for i in (A, B)),
        timeout=60,
        what="both honest weights above a quarter of a fair share",
    )
    print(
        f"{kind}: merges A<-B, B<-A per {WINDOW_S} s: {windows}; C held",
        [last["push_lent"].get(str(C)) for last in lasts],
        f"; weights back above 1/4 {time.monotonic() - stopped:.1f} s after C stopped",
    )
    insider.out.close()
