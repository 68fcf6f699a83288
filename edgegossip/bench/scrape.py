"""`edgegossip bench metrics`: what the /metrics exporter costs an agent.

Two rows per model, each one local-only agent in a process of its own for --seconds: the
reference with no exporter (the client library is not even imported), then the same agent with
/metrics on loopback, scraped every --every seconds by this process (Prometheus' default is 15 s;
scraping faster makes any cost show). From the agent's own stop record: peak RSS (VmHWM) and
steps per second; from the scraper: the scrapes answered, their median and longest time, and the
size of one scrape."""

from __future__ import annotations

import shutil
import socket
import statistics
import tempfile
import time
import urllib.request
from pathlib import Path

from edgegossip.bench import local_agent
from edgegossip.metrics import read
from edgegossip.storage import METRICS


def _free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def _run(model: str, out: Path, seconds: float, every_s: float | None) -> dict:
    port = _free_port() if every_s else 0
    endpoint = f"127.0.0.1:{port}" if every_s else ""
    p = local_agent.start(model, out, seconds, metrics_endpoint=endpoint)
    times, size = [], 0
    try:
        while p.poll() is None:
            if every_s:
                t = time.perf_counter()
                try:
                    with urllib.request.urlopen(f"http://{endpoint}/metrics", timeout=5) as r:
                        size = len(r.read())
                    times.append(time.perf_counter() - t)
                except OSError:
                    pass  # not listening yet, or gone
            time.sleep(every_s or 0.5)
    finally:
        local_agent.finish(p, model, seconds + 300)
    recs = read(out / METRICS)
    start = next(r for r in recs if r.get("event") == "start")
    stop = [r for r in recs if r.get("event") == "stop"][-1]
    return {
        "model": model,
        "exporter": f"scraped every {every_s:g} s" if every_s else "off",
        "steps_per_s": round(stop["step"] / max(stop["time"] - start["time"], 1e-9), 1),
        "peak_rss_mb": stop["peak_rss_mb"],
        "scrapes": len(times),
        "scrape_ms_median": round(statistics.median(times) * 1e3, 2) if times else None,
        "scrape_ms_max": round(max(times) * 1e3, 2) if times else None,
        "scrape_bytes": size or None,
    }


def run(models=("mlp",), seconds: float = 30.0, every_s: float = 1.0) -> dict:
    base = Path(tempfile.mkdtemp(prefix="bench-metrics-"))
    rows = []
    try:
        for model in models:
            for i, every in enumerate((None, every_s)):
                rows.append(_run(model, base / f"{model}-{i}", seconds, every))
            rows[-1]["rss_added_mb"] = round(rows[-1]["peak_rss_mb"] - rows[-2]["peak_rss_mb"], 1)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    return {"benchmark": "metrics", "seconds": seconds, "results": rows}
