"""`edgegossip lab up | down`: emulated devices (booted Debian containers) to run the fleet
commands against."""

from __future__ import annotations

from pathlib import Path

import click

from edgegossip import exit_codes
from edgegossip.algorithms import DEFAULT as DEFAULT_ALGORITHM
from edgegossip.algorithms import NAMES as ALGORITHMS
from edgegossip.cli import options
from edgegossip.cli.render import emit, fail


@click.group()
def lab() -> None:
    """Booted Debian containers with systemd and sshd, one network namespace each (root)."""


@lab.command()
@click.option("--devices", "n", type=click.IntRange(1, 200), default=3, show_default=True)
@click.option(
    "--loss",
    type=click.FloatRange(0, 1),
    default=0.0,
    show_default=True,
    help="Fraction of packets between devices the kernel drops.",
)
@click.option("--rate", default=None, help="Egress cap per device (tbf), e.g. 20mbit.")
@options.setting("--model", "model", default="logreg", help="The model.")
@click.option(
    "--algorithm", type=click.Choice(ALGORITHMS), default=DEFAULT_ALGORITHM, show_default=True
)
@click.option(
    "--split",
    type=options.choice("partition", ("none",)),
    default="iid",
    show_default=True,
    help="Each device's own MNIST file, or none (ship MNIST whole).",
)
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    required=True,
    help="The lab's folder; it becomes a fleet folder (fleet.toml, secrets/).",
)
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help='Print {"lab", "fleet", "devices": [{"name", "address"}]}.',
)
def up(n, loss, rate, model, algorithm, split, out, as_json) -> None:
    """Boot N devices and write OUT/fleet.toml pointing at them."""
    from edgegossip.errors import EdgegossipError
    from edgegossip.lab import machines

    settings = {"train": {"algorithm": algorithm, "model": model}}
    try:
        result = machines.up(
            n,
            out,
            loss,
            rate,
            settings,
            None if split == "none" else split,
            progress=lambda m: click.echo(m, err=True),
        )
    except machines.LabError as e:
        fail(str(e), exit_codes.NEEDS_ROOT if "root" in str(e) else exit_codes.FAILURE)
    except (EdgegossipError, OSError) as e:  # a bad inventory is a failed lab here, as before
        fail(str(e), exit_codes.FAILURE)
    if as_json:
        emit(result, True)
    else:
        click.echo(
            f"lab {result['lab']}: {n} devices up; fleet in {result['fleet']} "
            f"(try: edgegossip fleet deploy --fleet {out})"
        )


@lab.command()
@click.argument("directory", type=click.Path(file_okay=False, path_type=Path), required=False)
@click.option("--all", "everything", is_flag=True, help="Every lab on this machine, and leftovers.")
@click.option("--json", "as_json", is_flag=True, help='Print {"removed": [names]}.')
def down(directory, everything, as_json) -> None:
    """Stop a lab's devices and remove its network (DIRECTORY: the lab's --out)."""
    from edgegossip.lab import machines

    if bool(directory) == everything:
        fail("give a lab folder or --all", exit_codes.USAGE)
    try:
        removed = machines.down_all() if everything else machines.down(directory)
    except machines.LabError as e:
        fail(str(e), exit_codes.USAGE)
    emit({"removed": removed}, True) if as_json else click.echo(
        f"removed {len(removed)}: {' '.join(removed)}" if removed else "nothing to remove"
    )
