"""The agent's /metrics as real processes on loopback: two gossiping agents, scraped over HTTP,
parsed by the Prometheus client's own parser; refused addresses, wrong paths and garbage."""

import socket
import urllib.error
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from edgegossip.config import Peer
from edgegossip.control import prometheus
from tests.helpers.ports import free_port
from tests.helpers.waiting import until
from tests.test_agent import _cfg, _start


def _tcp_port():
    return free_port(socket.SOCK_STREAM)


def scrape(port: int) -> dict[str, list]:
    """{family name: [(labels, value)]} of one scrape."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        assert r.headers["Content-Type"].startswith("text/plain")
        text = r.read().decode()
    out: dict[str, list] = {}
    for fam in text_string_to_metric_families(text):
        # a labelled family with no samples yet (no drops so far) is still served, as its name
        out.setdefault(fam.name + ("_total" if fam.type == "counter" else ""), [])
        for s in fam.samples:
            out.setdefault(s.name, []).append((s.labels, s.value))
    return out


def _value(m, name, **labels):
    return next(v for lab, v in m[name] if all(lab.get(k) == x for k, x in labels.items()))


@pytest.fixture
def pair(tmp_path, free_udp_port, mnist_data, procs):
    ports = [free_udp_port(), free_udp_port()]
    scrape_ports = [_tcp_port(), _tcp_port()]
    for i in range(2):
        d = tmp_path / f"a{i}"
        d.mkdir()
        cfg = _cfg(
            d,
            free_udp_port,
            id=i,
            listen=f"127.0.0.1:{ports[i]}",
            peers=(Peer(1 - i, "127.0.0.1", ports[1 - i]),),
            eval_every=50,
            p=0.3,
            metrics_endpoint=f"127.0.0.1:{scrape_ports[i]}",
        )
        procs.append(_start(cfg, d))
    return scrape_ports, procs


def test_two_agents_are_scraped(pair):
    ports, procs = pair
    m = until(lambda: _try(ports[0]), timeout=60)
    m = until(
        lambda: (
            (x := scrape(ports[0])).get("edgegossip_heldout_accuracy_ratio")
            and _value(x, "edgegossip_datagrams_received_total") > 0
            # an outcome is a series once it has happened (a busy machine once scraped before)
            and any(lab.get("outcome") == "completed" for lab, _ in x["edgegossip_exchanges_total"])
            and x
        ),
        timeout=60,
    )
    acc = _value(m, "edgegossip_heldout_accuracy_ratio")
    assert 0 <= acc <= 1
    assert _value(m, "edgegossip_step") >= 50
    assert _value(m, "edgegossip_sent_bytes_total") > 0
    assert _value(m, "edgegossip_exchanges_total", outcome="completed") >= 0
    assert _value(m, "edgegossip_state", state="training") == 1
    assert _value(m, "edgegossip_peak_rss_bytes") > 10e6
    assert _value(m, "edgegossip_disk_free_bytes") > 0
    info = m["edgegossip_build_info"][0][0]
    assert info["agent"] == "0" and len(info["config_hash"]) == 12 and info["version"]
    assert "process_cpu_seconds_total" in m  # the client library's process collector
    # every series the catalog declares is served, but those of what this pair cannot have: a
    # push-sum weight (gossip-push) and a checkpoint's age before the first checkpoint
    from edgegossip.catalog import METRICS, series

    declared = {
        series(x.key)
        + ("_total" if x.kind == "counter" and not series(x.key).endswith("_total") else "")
        for x in METRICS
        if x.prometheus
    }
    served = {name for name in m if name.startswith("edgegossip_")}
    push_only = {
        "edgegossip_push_weight",
        "edgegossip_push_lent",
        "edgegossip_push_reclaimed_total",
    }
    # and a classifier's pair has no held-out mse (a model trained with mse has)
    cannot = push_only | {"edgegossip_checkpoint_age_seconds", "edgegossip_heldout_mse"}
    assert declared - served <= cannot
    assert _value(m, "edgegossip_send_errors_total") == 0
    # the link from the other agent has a loss figure once numbered datagrams arrived
    assert [lab["peer"] for lab, _ in m["edgegossip_link_loss_ratio"]] == ["1"]
    # counters only grow while the agent runs
    later = until(
        lambda: (
            (x := scrape(ports[0]))
            and _value(x, "edgegossip_step") > m["edgegossip_step"][0][1]
            and x
        )
    )
    assert _value(later, "edgegossip_sent_bytes_total") >= _value(m, "edgegossip_sent_bytes_total")

    # a wrong path, a garbage request and a half-open connection change nothing
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(f"http://127.0.0.1:{ports[0]}/secrets", timeout=5)
    assert e.value.code == 404
    with socket.create_connection(("127.0.0.1", ports[0]), timeout=5) as s:
        s.sendall(b"\xff\x00 not http at all\r\n\r\n")
        s.recv(1024)
    idle = socket.create_connection(("127.0.0.1", ports[0]), timeout=5)  # says nothing
    assert _value(scrape(ports[0]), "edgegossip_step") >= _value(later, "edgegossip_step")
    idle.close()
    assert all(p.poll() is None for p in procs)


def _try(port):
    try:
        return scrape(port)
    except OSError:
        return None


def test_scrapes_from_elsewhere_are_refused(tmp_path, free_udp_port, mnist_data, procs):
    port = _tcp_port()
    cfg = _cfg(
        tmp_path,
        free_udp_port,
        algorithm="local",
        peers=(),
        workers=1,
        metrics_endpoint=f"127.0.0.1:{port}",
        metrics_allow_from="10.0.0.0/8",
    )
    procs.append(_start(cfg, tmp_path))

    def refused():
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5)
        except urllib.error.HTTPError as e:
            return e.code
        except OSError:
            return None
        return 200

    assert until(refused, timeout=60) == 403


def test_names_follow_prometheus_conventions():
    """Every family has the prefix; counters end in _total, gauges do not; units are base."""
    status = {
        "agent": 3,
        "algorithm": "elastic-gossip",
        "version": "0.1.0",
        "config_hash": "abcdefabcdef",
        "state": "paused",
        "step": 10,
        "epoch": 0.5,
        "loss": 0.3,
        "accuracy": 0.9,
        "exchanges": {"completed": 4, "timed_out": 1},
        "drops": {"bad_tag": 2},
        "link_loss": {1: 0.1, 2: None},
        "bytes_sent": 1000,
        "peak_rss_mb": 100.0,
        "disk_written_mb": 2.5,
    }
    fams = list(prometheus.AgentCollector(lambda: status).collect())
    names = {f.name for f in fams}
    assert all(n.startswith("edgegossip_") for n in names)
    for f in fams:
        for s in f.samples:
            assert s.name.endswith("_total") == (f.type == "counter") or s.name.endswith(
                ("_created", "_info")
            )
    byname = {s.name: s for f in fams for s in f.samples if not s.labels or s.name.endswith("info")}
    assert byname["edgegossip_peak_rss_bytes"].value == 100e6
    assert byname["edgegossip_disk_written_bytes_total"].value == 2.5e6
    assert "edgegossip_push_weight" not in byname  # only what the status has
    loss = [s for f in fams for s in f.samples if s.name == "edgegossip_link_loss_ratio"]
    assert [(s.labels["peer"], s.value) for s in loss] == [("1", 0.1)]
    paused = [s for f in fams for s in f.samples if s.name == "edgegossip_state"]
    assert {s.labels["state"]: s.value for s in paused}["paused"] == 1


def test_the_dashboard_queries_what_agents_serve(pair):
    """The committed Grafana dashboard is what scripts/grafana_dashboard.py builds with Grafana's
    schema types, and every metric its queries name is in a real scrape of a gossiping agent."""
    import json
    import re
    import runpy
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    built = runpy.run_path(str(root / "scripts" / "grafana_dashboard.py"))["build"]()
    committed = json.loads((root / "devices" / "grafana" / "edgegossip.json").read_text())
    assert built == committed, "run scripts/grafana_dashboard.py devices/grafana/edgegossip.json"
    exprs = [t["expr"] for p in committed["panels"] for t in p["targets"]]
    exprs += [v["query"] for v in committed["templating"]["list"] if v.get("query")]
    named = {n for e in exprs for n in re.findall(r"\b(?:edgegossip|process)_[a-z_]+\b", e)}
    ports, _ = pair
    # gauges with no value yet (accuracy before the first evaluation) are left out until then
    served = until(lambda: (x := _try(ports[0])) and named <= set(x) and set(x), timeout=60)
    assert named and named <= served, named - served


def test_alarms_and_silent_peers_are_served():
    """Issue 47: every known alarm is a series (1 while raised), each silent peer one more."""
    status = {"agent": 0, "alarms": ["weight_below_floor"], "silent_peers": [2]}
    fams = list(prometheus.AgentCollector(lambda: status).collect())
    samples = [s for f in fams for s in f.samples]
    alarms = {s.labels["alarm"]: s.value for s in samples if s.name == "edgegossip_alarm"}
    assert alarms == {"merges_stopped": 0.0, "suspect_peer": 0.0, "weight_below_floor": 1.0}
    silent = {s.labels["peer"]: s.value for s in samples if s.name == "edgegossip_peer_silent"}
    assert silent == {"2": 1.0}
    quiet = list(prometheus.AgentCollector(lambda: {"agent": 0}).collect())
    assert not [f for f in quiet if f.name in ("edgegossip_alarm", "edgegossip_peer_silent")]
