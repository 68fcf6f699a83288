"""Emulated fleets in network namespaces (root; must run in CI): real kernel loss, agents killed
and restarted, a link cut and healed, leftovers cleaned. logreg on real MNIST keeps runs short."""

import inspect
import json
import statistics
import subprocess
import time

import numpy as np
import pytest
from click.testing import CliRunner

from edgegossip import checkpoint
from edgegossip.cli.app import cli
from edgegossip.emulate import netns, overhead
from edgegossip.emulate.fleet import EmulatedFleet, FleetSpec
from edgegossip.metrics import read
from edgegossip.report.summary import summarize
from edgegossip.run import Network
from tests.helpers.loss import assert_observed_loss
from tests.helpers.waiting import until


def _no_leftovers(run_ids=None):
    """No namespace or bridge of ours (of the given runs, or of any run) is left."""
    names = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.split()
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    prefixes = (
        [f"{netns.PREFIX}{r}{k}" for r in run_ids for k in ("n", "sw")]
        if run_ids
        else [netns.PREFIX]
    )
    bridges = [f": {netns.PREFIX}br{r}" for r in run_ids] if run_ids else [f": {netns.PREFIX}br"]
    return not any(
        n.startswith(p) and n[len(netns.PREFIX) : len(netns.PREFIX) + 1].isdigit()
        for n in names
        for p in prefixes
    ) and not any(b in links for b in bridges)


@pytest.fixture
def fleet_factory(root_only, tmp_path):
    made = []

    def make(**kw):
        net = Network(loss=kw.pop("loss", 0.0))
        spec = FleetSpec.of(
            **{
                "nodes": 3,
                "algorithm": "elastic-gossip",
                "network": net,
                "backend": "netns",
                "out": tmp_path / f"f{len(made)}",
                "model": "logreg",
                "p": 0.1,
                "duration_s": 20,
                "deadline_s": 1.0,
                "checkpoint_every": 100,
                **kw,
            }
        )
        f = EmulatedFleet(spec)
        made.append(f)
        f.up()
        return f

    yield make
    run_ids = []
    for f in made:
        if f.lan is not None:
            run_ids.append(f.lan.run_id)
        f.down()
    assert _no_leftovers(run_ids or [None])


def _wait_done(fleet, timeout=90):
    fleet.wait(timeout)


def test_emulate_cli_json_observed_loss(root_only, tmp_path, mnist_data):
    res = CliRunner().invoke(
        cli,
        [
            "emulate",
            "--nodes",
            "3",
            "--model",
            "logreg",
            "--duration",
            "10",
            "--loss",
            "0.2",
            "--p",
            "1/4",
            "--rate",
            "50mbit",
            # float32: three times the datagrams of int8 in the same 10 s, so a tighter bound
            "--payload",
            "float32",
            "--out",
            str(tmp_path / "run"),
            "--json",
        ],
    )
    assert res.exit_code == 0, res.output
    out = json.loads(res.output.strip().splitlines()[-1])
    for key in (
        "configured_loss",
        "observed_loss",
        "average_model_accuracy",
        "elapsed_s",
        "agents",
    ):
        assert key in out
    for a in out["agents"]:
        assert {
            "accuracy",
            "steps",
            "bytes_sent",
            "datagrams_sent",
            "datagrams_received",
            "datagrams_dropped",
            "datagrams_lost",
            "datagrams_late",
            "datagrams_refused",
        } <= set(a)
        assert a["steps"] > 0 and a["datagrams_sent"] > 100
        # lost: from the links' sequence gaps; the kernel drops 10%, so every agent lost some
        assert a["datagrams_lost"] == a["link_expected"] - a["link_arrived"] > 0, a
        assert a["datagrams_late"] + a["datagrams_refused"] == a["datagrams_dropped"], a
    assert out["loss_kind"] == "kernel (nftables)" and sum(out["kernel_dropped_packets"]) > 0
    # the agents send UDP GSO buffers, as devices do; the links cut them before the loss rule,
    # so the loss observed is per datagram (test_netns: a lost buffer counts every datagram)
    assert "gso = true" in (tmp_path / "run" / "agent0.toml").read_text()
    # the observed share is binomial (helpers/loss.py). A run numbers only about 2,000
    # datagrams (680 with int8, where a fixed +-0.02 was 1.3 standard errors and failed CI).
    assert sum(a["link_expected"] for a in out["agents"]) >= 1000
    assert_observed_loss(out, 0.2)
    assert out["average_model_accuracy"] > 0.85
    assert (tmp_path / "run" / "accuracy_vs_time.png").is_file()


# the average of the agents' final models: one snapshot of each, so it carries their swing (one
# CI run measured 0.845 for a fleet whose agents' settled means were all above 0.85)
AVERAGE_MODEL_FLOOR = 0.80


SETTLE_S = 10.0


def _settled(fleet, i: int) -> list[float]:
    """Agent i's held-out accuracy in the records of its last SETTLE_S seconds (one a second).
    Not one final figure: logistic regression with momentum 0.99 swings after merges (records
    of 0.57-0.77 among 0.88s in undisturbed fleets; an agent that ends alone does not), so even
    one agent's median of the last 8-10 s fell to 0.843 in one run of 12 here."""
    accs = [
        (r["time"], r["accuracy"])
        for r in read(fleet.spec.out / f"agent{i}" / "metrics.jsonl")
        if r.get("event") is None and r.get("accuracy") is not None
    ]
    end = accs[-1][0]
    return sorted(a for t, a in accs if t >= end - SETTLE_S)


def _converged(fleet, floor: float = 0.85) -> None:
    """The fleet settled above floor: the median of all its agents' last records, and each
    agent for at least a quarter of its own (12 runs here: fleet medians 0.873-0.89, each
    agent's upper quartile 0.874 or more; a logistic regression that trained one second alone
    is at 0.80)."""
    last = [_settled(fleet, i) for i in range(fleet.spec.nodes)]
    assert statistics.median([a for one in last for a in one]) > floor, last
    assert all(one[(3 * (len(one) - 1)) // 4] > floor for one in last), last


def test_cut_link_then_heal_still_converges(fleet_factory, mnist_data):
    fleet = fleet_factory(duration_s=16)
    fleet.set_loss(2, 1.0)  # node 2 hears nothing from anyone
    time.sleep(6)  # six exchange deadlines
    fleet.set_loss(2, 0.0)
    _wait_done(fleet)
    s = summarize(fleet.spec.out, 3, "logreg", 0.0, "kernel", 0, None, mnist_data)
    ex = s["agents"][2]["exchanges"]
    assert ex.get("timed_out", 0) >= 1  # while cut
    assert ex.get("completed", 0) + ex.get("partial", 0) >= 1  # after healing
    _converged(fleet)
    assert s["average_model_accuracy"] > AVERAGE_MODEL_FLOOR, s["average_model_accuracy"]


def test_cleanup_removes_leftovers(root_only):
    lan = netns.Lan(2, run_id=230).up()
    lan.created.clear()  # as if the run had crashed before its teardown
    removed = netns.cleanup()
    assert any(r.startswith("eg230") for r in removed) and _no_leftovers([230])


def test_loopback_backend_labels_injected_loss(tmp_path, mnist_data):
    res = CliRunner().invoke(
        cli,
        [
            "emulate",
            "--backend",
            "loopback",
            "--nodes",
            "2",
            "--model",
            "logreg",
            "--duration",
            "6",
            "--loss",
            "0.3",
            "--p",
            "1/4",
            "--out",
            str(tmp_path / "lb"),
            "--json",
        ],
    )
    assert res.exit_code == 0, res.output
    out = json.loads(res.output.strip().splitlines()[-1])
    # A few hundred datagrams at most (78 in a slow CI run): the injector's own rate is a
    # binomial draw around 0.3, within 5 standard deviations. Every datagram it drops is a gap in
    # its link's sequence numbers, and so counted lost, but those before a link's first arrival
    # or after its last: the drops at the four ends of two links are four geometric runs
    # (P(k) = 0.7 * 0.3^k), more than 15 in all with probability 1.5e-6
    injected = sum(a["drops"].get("injected_loss", 0) for a in out["agents"])
    n = injected + sum(a["datagrams_received"] for a in out["agents"])
    gaps = sum(a["link_expected"] - a["link_arrived"] for a in out["agents"])
    assert out["loss_kind"] == "injected" and abs(injected / n - 0.3) < 5 * (0.21 / n) ** 0.5
    assert 0 <= injected - gaps <= 15, (injected, gaps, out["agents"])


def test_allreduce_ring_over_tcp_under_loss(fleet_factory, mnist_data):
    """The retransmitting baseline: a TCP ring through the same nftables loss. MLP blocks (3.9 MB)
    outgrow the TCP send buffer, so each is still in flight while the next phase runs; the
    replicas must stay bit-identical all the same. 3% loss, not 10%: with CUBIC (netns pins it)
    10% random loss leaves this ring at about one step in 30 s; at 3% about one a second."""
    from edgegossip import checkpoint

    fleet = fleet_factory(algorithm="allreduce", model="mlp", loss=0.03, duration_s=10)
    _wait_done(fleet)
    assert not fleet.failed()
    s = summarize(fleet.spec.out, 3, "mlp", 0.03, "kernel", 0, None, mnist_data)
    steps = [a["steps"] for a in s["agents"]]
    assert min(steps) >= 2 and max(steps) - min(steps) <= 1  # lock-step ring
    # three agents at most one step apart: at least two stopped at the same step (which one
    # depends on where the duration ran out), and those must hold bit-identical replicas: exact
    # by construction on any CPU, since every agent applies the same averaged gradient bytes from
    # the ring with the same elementwise optimiser step (no BLAS in between)
    by_step = {}
    for i in range(3):
        st = checkpoint.load(fleet.spec.out / f"agent{i}")
        by_step.setdefault(int(st["step"]), []).append(st["params"])
    same = max(by_step.values(), key=len)
    assert len(same) >= 2 and all((p == same[0]).all() for p in same)
    assert all(a["bytes_sent"] > 0 for a in s["agents"])


def test_rps_reaches_every_agent(tmp_path, mnist_data):
    """Five agents: each RPS iteration goes to more peers than the sender has buffers; every
    agent must still receive gathers from every server (a bug once starved the high ids)."""
    res = CliRunner().invoke(
        cli,
        [
            "emulate",
            "--backend",
            "loopback",
            "--nodes",
            "5",
            "--model",
            "logreg",
            "--algorithm",
            "rps",
            "--loss",
            "0",
            "--duration",
            "6",
            "--out",
            str(tmp_path / "rps"),
            "--json",
        ],
    )
    assert res.exit_code == 0, res.output
    out = json.loads(res.output.strip().splitlines()[-1])
    for a in out["agents"]:
        assert a["datagrams_received"] > 0 and sum(a["exchanges"].values()) >= 4, a
    accs = [a["accuracy"] for a in out["agents"]]
    assert out["average_model_accuracy"] > min(accs) - 0.02  # replicas stay close


def test_fleet_delivers_when_the_host_forward_policy_is_drop(fleet_factory, mnist_data):
    """What Docker's daemon leaves behind: FORWARD policy DROP on the host, bridged traffic passing
    FORWARD (br_netfilter). The fleet's bridge is in a namespace of its own, so nothing changes.
    The run lasts until every agent has received its datagrams (bounded), not a fixed time: on a
    busy machine 15 s once delivered fewer than the test asked for."""
    rules = """table ip egtest_hostfw {
  chain forward { type filter hook forward priority -10; policy drop; }
}
table inet egtest_hostfw {
  chain forward { type filter hook forward priority -10; policy drop; }
}
"""
    subprocess.run(["nft", "-f", "-"], input=rules, text=True, check=True)
    try:
        fleet = fleet_factory(loss=0.1, p=0.25, duration_s=600)
        until(
            lambda: all(r and r["datagrams_received"] > 100 for r in fleet.latest()),
            timeout=240,
            what="every agent receiving datagrams through the host's FORWARD DROP",
        )
        fleet.stop()
    finally:
        for family in ("ip", "inet"):
            subprocess.run(["nft", "delete", "table", family, "egtest_hostfw"], capture_output=True)
    assert (
        "egtest_hostfw"
        not in subprocess.run(["nft", "list", "tables"], capture_output=True, text=True).stdout
    )
    out = summarize(fleet.spec.out, 3, "logreg", 0.1, "kernel", 0, None, mnist_data)
    assert out["loss_alarm"] is None
    assert_observed_loss(out, 0.1)
    assert all(a["datagrams_received"] > 100 for a in out["agents"])


def test_loss_far_above_the_configured_is_an_alarm():
    from edgegossip.report.summary import loss_alarm

    assert loss_alarm(0.1, 0.11, 10_000) is None
    assert loss_alarm(0.1, 0.73, 10_000).startswith("receivers observed 73.0% loss where 10.0%")
    assert loss_alarm(0.1, 0.73, 20) is None  # too few datagrams to judge
    assert loss_alarm(0.0, None, 0) is None  # TCP (all-reduce): nothing numbered


def test_an_agents_pace_is_its_last_sessions_from_first_step_to_last():
    """steps_per_s leaves out a slow start-up, an earlier session (a restart goes on from its
    checkpoint's step) and a closing phase's records after the last step."""
    from edgegossip.report.summary import step_rate

    def rec(t, step, **kw):
        return {"time": t, "step": step, **kw}

    first = [rec(0, 0, event="start"), rec(30, 50), rec(31, 100)]  # 30 s to start
    assert step_rate(first) == 50.0
    again = [*first, rec(40, 100, event="start"), rec(41, 150), rec(43, 250)]
    assert step_rate(again) == 50.0
    assert step_rate([rec(0, 0, event="start"), rec(5, 50)]) is None  # one step record
    # a closing phase's records: the step stands still, and the pace is training's
    closed = [*first, rec(31.5, 100, event="closing"), rec(40, 100), rec(60, 100)]
    assert step_rate(closed) == 50.0


def test_an_emulated_agent_is_a_device_of_its_own(root_only, tmp_path):
    """Its own hostname, PID space and state folder, an unprivileged user without capabilities:
    it cannot touch its loss rules or anything of the host's."""
    import subprocess
    import sys
    import textwrap

    from edgegossip.emulate import device

    probe = textwrap.dedent("""
        import json, os, socket, subprocess, pathlib
        status = dict(l.split(":\\t", 1) for l in open("/proc/self/status").read().splitlines() if ":\\t" in l)
        nft = subprocess.run(["nft", "add", "table", "inet", "mine"], capture_output=True, text=True)
        def writable(p):
            try:
                pathlib.Path(p, "probe").write_text("x"); return True
            except OSError:
                return False
        print(json.dumps({"host": socket.gethostname(), "pid": os.getpid(), "uid": os.getuid(),
                          "cap_eff": status["CapEff"].strip(), "cap_bnd": status["CapBnd"].strip(),
                          "nft": nft.returncode, "procs": sum(p.isdigit() for p in os.listdir("/proc")),
                          "state": writable(os.environ["HOME"]), "tmp_root": writable("/root"),
                          "etc": writable("/etc"), "cache": writable(os.environ["EDGEGOSSIP_CACHE"]),
                          "sees_cache": os.listdir(os.environ["EDGEGOSSIP_CACHE"])}))
    """)
    lan = netns.Lan(1, loss=0.1, run_id=232).up()
    try:
        state, cache = tmp_path / "run" / "agent0", tmp_path / "run" / "shared"
        cache.mkdir(parents=True)
        (cache / "data.npz").write_bytes(b"x")
        (tmp_path / "agent.toml").write_text("")
        env = {**__import__("os").environ, **device.prepare(state, 0)}
        p = subprocess.run(
            device.argv(
                lan.ns(0), 0, state, tmp_path / "agent.toml", cache, [sys.executable, "-c", probe]
            ),
            capture_output=True,
            text=True,
            timeout=60,
            env=env,
        )
        rules = subprocess.run(
            ["ip", "netns", "exec", lan.ns(0), "nft", "list", "tables"],
            capture_output=True,
            text=True,
        ).stdout
    finally:
        lan.down()
    assert p.returncode == 0, p.stderr
    got = json.loads(p.stdout)
    assert got["host"] == "node0" and got["pid"] == 1 and got["uid"] == device.uid(0)
    assert int(got["cap_eff"], 16) == 0 and int(got["cap_bnd"], 16) == 0
    assert got["nft"] != 0 and "mine" not in rules  # its loss rules are out of its reach
    assert got["procs"] <= 3  # it sees its own processes only
    assert got["state"] and not got["tmp_root"] and not got["etc"] and not got["cache"]
    assert got["sees_cache"] == ["data.npz"] and (state / "probe").is_file()


def test_adaptive_deadlines_follow_each_link(root_only, tmp_path):
    """One node's link capped at a hundredth (a logreg model then takes 1.4 s instead of 14 ms):
    with adaptive deadlines every agent's deadline toward the slow node ends longer than toward
    the fast one, and the fast link's far below the fixed 5 s. (A fast link's transfer time
    includes the peer's queue: up to 0.6 s seen here, so a tenth would not separate them.)"""
    res = CliRunner().invoke(
        cli,
        [
            "emulate",
            "--nodes",
            "3",
            "--model",
            "logreg",
            "--duration",
            "12",
            "--loss",
            "0",
            "--p",
            "1/8",
            "--rate",
            "20mbit",
            "--slow",
            "2:200kbit",
            "--deadline",
            "adaptive",
            "--out",
            str(tmp_path / "run"),
            "--json",
        ],
    )
    assert res.exit_code == 0, res.output
    out = json.loads(res.output.strip().splitlines()[-1])
    assert "adaptive" in (tmp_path / "run" / "agent0.toml").read_text()
    for a in out["agents"][:2]:
        d = a["deadline_s_by_link"]
        fast = str(1 - a["agent"])
        assert set(d) == {fast, "2"}, d
        assert d["2"] > d[fast] and d[fast] < 2.5, d


@pytest.mark.parametrize("codec", ["float16", "int8"])
def test_compressed_payloads_between_real_agents(tmp_path, mnist_data, codec):
    """Agents sending float16 or int8 payloads over real sockets: every datagram they accept
    is compressed (nothing dropped for its encoding), and the models still mix and learn."""
    res = CliRunner().invoke(
        cli,
        [
            "emulate",
            "--backend",
            "loopback",
            "--nodes",
            "3",
            "--model",
            "logreg",
            "--duration",
            "5",
            "--loss",
            "0.1",
            "--p",
            "1/4",
            "--payload",
            codec,
            "--out",
            str(tmp_path / codec),
            "--json",
        ],
    )
    assert res.exit_code == 0, res.output
    out = json.loads(res.output.strip().splitlines()[-1])
    per_datagram = {"float16": 2 * 702, "int8": 4 + 1400}[codec]  # payload bytes, full chunk
    for a in out["agents"]:
        assert a["exchanges"].get("completed", 0) + a["exchanges"].get("partial", 0) >= 3, a
        assert "bad_dtype" not in a.get("drops", {}), a
        # bytes on the wire per datagram: the compressed payload plus framing, never float32's
        assert a["bytes_sent"] / a["datagrams_sent"] <= per_datagram + 67 + 1, a
    assert out["average_model_accuracy"] > 0.85


def test_overhead_reference_is_the_mean_of_the_local_runs():
    """The machine drifts between the local run before the variants and the one after: the
    reference is their mean, and the drift is the last against the first."""
    ref = overhead.reference_rate([28.0, 26.0])
    assert ref == {"steps_per_s": 27.0, "local_steps_per_s": [28.0, 26.0], "drift": -0.0714}
    assert overhead.reference_rate([25.0])["drift"] == 0.0
    around = overhead.schedule(
        (("elastic-gossip", "int8"), ("elastic-gossip", "int8", None)), "around", "20mbit"
    )
    assert [run[1:] for run in around] == [
        ("local", "int8", "20mbit"),
        ("elastic-gossip", "int8", "20mbit"),
        ("elastic-gossip", "int8", None),  # its own cap: uncapped, beside the capped one
        ("local", "int8", "20mbit"),
    ]
    assert len({run[0] for run in around}) == 4  # each fleet writes a folder of its own
    assert len(overhead.schedule((), "before")) == 1
    # a steady drift from 26 to 28 steps/s over four runs: each run meets local where it ran
    drifting = {0: 26.0, 3: 28.0}
    assert [overhead.local_at(drifting, i) for i in range(4)] == pytest.approx(
        [26.0, 26 + 2 / 3, 26 + 4 / 3, 28.0]
    )
    assert overhead.local_at({0: 25.0}, 1) == 25.0  # --reference before: one local run


def test_overhead_rounds_alternate_the_variants_between_local_runs():
    """Three rounds of two variants: a local run opens the invocation and closes each round,
    the variants' order flips every round, and each variant run is judged against the local
    runs just before and after it."""
    a, b = ("elastic-gossip", "int8"), ("elastic-gossip", "int8", None)
    runs = overhead.schedule((a, b), "around", "20mbit", rounds=3)
    kinds = [(r[1], r[3]) for r in runs]
    local, capped, uncapped = ("local", "20mbit"), ("elastic-gossip", "20mbit"), (a[0], None)
    assert kinds == [
        local,
        capped,
        uncapped,
        local,
        uncapped,
        capped,
        local,
        capped,
        uncapped,
        local,
    ]
    assert len({r[0] for r in runs}) == len(runs)  # a folder each
    rates = {0: 20.0, 3: 23.0, 6: 23.0, 9: 20.0}
    assert overhead.local_at(rates, 1) == pytest.approx(21.0)
    assert overhead.local_at(rates, 5) == 23.0
    assert overhead.local_at(rates, 8) == pytest.approx(21.0)
    shares = [0.9, 0.8, 1.0, 0.95, 0.7, 0.85]
    rows = [
        {"algorithm": r[1], "payload": r[2], "rate": r[3], "time_to_target_all_s": 60.0}
        for r in runs
    ]
    for row, share in zip([x for x in rows if x["algorithm"] != "local"], shares):
        row["of_local_here"] = share
    summary = overhead.by_variant(rows)
    assert [(v["rate"], v["of_local_here"], v["median"], v["min"], v["max"]) for v in summary] == [
        ("20mbit", [0.9, 0.95, 0.7], 0.9, 0.7, 0.95),
        (None, [0.8, 1.0, 0.85], 0.85, 0.8, 1.0),
    ]
    with pytest.raises(ValueError):
        overhead.schedule((a,), "before", rounds=2)
    # a floor replays datagrams: all-reduce's TCP ring before it is no source
    with pytest.raises(ValueError, match="floor:float32"):
        overhead.schedule((("allreduce", "float32"), ("floor", "float32")), "before")
    res = CliRunner().invoke(cli, ["bench", "overhead", "--rounds", "2", "--reference", "before"])
    assert res.exit_code == 2 and "--rounds" in res.output and "Traceback" not in res.output


def test_bench_overhead_json(root_only, tmp_path):
    """The overhead benchmark's JSON shape, from a short real run: local first (its ratio is 1 by
    definition with --reference before), then the gossip variant, each agent with the CPU of its
    own threads; the links lose packets in bursts (Gilbert-Elliott, mean 4)."""
    res = CliRunner().invoke(
        cli,
        [
            "bench",
            "overhead",
            "--nodes",
            "2",
            "--seconds",
            "10",
            "--model",
            "logreg",
            "--variant",
            "elastic-gossip:int8:none",
            "--variant",
            "floor:int8:none",
            "--target",
            "0.8",
            "--reference",
            "before",
            "--loss-model",
            "gilbert-elliott",
            "--burst",
            "4",
            "--out",
            str(tmp_path),
            "--json",
        ],
    )
    assert res.exit_code == 0, res.output
    out = json.loads(res.output.strip().splitlines()[-1])
    assert (out["loss_model"], out["burst"]) == ("gilbert-elliott", 4.0)  # issue 45: bursts
    assert [(r["algorithm"], r["payload"], r["rate"]) for r in out["runs"]] == [
        ("local", "int8", "20mbit"),  # local sends nothing: the default payload labels it
        ("elastic-gossip", "int8", None),  # a cap of its own: uncapped
        ("floor", "int8", None),  # local agents, beside them the gossip run's traffic replayed
    ]
    local, gossip, floor = out["runs"]
    for g, f in zip(gossip["agents"], floor["agents"]):
        # the floor sent what the gossip agent sent, a second's worth of rounds either way
        assert f["mb_sent_per_s"] == pytest.approx(g["mb_sent_per_s"], rel=0.25), (g, f)
        assert f["datagram_bytes"] == g["datagram_bytes"] > 1000
        assert f["receive_cpu_s"] > 0 and f["send_cpu_s"] > 0 and f["datagrams_per_wake"] > 1
        assert f["steps"] > 0 and f["train_cpu_s"] > 0
    # the replayed traffic crossed the lossy links; in bursts of 4 (mean 10%) over two links and
    # 10 s, a stretch of a few thousand datagrams each, the share lost spreads wider than under
    # independent loss (0.21 seen once)
    assert 0.03 < floor["observed_loss"] < 0.3
    assert local["of_local"] == local["of_local_here"] == 1.0 and 0 < gossip["of_local"] < 2
    assert gossip["of_local_here"] == gossip["of_local"]  # one local run: nothing to draw
    assert out["reference"]["local_steps_per_s"] == [local["steps_per_s"]]
    assert all(0 <= r["steal"] < 1 for r in out["runs"])
    for a in gossip["agents"]:
        assert a["steps"] > 0 and a["train_cpu_s"] > 0
        assert a["receive_cpu_s"] > 0 and a["send_cpu_s"] > 0 and a["mb_exchanged"] > 0
        assert a["time_to_target_s"] is not None  # logreg passes 0.8 within seconds
    assert all(a["receive_cpu_s"] is None for a in local["agents"])  # no data plane at all
    for bad in (
        "nope:int8",
        "elastic-gossip",
        "elastic-gossip:int8:fast",
        "local:int8:none",
        "floor:int8",  # nothing before it to replay
    ):
        res = CliRunner().invoke(cli, ["bench", "overhead", "--variant", bad])
        assert res.exit_code == 2 and bad in res.output, res.output
        assert "Traceback" not in res.output


def test_a_fleets_agent_settings_are_config_pys_by_name(tmp_path):
    """Issue 57, item 1: an emulated fleet's agents take any setting by its config.py name, the
    rest keeping config.py's defaults; a name that is no setting, or one the fleet sets itself
    (an id, the fleet size, the loss injected), is refused in one line before anything runs."""
    from edgegossip.config import ConfigError, default

    spec = FleetSpec.of(
        nodes=2,
        algorithm="elastic-gossip",
        backend="loopback",
        out=tmp_path,
        p=0.25,
        payload="float16",
        lr=0.02,
    )
    assert spec.settings == {"p": 0.25, "payload": "float16", "lr": 0.02}
    cfg = EmulatedFleet(spec)._config(1, [("127.0.0.1", 47000), ("127.0.0.2", 47001)])
    assert (cfg.p, cfg.payload, cfg.lr, cfg.workers, cfg.id) == (0.25, "float16", 0.02, 2, 1)
    assert cfg.momentum == default("momentum") and cfg.eval_every == 50  # EMULATED's
    for name, words in [("nosuch", "no such setting"), ("id", "the fleet sets it")]:
        with pytest.raises(ConfigError, match=words):
            FleetSpec(nodes=2, backend="loopback", out=tmp_path, settings={name: 1})
    with pytest.raises(ConfigError, match="workers: the fleet sets it"):
        FleetSpec.of(nodes=2, algorithm="rps", backend="loopback", out=tmp_path, workers=3)


def test_emulates_options_reach_each_agents_config(tmp_path, mnist_data):
    """An emulate option for an agent setting (here --lr and --batch, declared by
    options.setting alone) arrives in every agent's config as given."""
    from edgegossip.cli.emulate import _spec, emulate

    args = ["--lr", "0.05", "--batch", "16", "--p", "1/4", "--train-backend", "onnx"]
    params = emulate.make_context("emulate", [*args, "--duration", "5"]).params
    for own in inspect.signature(emulate.callback).parameters:  # the command's, not the agents'
        params.pop(own, None)
    fleet = EmulatedFleet(_spec(params, "loopback", tmp_path, check_plots=False))
    for i in range(4):
        cfg = fleet._config(i, fleet.addresses())
        assert (cfg.lr, cfg.batch, cfg.p, cfg.backend) == (0.05, 16, 0.25, "onnx")


def test_links_are_paced_below_their_cap_and_uncapped_ones_as_a_device_paces(tmp_path):
    """Pacing faster than the receivers can read only adds loss and takes their training's CPU:
    an uncapped link is paced at the agents' default rate, a capped one just below its cap."""
    from dataclasses import replace

    from edgegossip import config

    spec = FleetSpec(nodes=2, algorithm="elastic-gossip", backend="netns", out=tmp_path)
    addrs = [("10.0.0.1", 47000), ("10.0.0.2", 47000)]
    assert EmulatedFleet(spec)._config(0, addrs).rate_mbps == config.default("rate_mbps")
    capped = EmulatedFleet(replace(spec, network=Network(rate="50mbit")))._config(1, addrs)
    assert capped.rate_mbps == pytest.approx(45.0)


def test_floor_processes_replay_a_load_over_real_sockets(tmp_path, free_udp_port):
    """Two floor processes on loopback send each other a load at its rate, in rounds of the given
    size, and read what arrives; each reports its threads' CPU and its counts."""
    from edgegossip.emulate import floor as fl

    load = fl.Load(bytes_per_s=500_000.0, datagram_bytes=1_400, per_round=50)
    ends = [("127.0.0.1", free_udp_port()), ("127.0.0.1", free_udp_port())]
    floors = fl.Floors()
    try:
        floors.start(
            [
                (fl.argv(ends[i], [ends[1 - i]], load, 2e6, 2.0, out), out)
                for i, out in enumerate((tmp_path / "f0.json", tmp_path / "f1.json"))
            ]
        )
        results = floors.finish(30.0)
    finally:
        floors.kill()
    for i, r in enumerate(results):
        # rounds leave whole, so the last one may overshoot the mean rate by one round
        assert 0.8e6 <= r["bytes_sent"] <= 1e6 + 70_000 + 50 * 1_400, r
        assert r["bytes_sent"] == r["datagrams_sent"] * 1_400
        assert r["send_cpu_s"] > 0 and r["receive_cpu_s"] >= 0
        other = results[1 - i]
        # loopback loses nothing, but the processes start and stop apart: a round may go out
        # before its peer bound, and one may be in flight as the peer stops
        lost = other["datagrams_sent"] - r["datagrams_received"]
        assert 0 <= lost <= 3 * load.per_round, (r, other)
        assert r["bytes_received"] == r["datagrams_received"] * 1_400


def test_a_compiled_model_trains_from_a_private_folder(root_only, tmp_path, mnist_data):
    """Issue 54, item 11: with the run's folder under a parent only root may enter (a `mktemp
    -d` folder, a 0700 home), every device agent failed to read the compiled model the run
    shared there, and emulate said only "see the log". The model now travels in the cache each
    device mounts, as the data set does."""
    from tests.helpers.onnx_models import compile_to, softmax_regression

    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    model = compile_to(softmax_regression(private / "softmax.onnx"), private / "net")
    res = CliRunner().invoke(
        cli,
        ["emulate", "--nodes", "2", "--model", str(model), "--duration", "5"]
        + ["--out", str(private / "run"), "--json"],
    )
    assert res.exit_code == 0, res.output
    out = json.loads(res.output.strip().splitlines()[-1])
    assert all(a["steps"] > 0 for a in out["agents"]), out["agents"]


def test_an_agent_that_stops_is_named_with_its_own_reason(tmp_path):
    """Issue 54, item 12: emulate said "agent 0 exited with an error; see agent0.log"; it now
    gives the agent's own last line, and where the log is."""
    spec = FleetSpec(nodes=2, backend="loopback", out=tmp_path, settings={"model": "logreg"})
    fleet = EmulatedFleet(spec)
    (tmp_path / "agent0.log").write_text(
        "INFO starting\nedgegossip: error: train.model: net/ holds model 1a2b, not the fleet's\n"
    )
    (tmp_path / "agent1.log").write_text(
        "Traceback (most recent call last):\n  File x\nPermissionError: [Errno 13] manifest.json\n"
    )
    assert fleet.why(0).startswith("train.model: net/ holds model 1a2b, not the fleet's (log: ")
    assert fleet.why(1).startswith("PermissionError: [Errno 13] manifest.json (log: ")


def _closing(out, i: int) -> tuple[dict, list[dict]] | None:
    """Agent i's last record before its closing phase and its records since, once it closes."""
    path = out / f"agent{i}" / "metrics.jsonl"
    records = [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []
    start = next((k for k, r in enumerate(records) if r.get("event") == "closing"), None)
    if start is None:
        return None
    before = [r for r in records[:start] if r.get("accuracy") is not None]
    return (before[-1], records[start:]) if before else None


def _completed_since(before: dict, after: list[dict]) -> int:
    """Exchanges merged whole since the closing began (a partial one averages only the chunks
    that arrived: with 10% loss of a 3-chunk message, one in four)."""
    last = [r for r in after if "exchanges" in r]
    if not last:
        return 0
    return last[-1]["exchanges"].get("completed", 0) - before["exchanges"].get("completed", 0)


def test_a_closing_phase_brings_each_devices_model_to_the_average(tmp_path, mnist_data):
    """Issue 57: four real agents on loopback, each holding two classes of MNIST, 10% loss,
    8 s of training, then the closing phase, which the fleet starts on every device at once
    (emulate --closing, taken live by each agent): no more training steps, every step an
    exchange. Waited for, within a generous bound, until every device has merged 8
    exchanges whole in it (a busy machine takes longer, not fewer; the held-out accuracies are
    no event to wait for: each device holds out rows of its own two classes). Then each device
    holds nearly the average: its model within 10% of the average's norm from it, and within
    0.06 of its accuracy on MNIST's test images. Counting partial merges too, a CI run on a busy
    machine once stopped at 0.12: a partial merge may average one chunk of three.
    (simulate's test above shows the spread before and after on the same run.)"""
    from edgegossip.data.split import split_mnist

    list(split_mnist(tmp_path / "data", 4, "classes"))
    out = tmp_path / "run"
    spec = FleetSpec(
        nodes=4,
        algorithm="elastic-gossip",
        backend="loopback",
        out=out,
        network=Network(loss=0.1),
        data=str(tmp_path / "data"),
        duration_s=128,
        closing_s=120,
        settings={"model": "logreg"},
    )
    fleet = EmulatedFleet(spec)
    try:
        fleet.up()

        def merged() -> bool:
            fleet.close_when_due()  # what emulate's watch does
            seen = [_closing(out, i) for i in range(4)]
            return all(c is not None and _completed_since(*c) >= 8 for c in seen)

        until(merged, timeout=120, what="8 whole merges in every device's closing phase", every=0.5)
    finally:
        fleet.down()
    s = summarize(out, 4, "logreg", 0.1, "injected", 0, None, mnist_data)
    models = [checkpoint.load(out / f"agent{i}")["params"] for i in range(4)]
    average = np.mean(models, axis=0)
    spread = max(np.linalg.norm(m - average) for m in models) / np.linalg.norm(average)
    assert spread < 0.1, spread
    for i, agent in enumerate(s["agents"]):
        before, after = _closing(out, i)
        # no training step after the closing began, and closing steps taken
        assert after[-1]["step"] == after[0]["step"] and after[-1]["closing_steps"] > 0
        assert abs(agent["accuracy"] - s["average_model_accuracy"]) < 0.06, s["agents"]
