"""`edgegossip fleet ...`: one thin module per command, over edgegossip.fleet.

Every command takes --fleet DIR (default: here), --only NAMES|GROUPS, --json; devices run in
parallel (--concurrency) with a per-device --timeout, and each ends as one row with `name`, `ok`
and `error` (one line, or null), whatever happened to the others."""

from __future__ import annotations

from pathlib import Path

import click

from edgegossip import exit_codes
from edgegossip.cli.render import fail


def open_fleet(path: Path):
    from edgegossip.fleet import inventory

    try:
        return inventory.load(path)
    except inventory.InventoryError as e:
        fail(str(e), exit_codes.USAGE)


def select(fleet, only: str | None) -> list:
    from edgegossip.fleet.inventory import InventoryError

    try:
        return fleet.select(only)
    except InventoryError as e:
        fail(str(e), exit_codes.USAGE)


def fleet_options(timeout: float = 60, only: bool = True):
    """--fleet, --only, --json, --concurrency, --timeout on a command."""

    def wrap(f):
        opts = [
            click.option(
                "--fleet",
                "fleet_dir",
                type=click.Path(file_okay=False, path_type=Path),
                default=Path("."),
                show_default=True,
                help="The fleet folder.",
            ),
            click.option("--json", "as_json", is_flag=True, help="One JSON object on stdout."),
            click.option(
                "--concurrency",
                type=click.IntRange(1, 256),
                default=8,
                show_default=True,
                help="Devices worked on at once.",
            ),
            click.option(
                "--timeout",
                "timeout_s",
                type=click.FloatRange(1),
                default=timeout,
                show_default=True,
                help="Seconds per device before it is reported as failed.",
            ),
        ]
        if only:
            opts.append(
                click.option(
                    "--only",
                    default=None,
                    help="Comma-separated device names or groups (default: all).",
                )
            )
        for o in reversed(opts):
            f = o(f)
        return f

    return wrap


def exit_for(rows: list[dict]) -> None:
    """Exit 1 when any device failed: scripts must see it."""
    if any(not r.get("ok", True) for r in rows):
        raise SystemExit(exit_codes.FAILURE)


@click.group()
def fleet() -> None:
    """A fleet of devices from one inventory: deploy over SSH, watch, control, collect."""


def _register() -> None:
    from edgegossip.cli.fleet import (
        collect,
        deploy,
        devices,
        flash,
        init,
        logs,
        prometheus,
        service,
        settings,
        status,
        trust,
        wheelhouse,
    )

    mods = (init, devices, wheelhouse, flash, trust, deploy, status, service, logs, settings)
    for mod in (*mods, collect, prometheus):
        for cmd in mod.COMMANDS:
            fleet.add_command(cmd)


_register()
