"""`edgegossip fleet wheelhouse --out DIR`: the wheels a device installs, built for this machine.

Run it once on a device of the fleet's platform (one Pi) and pass the folder to deploy's
--wheelhouse when that platform is not the operator machine's."""

from __future__ import annotations

from pathlib import Path

import click

from edgegossip import exit_codes
from edgegossip.cli.render import emit, fail
from edgegossip.fleet.bundle import EXTRAS


@click.command()
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), required=True)
@click.option(
    "--extras", type=click.Choice(["", *EXTRAS]), default="", help="Include the onnx extra."
)
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help='Print the manifest: {"release", "platform", "wheels", "bytes", ...}.',
)
def wheelhouse(out: Path, extras: str, as_json: bool) -> None:
    """Build (or reuse) a wheelhouse in OUT for this machine's platform."""
    from edgegossip.fleet import bundle

    try:
        m = bundle.build(
            out, (extras,) if extras else (), progress=lambda s: click.echo(s, err=True)
        )
    except bundle.BundleError as e:
        fail(str(e), exit_codes.FAILURE)
    if as_json:
        emit(m, True)
    else:
        click.echo(
            f"wheelhouse {m['release']} for {m['platform']['machine']} Python "
            f"{m['platform']['python']}: {len(m['wheels'])} wheels, "
            f"{m['bytes'] / 1e6:.1f} MB in {out}"
        )


COMMANDS = [wheelhouse]
