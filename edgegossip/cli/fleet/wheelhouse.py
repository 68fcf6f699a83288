"""`edgegossip fleet wheelhouse --out DIR [--for TARGET]`: the wheels a device installs, built
on the operator's machine, for this machine or for a Raspberry Pi OS release."""

from __future__ import annotations

from pathlib import Path

import click

from edgegossip import exit_codes
from edgegossip.cli.render import emit, fail
from edgegossip.fleet.bundle import EXTRAS
from edgegossip.fleet.targets import TARGETS

_FOR_HELP = "The devices' platform (default: this machine's): " + "; ".join(
    f"{name} = {t.describe()}" for name, t in TARGETS.items()
)


@click.command()
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), required=True)
@click.option("--for", "target", type=click.Choice(list(TARGETS)), default=None, help=_FOR_HELP)
@click.option(
    "--extras", type=click.Choice(["", *EXTRAS]), default="", help="Include the onnx extra."
)
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help='Print the manifest: {"release", "source", "platform": {"machine", "python", "glibc"}, '
    '"target", "extras", "wheels", "sha256", "zmq_draft", "bytes", "abi"}.',
)
def wheelhouse(out: Path, target: str | None, extras: str, as_json: bool) -> None:
    """Build (or reuse) a wheelhouse in OUT. With --for, the edgegossip wheel is compiled in a
    Debian root of that release under qemu-user (as root, once per release; Debian packages
    qemu-user-static, binfmt-support, debootstrap, systemd-container) and every other wheel is
    the package index's binary wheel for that platform: no device compiles anything."""
    from edgegossip.errors import EdgegossipError
    from edgegossip.fleet import bundle

    try:
        m = bundle.build(
            out,
            (extras,) if extras else (),
            progress=lambda s: click.echo(s, err=True),
            target=TARGETS[target] if target else None,
        )
    except EdgegossipError as e:
        fail(str(e), exit_codes.FAILURE)
    if as_json:
        emit(m, True)
    else:
        click.echo(
            f"wheelhouse {m['release']} for {bundle.describe(m['platform'])}: "
            f"{len(m['wheels'])} wheels, {m['bytes'] / 1e6:.1f} MB in {out}"
        )


COMMANDS = [wheelhouse]
