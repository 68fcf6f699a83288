"""The agent's `/metrics`, in Prometheus' text exposition format, on a TCP port of its own
([metrics] metrics_endpoint; off unless set, and `fleet deploy` sets it).

A scrape reads what the agent already counts (`Agent.status`, the same dict the control
endpoint's `status` answers): nothing is evaluated or written for it, and it runs on the
server's own thread, so training waits at most for the moment it takes to copy those counters.
Names follow Prometheus' conventions: the `edgegossip_` prefix, base units (bytes, seconds,
ratios), `_total` on counters.

Restarts: every `_total` counter counts from the agent process's start and starts again at 0
when the agent restarts, which is what Prometheus expects of a counter (`rate()` and
`increase()` see the reset and carry on). `edgegossip_step` and `edgegossip_epoch` are gauges:
they resume from the checkpoint, and go back by what a power cut lost.

The endpoint is plain HTTP and unauthenticated, as Prometheus scrapes are: it tells how training
goes, never parameters or keys, and `metrics_allow_from` answers only the listed addresses (others
get 403 before anything is read).
"""

from __future__ import annotations

import ipaddress
import logging
import re
import socket
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from socketserver import ThreadingMixIn
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import CollectorRegistry, make_wsgi_app
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, InfoMetricFamily
from prometheus_client.process_collector import ProcessCollector

from edgegossip import clock
from edgegossip.metrics import ALARMS

log = logging.getLogger(__name__)

PREFIX = "edgegossip_"
REQUEST_TIMEOUT_S = (
    5.0  # a scraper that opens a connection and sends nothing holds a thread this long
)

# name (without prefix), kind, help, key in the status dict, factor to base units
SCALARS: tuple[tuple[str, str, str, str, float], ...] = (
    ("step", "gauge", "training step (resumes from the checkpoint)", "step", 1.0),
    ("epoch", "gauge", "epochs over this device's shard", "epoch", 1.0),
    ("training_loss", "gauge", "mean training loss over the last record's steps", "loss", 1.0),
    ("heldout_accuracy_ratio", "gauge", "accuracy on the held-out slice", "accuracy", 1.0),
    ("sent_bytes_total", "counter", "parameter bytes sent to peers", "bytes_sent", 1.0),
    ("received_bytes_total", "counter", "bytes of datagrams accepted", "bytes_received", 1.0),
    ("datagrams_sent_total", "counter", "datagrams sent", "datagrams_sent", 1.0),
    ("datagrams_received_total", "counter", "datagrams accepted", "datagrams_received", 1.0),
    (
        "datagrams_lost_total",
        "counter",
        "datagrams from peers that never arrived (from sequence gaps)",
        "datagrams_lost",
        1.0,
    ),
    (
        "datagrams_late_total",
        "counter",
        "datagrams that arrived when nothing could use them any more",
        "datagrams_late",
        1.0,
    ),
    (
        "datagrams_refused_total",
        "counter",
        "datagrams that failed a check (reasons in datagrams_dropped_total)",
        "datagrams_refused",
        1.0,
    ),
    ("push_weight", "gauge", "push-sum weight held (gossip-push)", "push_weight", 1.0),
    ("peak_rss_bytes", "gauge", "peak resident memory of the agent", "peak_rss_mb", 1e6),
    (
        "disk_written_bytes_total",
        "counter",
        "bytes the agent wrote to disk",
        "disk_written_mb",
        1e6,
    ),
    ("disk_free_bytes", "gauge", "free space where the agent writes", "disk_free_mb", 1e6),
    ("checkpoint_age_seconds", "gauge", "time since the last checkpoint", "checkpoint_age_s", 1.0),
    ("uptime_seconds", "gauge", "time since the agent started", "uptime_s", 1.0),
)
# name, help, key of a {label value: number} dict in the status, the label
LABELLED: tuple[tuple[str, str, str, str], ...] = (
    ("exchanges_total", "exchanges by outcome", "exchanges", "outcome"),
    ("datagrams_dropped_total", "datagrams dropped, by reason", "drops", "reason"),
    ("link_loss_ratio", "loss observed on the link from each peer", "link_loss", "peer"),
)
# name, help, key of a list in the status, the label: one series per member, 1 while listed
# (and, where the possible members are known, 0 for the others)
MEMBERS: tuple[tuple[str, str, str, str, tuple[str, ...]], ...] = (
    ("alarm", "alarms raised now (protocol/liveness.py)", "alarms", "alarm", tuple(ALARMS)),
    (
        "peer_silent",
        "peers silent now: weight goes only to peers heard",
        "silent_peers",
        "peer",
        (),
    ),
)
STATES = ("starting", "training", "paused", "stopping")
# name, help, key in the status dict, its values: one series per value, 1 for the one it has
ENUMS: tuple[tuple[str, str, str, tuple[str, ...]], ...] = (
    ("state", "what the agent is doing", "state", STATES),
    ("clock", "whether the wall clock is synchronised (clock.py)", "clock", clock.STATES),
)


def installed_release() -> str:
    """The release `fleet deploy` installed this agent from (/opt/edgegossip/releases/ID/venv),
    or "" for an agent run from anywhere else."""
    venv = Path(sys.prefix)
    if venv.parent.parent.name == "releases" and re.fullmatch(r"[0-9a-f]{12}", venv.parent.name):
        return venv.parent.name
    return ""


class AgentCollector:
    """Turns one status dict into metric families, at each scrape."""

    def __init__(self, status: Callable[[], dict]):
        self.status = status
        self.release = installed_release()

    def collect(self):
        st = self.status()
        for name, kind, help, key, factor in SCALARS:
            v = st.get(key)
            if v is None:
                continue
            fam = CounterMetricFamily if kind == "counter" else GaugeMetricFamily
            # a counter family is named without its _total; the client library appends it
            yield fam(PREFIX + name.removesuffix("_total"), help, value=float(v) * factor)
        for name, help, key, label in LABELLED:
            fam = (CounterMetricFamily if name.endswith("_total") else GaugeMetricFamily)(
                PREFIX + name.removesuffix("_total"), help, labels=[label]
            )
            for k, v in sorted((st.get(key) or {}).items(), key=lambda kv: str(kv[0])):
                if v is not None:
                    fam.add_metric([str(k)], float(v))
            yield fam
        for name, help, key, label, known in MEMBERS:
            if key not in st:
                continue
            fam = GaugeMetricFamily(PREFIX + name, help, labels=[label])
            listed = {str(v) for v in st.get(key) or ()}
            for value in sorted(listed | set(known)):
                fam.add_metric([value], 1.0 if value in listed else 0.0)
            yield fam
        for name, help, key, values in ENUMS:
            fam = GaugeMetricFamily(PREFIX + name, help, labels=[name])
            for value in values:
                fam.add_metric([value], 1.0 if st.get(key) == value else 0.0)
            yield fam
        yield InfoMetricFamily(
            PREFIX + "build",
            "what runs: version, release, config",
            value={
                "version": str(st.get("version", "")),
                "release": self.release,
                "config_hash": str(st.get("config_hash", "")),
                "agent": str(st.get("agent", "")),
                "algorithm": str(st.get("algorithm", "")),
            },
        )


def _allowed(networks: str) -> Callable[[str], bool]:
    nets = [ipaddress.ip_network(n.strip(), strict=False) for n in networks.split(",") if n.strip()]
    if not nets:
        return lambda addr: True

    def ok(addr: str) -> bool:
        try:
            ip = ipaddress.ip_address(addr)
        except ValueError:
            return False
        if ip.version == 6 and ip.ipv4_mapped is not None:
            ip = ip.ipv4_mapped
        return any(ip in n for n in nets)

    return ok


class _Server(ThreadingMixIn, WSGIServer):
    daemon_threads = True  # a slow scraper never holds the agent's exit
    allow_reuse_address = True


class _Quiet(WSGIRequestHandler):
    timeout = REQUEST_TIMEOUT_S

    def log_message(self, format, *args):  # one line per scrape would fill the journal
        pass


class MetricsServer:
    """`/metrics` on `endpoint` (HOST:PORT), answered for `allow_from` only."""

    def __init__(self, endpoint: str, status: Callable[[], dict], allow_from: str = ""):
        host, _, port = endpoint.rpartition(":")
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(AgentCollector(status))  # type: ignore[arg-type]
        self.registry.register(ProcessCollector(registry=None))  # CPU seconds, RSS, descriptors
        metrics = make_wsgi_app(self.registry)
        allowed = _allowed(allow_from)
        self.refused = 0

        def app(environ, start_response):
            if not allowed(environ.get("REMOTE_ADDR", "")):
                self.refused += 1
                start_response("403 Forbidden", [("Content-Type", "text/plain")])
                return [b"not from here\n"]
            if environ.get("PATH_INFO") not in ("/metrics", "/"):
                start_response("404 Not Found", [("Content-Type", "text/plain")])
                return [b"/metrics\n"]
            return metrics(environ, start_response)

        host = host.strip("[]")
        server = (
            type("_Server6", (_Server,), {"address_family": socket.AF_INET6})
            if ":" in host
            else _Server
        )
        self.httpd: WSGIServer = make_server(host, int(port), app, server, handler_class=_Quiet)
        self.port: int = self.httpd.server_address[1]
        self._thread = threading.Thread(
            target=self.httpd.serve_forever, name="metrics", daemon=True
        )

    def start(self) -> MetricsServer:
        self._thread.start()
        return self

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self._thread.join(2)
