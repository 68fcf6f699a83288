"""`edgegossip fleet logs NAME`: the agent's service log on one device, over SSH."""

from __future__ import annotations

import subprocess

import click

from edgegossip import exit_codes
from edgegossip.cli.fleet import open_fleet
from edgegossip.cli.render import fail


@click.command()
@click.argument("name")
@click.option(
    "--fleet", "fleet_dir", type=click.Path(file_okay=False), default=".", show_default=True
)
@click.option("--lines", "-n", type=click.IntRange(1), default=50, show_default=True)
@click.option("--follow", "-f", is_flag=True, help="Keep printing new lines until Ctrl-C.")
def logs(name, fleet_dir, lines, follow) -> None:
    """Print the last lines of the agent's journal on device NAME."""
    from pathlib import Path

    from edgegossip.fleet import remote
    from edgegossip.fleet.inventory import InventoryError
    from edgegossip.fleet.ssh import Ssh, unreachable_reason

    f = open_fleet(Path(fleet_dir))
    try:
        d = f.device(name)
    except InventoryError as e:
        fail(str(e), exit_codes.USAGE)
    argv = Ssh(f, d).argv(remote.logs_command(lines, follow))
    p = subprocess.run(argv, stderr=subprocess.PIPE, text=True)  # stdout streams straight through
    if p.returncode == 255:
        fail(f"{name}: {unreachable_reason(p.stderr)}", exit_codes.FAILURE)
    if p.returncode not in (0, 130):
        fail(
            f"{name}: journalctl exit {p.returncode}: {p.stderr.strip()[-200:]}", exit_codes.FAILURE
        )


COMMANDS = [logs]
