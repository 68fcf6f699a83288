"""`edgegossip keys init`: a master secret and one keyfile per device, for keys per link."""

from __future__ import annotations

from pathlib import Path

import click

from edgegossip import exit_codes
from edgegossip.cli import options
from edgegossip.cli.render import emit, fail


@click.group()
def keys() -> None:
    """Keys per link: a stolen device can then forge nothing in another device's name."""


@keys.command()
@options.nodes(65535, least=2, default=None, dest="workers")
@click.option(
    "--fleet",
    type=click.IntRange(0, 2**32 - 1),
    default=1,
    show_default=True,
    help="Fleet id (agent.fleet).",
)
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    required=True,
    help="Folder for master.key and device-ID.keys (created, mode 0700).",
)
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help='Print {"master", "devices": [paths], "workers", "fleet"}.',
)
def init(workers: int, fleet: int, out: Path, as_json: bool) -> None:
    """Make the fleet's master secret (keep it off the devices) and give each device a keyfile
    with the keys of its own links only: copy device-ID.keys to device ID and point its
    agent.keys at it."""
    from edgegossip.dataplane.keys import write_fleet

    try:
        out.mkdir(parents=True, exist_ok=True)
        out.chmod(0o700)
        result = write_fleet(out, workers, fleet)
    except FileExistsError as e:
        fail(str(e), exit_codes.USAGE)
    except OSError as e:
        fail(f"{out}: {e.strerror}", exit_codes.FAILURE)
    if as_json:
        emit(result, True)
    else:
        click.echo(
            f"master secret {result['master']} (keep it off the devices); "
            f"{workers} keyfiles in {out}"
        )
