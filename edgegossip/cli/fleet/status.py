"""`edgegossip fleet status [--watch]`: one row per device, live from its agent."""

from __future__ import annotations

import time

import click

from edgegossip import catalog, exit_codes
from edgegossip.cli.fleet import fleet_options, open_fleet, select
from edgegossip.cli.render import emit, fail, table

# the agent's own metrics as catalog.py heads them, then what this view makes of the rest
COLUMNS = [
    "name",
    "state",
    *catalog.status_columns(),
    "completed",
    "partial",
    "timed_out",
    "link_loss",
    "silent",
    "suspect",
    "model",
    "source",
    "note",
]


def _ids(peers) -> str | None:
    """A list of peer ids as a cell: 2,5 (None: none)."""
    return ",".join(str(j) for j in peers or ()) or None


def _flat(r: dict) -> dict:
    ex = r.get("exchanges") or {}
    losses = [v for v in (r.get("link_loss") or {}).values() if v is not None]
    note = (
        r.get("error")
        or (
            "another model than the fleet's: its peers drop its datagrams; deploy again"
            if r.get("model_mismatch")
            else ""
        )
        or (
            f"no control answer; systemd: {r.get('service')}; {r.get('last_log', '')}"
            if r.get("source") == "ssh"
            else ""
        )
        or (f"alarm: {', '.join(r['alarms'])}" if r.get("alarms") else "")
        or r.get("disk_note")
        or (
            "clock unsynchronised: no time server answered (record times may be off)"
            if r.get("clock") == "unsynchronised"
            else ""
        )
    )
    return {
        **r,
        **{heading: r.get(key) for heading, key in catalog.status_columns().items()},
        "completed": ex.get("completed"),
        "partial": ex.get("partial"),
        "timed_out": ex.get("timed_out"),
        "silent": _ids(r.get("silent_peers")),
        "suspect": _ids(r.get("suspect_peers")),
        "link_loss": round(sum(losses) / len(losses), 3) if losses else None,
        "model": (r.get("model_digest") or "")[:12] or None,
        "note": note[:80],
    }


@click.command()
@click.option(
    "--watch",
    type=click.FloatRange(0.5),
    default=None,
    metavar="SECONDS",
    help="Refresh every SECONDS until Ctrl-C (with --json: one object per refresh).",
)
@fleet_options(timeout=15)
def status(watch, fleet_dir, as_json, concurrency, timeout_s, only) -> None:
    """Each agent's state, step, loss, held-out accuracy, exchanges, observed link loss, drops,
    peak memory and uptime, from its control endpoint; where that is silent, systemd's view
    over SSH (source "ssh").

    --json: {"devices": [{"name", "reachable", "state" (training | closing | paused | starting |
    stopped | failed | unreachable), "step", "epoch", "loss", "accuracy", "source" (control |
    ssh | null),
    "exchanges", "link_loss", "drops", "datagrams_dropped", "datagrams_lost" (never arrived,
    from sequence gaps), "datagrams_late" (arrived when nothing could use them),
    "datagrams_refused" (failed a check), "suspect_peers" (peers whose rounds the merge bound
    keeps clipping or refusing: protocol/bound.py), "peak_rss_mb", "uptime_s",
    "disk_written_mb" (since the agent started), "disk_written_mb_per_h", "disk_free_mb",
    "checkpoint_age_s", "checkpoint_step", "checkpoint_failures", "disk_note" (why metrics
    or checkpoints are not being written, else null), "clock" (synchronised | unsynchronised |
    unknown: clock.py), "version", "config_hash", "model_digest" (a compiled model's artifact
    digest, else null), "model_mismatch" (true when it is not the fleet's), "error", ...}],
    "time"}"""
    from edgegossip.fleet import parallel
    from edgegossip.fleet.query import status as device_status

    f = open_fleet(fleet_dir)
    devices = select(f, only)
    fleet_model = _fleet_model(f)
    while True:
        rows = parallel.each(
            devices, lambda d, dl: device_status(f, d, dl), concurrency, timeout_s, progress=False
        )
        for r in rows:  # a row's own error is the device's state, not a command failure
            if r.get("state") is None:
                r.update(state="unreachable", reachable=False)
            if "model_digest" in r:
                r["model_mismatch"] = r["model_digest"] != fleet_model
        if as_json:
            emit({"devices": rows, "time": round(time.time(), 1)}, True)
        else:
            if watch:
                click.clear()
            click.echo(table([_flat(r) for r in rows], COLUMNS))
        if not watch:
            return
        time.sleep(watch)


def _fleet_model(f) -> str | None:
    from edgegossip.config import ConfigError
    from edgegossip.fleet import agentconf

    try:
        return agentconf.model_digest(f)
    except ConfigError as e:
        fail(str(e), exit_codes.USAGE)


COMMANDS = [status]
