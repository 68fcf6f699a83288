"""`edgegossip lab up | down`: emulated devices (booted Debian containers) to run the fleet
commands against."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import click

from edgegossip import exit_codes
from edgegossip.algorithms import DEFAULT as DEFAULT_ALGORITHM
from edgegossip.algorithms import NAMES as ALGORITHMS
from edgegossip.cli import options
from edgegossip.cli.render import emit, fail
from edgegossip.fleet.targets import RELEASES
from edgegossip.lab import root as lab_root
from edgegossip.run import LAB


@click.group()
def lab() -> None:
    """Booted Debian containers with systemd and sshd, one network namespace each (root)."""


@lab.command()
@options.nodes(200, default=3, alias="--devices", dest="n")
@options.network(
    offer=("loss", "rate", "slow"),
    loss="0",
    loss_help="Fraction of packets between devices the kernel drops.",
    rate="none",
)
@options.run_settings(LAB, defaults={"model": "logreg"})
@click.option(
    "--algorithm", type=click.Choice(ALGORITHMS), default=DEFAULT_ALGORITHM, show_default=True
)
@click.option(
    "--split",
    type=options.choice("partition", ("none",)),
    default="iid",
    show_default=True,
    help="Each device's own file cut from --data, or none (ship the data set whole).",
)
@options.dataset("The data set the devices train on, from this machine's cache.")
@click.option(
    "--os",
    "os_name",
    type=click.Choice(lab_root.OSES),
    default="bookworm",
    show_default=True,
    help="The Raspberry Pi OS release the devices run, as its Debian release: "
    + ", ".join(
        f"{r.name} (Python {r.python}, glibc {r.glibc})"
        for r in RELEASES
        if r.name in lab_root.OSES
    )
    + ".",
)
@click.option(
    "--arch",
    type=click.Choice(tuple(lab_root.ARCHES)),
    default=None,
    help="The devices' architecture, as Debian names it: arm64 is aarch64, the 64-bit Raspberry "
    "Pi OS of every Pi since the Pi 3 (run under qemu-user: slow, for correctness); default: "
    "this machine's.",
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
    help='Print {"lab", "os", "arch", "fleet", "devices": [{"name", "address"}]}.',
)
def up(n, out, as_json, **opts) -> None:
    """Boot N devices and write OUT/fleet.toml pointing at them."""
    from edgegossip.errors import EdgegossipError
    from edgegossip.lab import machines
    from edgegossip.run import Run

    try:
        net = options.network_of(opts, n)
    except ValueError as e:
        fail(str(e), exit_codes.USAGE)
    # what was given, and the lab's model: the rest keep config.py's defaults, unwritten
    ctx, default = click.get_current_context(), click.core.ParameterSource.DEFAULT
    given = {k: opts.pop(k) for k in LAB}
    given = {k: v for k, v in given.items() if ctx.get_parameter_source(k) != default}
    o = SimpleNamespace(**opts)
    run = Run.of(
        given,
        algorithm=o.algorithm,
        nodes=n,
        network=net,
        data=o.data,
        model=given.get("model", "logreg"),
    )
    try:
        result = machines.up(
            run,
            out,
            None if o.split == "none" else o.split,
            progress=lambda m: click.echo(m, err=True),
            spec=lab_root.Spec(o.os_name, o.arch or ""),
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
@click.argument("directory", type=click.Path(file_okay=False, exists=True, path_type=Path))
@click.argument("name")
@click.option(
    "--card",
    "card_dir",
    type=click.Path(file_okay=False, exists=True, path_type=Path),
    required=True,
    help="The boot partition `fleet flash NAME --boot DIR` wrote, mounted at /boot/firmware.",
)
@click.option("--json", "as_json", is_flag=True, help='Print {"name", "address", "boot_s"}.')
def boot(directory, name, card_dir, as_json) -> None:
    """Boot lab device NAME as a fresh Raspberry Pi from a flashed card: its own root with
    nothing of the lab in it, the card at /boot/firmware, the card's cmdline.txt as the kernel
    command line. Returns once sshd answers with the host key the flash pinned; the first
    boot's install and the agent go on from there (watch with `fleet status`)."""
    from edgegossip.lab import machines

    try:
        row = machines.boot(directory, name, card_dir, progress=lambda m: click.echo(m, err=True))
    except machines.LabError as e:
        fail(str(e), exit_codes.USAGE if "not a device" in str(e) else exit_codes.FAILURE)
    if as_json:
        emit(row, True)
    else:
        click.echo(f"{row['name']} booted from {card_dir} in {row['boot_s']} s")


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
