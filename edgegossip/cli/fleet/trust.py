"""`edgegossip fleet trust NAME [--fingerprint SHA256:...]`: pin a device's SSH host key after
comparing its fingerprint (for a device that was not flashed by `fleet flash`)."""

from __future__ import annotations

import click

from edgegossip import exit_codes
from edgegossip.cli.fleet import fleet_options, open_fleet
from edgegossip.cli.render import emit, fail


@click.command()
@click.argument("name")
@click.option(
    "--fingerprint",
    default=None,
    help="The SHA256:... fingerprint the device shows (`ssh-keygen -lf "
    "/etc/ssh/ssh_host_ed25519_key.pub` on its console); without it, only list what it offers.",
)
@fleet_options(only=False)
def trust(name, fingerprint, fleet_dir, as_json, concurrency, timeout_s) -> None:
    """Pin NAME's host key in secrets/known_hosts once its fingerprint is confirmed.

    JSON: {"name", "host", "fingerprints": [...], "pinned": fingerprint or null}"""
    from edgegossip.fleet import hostkeys
    from edgegossip.fleet.inventory import InventoryError

    f = open_fleet(fleet_dir)
    try:
        device = f.device(name)
    except InventoryError as e:
        fail(str(e), exit_codes.USAGE)
    try:
        row = hostkeys.trust(f, device, fingerprint, timeout_s=min(timeout_s, 30))
    except hostkeys.HostKeyError as e:
        fail(str(e), exit_codes.FAILURE)
    if as_json:
        emit(row, True)
    elif row["pinned"]:
        click.echo(f"pinned {row['pinned']} for {row['host']}")
    else:
        click.echo(f"{row['host']} offers: {' '.join(row['fingerprints'])}")
        fail(
            "nothing pinned: compare with the device's own and pass --fingerprint",
            exit_codes.FAILURE,
        )


COMMANDS = [trust]
