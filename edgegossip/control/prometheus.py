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

from edgegossip.catalog import METRICS, PREFIX, Metric

log = logging.getLogger(__name__)

REQUEST_TIMEOUT_S = (
    5.0  # a scraper that opens a connection and sends nothing holds a thread this long
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
        for m in METRICS:
            if m.prometheus is None or (m.shape != "state" and st.get(m.key) is None):
                continue
            yield _FAMILIES[m.shape](m, st[m.key] if m.key in st else None)
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


def _name(m: Metric) -> str:
    # a counter family is named without its _total; the client library appends it
    return PREFIX + (m.prometheus or "").removesuffix("_total")


def _number(m: Metric, v):
    fam = CounterMetricFamily if m.kind == "counter" else GaugeMetricFamily
    return fam(_name(m), m.help, value=float(v) * m.factor)


def _by(m: Metric, v: dict):
    fam = (CounterMetricFamily if m.kind == "counter" else GaugeMetricFamily)(
        _name(m), m.help, labels=[m.label]
    )
    for k, x in sorted(v.items(), key=lambda kv: str(kv[0])):
        if x is not None:
            fam.add_metric([str(k)], float(x) * m.factor)
    return fam


def _members(m: Metric, v):
    fam = GaugeMetricFamily(_name(m), m.help, labels=[m.label])
    listed = {str(x) for x in v or ()}
    for value in sorted(listed | set(m.values)):
        fam.add_metric([value], 1.0 if value in listed else 0.0)
    return fam


def _state(m: Metric, v):
    fam = GaugeMetricFamily(_name(m), m.help, labels=[m.label])
    for value in m.values:
        fam.add_metric([value], 1.0 if v == value else 0.0)
    return fam


_FAMILIES = {"number": _number, "by": _by, "members": _members, "state": _state}


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
