"""Prometheus' view of a fleet: a `file_sd` target list written from fleet.toml, one target per
device (its address and the fleet's metrics_port) with `device`, `group` and `fleet` labels, and
the scrape job that reads it. Prometheus re-reads the file when it changes, so `fleet add`,
`remove` and this command again are all a running Prometheus needs."""

from __future__ import annotations

import json
import os
from pathlib import Path

JOB = "edgegossip"


def targets(fleet) -> list[dict]:
    """One file_sd entry per device; a device in several groups gets them comma-joined, as a
    label holds one value."""
    if not fleet.metrics_port:
        return []
    host = lambda a: f"[{a}]" if ":" in a else a  # noqa: E731 (an IPv6 address in a target)
    return [
        {
            "targets": [f"{host(d.address)}:{fleet.metrics_port}"],
            "labels": {"device": d.name, "group": ",".join(d.groups), "fleet": fleet.name},
        }
        for d in fleet.devices
    ]


def write(fleet, out: Path) -> list[dict]:
    """Write the target list atomically: Prometheus may read it at any moment."""
    entries = targets(fleet)
    tmp = out.with_name(f".{out.name}.tmp")
    tmp.write_text(json.dumps(entries, indent=1) + "\n")
    os.replace(tmp, out)
    return entries


def scrape_config(sd_file: Path, interval_s: int = 15) -> dict:
    """The scrape job for prometheus.yml (docs/watching.md): the target list above, nothing else."""
    return {
        "job_name": JOB,
        "scrape_interval": f"{interval_s}s",
        "file_sd_configs": [{"files": [str(sd_file)]}],
    }
