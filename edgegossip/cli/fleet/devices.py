"""`edgegossip fleet add | remove`: change the inventory; agent ids are never reused."""

from __future__ import annotations

from dataclasses import replace

import click

from edgegossip import exit_codes
from edgegossip.cli.fleet import fleet_options, open_fleet
from edgegossip.cli.render import emit, fail


@click.command()
@click.argument("name")
@click.argument("address")
@click.option("--user", default="pi", show_default=True)
@click.option("--port", type=click.IntRange(1, 65535), default=22, show_default=True)
@click.option("--profile", default="")
@fleet_options(only=False)
def add(name, address, user, port, profile, fleet_dir, as_json, concurrency, timeout_s) -> None:
    """Add a device (it gets a new agent id); run `fleet deploy` to reach it and its peers."""
    from edgegossip.fleet import inventory

    f = open_fleet(fleet_dir)
    d = inventory.Device(
        name=name, address=address, id=inventory.next_id(f), user=user, port=port, profile=profile
    )
    try:
        inventory.save(replace(f, devices=(*f.devices, d)))
    except inventory.InventoryError as e:
        fail(str(e), exit_codes.USAGE)
    emit({"name": name, "id": d.id}, as_json) if as_json else click.echo(
        f"added {name} as agent {d.id}"
    )


@click.command()
@click.argument("name")
@fleet_options(only=False)
def remove(name, fleet_dir, as_json, concurrency, timeout_s) -> None:
    """Remove a device from the inventory (its id is not given to another)."""
    from edgegossip.fleet import inventory

    f = open_fleet(fleet_dir)
    try:
        d = f.device(name)
        inventory.save(replace(f, devices=tuple(x for x in f.devices if x is not d)))
    except inventory.InventoryError as e:
        fail(str(e), exit_codes.USAGE)
    emit({"name": name, "id": d.id}, as_json) if as_json else click.echo(
        f"removed {name} (agent {d.id})"
    )


COMMANDS = [add, remove]
