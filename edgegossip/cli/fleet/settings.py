"""`edgegossip fleet set KEY=VALUE ...`: change a setting, then a rolling restart (a reload where
every change is one a running agent takes live: config.LIVE)."""

from __future__ import annotations

import hashlib
import time

import click

from edgegossip import exit_codes
from edgegossip.cli.fleet import exit_for, fleet_options, open_fleet, select
from edgegossip.cli.render import emit, fail, table


@click.command(name="set")
@click.argument("assignments", nargs=-1, required=True)
@click.option("--batch", default="1", show_default=True, help="Devices restarted at once: N or P%.")
@click.option(
    "--max-fail", default="0", show_default=True, help="Stop after more than N (or P%) failures."
)
@fleet_options(timeout=180)
def set_(assignments, batch, max_fail, fleet_dir, as_json, concurrency, timeout_s, only) -> None:
    """Change training or network settings (KEY=VALUE, e.g. p=1/16 lr=0.01 net.rate_mbps=10):
    for the whole fleet, or as overrides of --only devices. Everything is validated before any
    device is touched; then each device gets its new agent.toml and restarts, resuming from its
    checkpoint, batch by batch, each waited for until it trains again (phase=closing and back:
    reloaded, taken without a restart).

    --json: {"changes": {key: value}, "devices": [{"name", "ok", "error", "state", "config_hash",
    "seconds"}]}"""
    from edgegossip.catalog import RUNNING
    from edgegossip.config import LIVE
    from edgegossip.fleet import agentconf, inventory, parallel, remote, settings
    from edgegossip.fleet.deploy import rollout, wait_training
    from edgegossip.fleet.ssh import Ssh

    f = open_fleet(fleet_dir)
    devices = select(f, only)
    try:
        changes = [settings.parse(a) for a in assignments]
        new = settings.apply(f, changes, devices if only else None)
    except inventory.InventoryError as e:
        fail(str(e), exit_codes.USAGE)
    inventory.save(new)
    action = "reload" if {name for _, name, _ in changes} <= LIVE else "restart"

    def restart(d, deadline):
        text = agentconf.toml(new, new.device(d.name))
        ssh = Ssh(new, d, deadline)
        remote.put_config(ssh, text)
        remote.service(ssh, action)
        want = hashlib.sha256(text.encode()).hexdigest()[:12]
        state = wait_training(new, d, max(1.0, deadline - time.monotonic() - 1), want)
        if state not in RUNNING:
            raise RuntimeError(f"did not come back training with the new settings (state {state})")
        return {"state": state, "config_hash": want}

    rows = rollout(
        devices,
        batch,
        max_fail,
        lambda group: parallel.each(group, restart, concurrency, timeout_s, verb="restarted"),
    )
    result = {"changes": {n: v for _, n, v in changes}, "devices": rows}
    emit(result, True) if as_json else click.echo(
        table(rows, ["name", "ok", "state", "config_hash", "seconds", "error"])
    )
    exit_for(rows)


COMMANDS = [set_]
