"""`edgegossip fleet deploy`: install and (re)start the agent on every device over SSH."""

from __future__ import annotations

import re
from pathlib import Path

import click

from edgegossip import exit_codes
from edgegossip.cli.fleet import exit_for, fleet_options, open_fleet, select
from edgegossip.cli.render import emit, fail, table
from edgegossip.fleet.bundle import EXTRAS

COLUMNS = [
    "name",
    "ok",
    "version_before",
    "release_before",
    "release_after",
    "changed",
    "shipped_mb",
    "state",
    "seconds",
    "error",
]


def _share(text: str) -> str:
    if not re.fullmatch(r"\d+%?|\d+\.\d+%", text):
        raise click.BadParameter("N or P%")
    return text


@click.command()
@click.option(
    "--batch",
    default="100%",
    show_default=True,
    callback=lambda c, p, v: _share(v),
    help="Devices per rollout step: N or P% of the fleet.",
)
@click.option(
    "--max-fail",
    default="0",
    show_default=True,
    callback=lambda c, p, v: _share(v),
    help="Stop the rollout once more than N (or P%) devices failed.",
)
@click.option(
    "--wheelhouse",
    "wheel_dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Install from this wheelhouse (`fleet wheelhouse`); default: build one for this "
    "machine's platform in FLEET/wheelhouse.",
)
@click.option(
    "--extras",
    type=click.Choice(["", *EXTRAS]),
    default="",
    help="Install the onnx extra too (implied when the fleet trains a compiled model).",
)
@click.option(
    "--accept-new-host-keys",
    "accept_new",
    is_flag=True,
    help="Learn the SSH host key of a device none is pinned for (trust on first use; flashed "
    "and lab devices have theirs pinned already, `fleet trust` pins one after a check).",
)
@fleet_options(timeout=600)
def deploy(
    batch, max_fail, wheel_dir, extras, accept_new, fleet_dir, as_json, concurrency, timeout_s, only
) -> None:
    """Ship the wheelhouse, config, keys, data and unit to each device, install, enable and
    (re)start the agent, batch by batch. Idempotent: a device that has it all is only started.

    --json: {"release", "devices": [{"name", "ok", "error", "version_before", "version_after",
    "release_before", "release_after", "changed", "shipped_mb", "state", "seconds"}]}

    Exit 1 when a device failed; 2 when every device that failed was refused because the
    wheelhouse does not fit its platform (nothing was sent to it: build the right one with
    `fleet wheelhouse --for TARGET`)."""
    from edgegossip.fleet import agentconf, bundle, parallel
    from edgegossip.fleet.deploy import deploy_one, rollout

    f = open_fleet(fleet_dir)
    devices = select(f, only)
    folder = agentconf.model_folder(f)
    if folder is not None:
        extras = "onnx"  # a compiled model trains in onnxruntime
    manifest, wheel_dir = _wheelhouse(f, wheel_dir, extras)
    if folder is not None:
        _check_runtime(manifest, wheel_dir, folder)
    extra = f"[{extras}]" if extras else ""

    refused: set[str] = set()

    def one(d, deadline):
        try:
            return deploy_one(f, d, deadline, wheel_dir, manifest, extra, accept_new=accept_new)
        except bundle.PlatformMismatch:
            refused.add(d.name)
            raise

    def run_batch(group):
        return parallel.each(group, one, concurrency, timeout_s, verb="deployed")

    rows = rollout(devices, batch, max_fail, run_batch)
    if as_json:
        emit({"release": manifest["release"], "devices": rows}, True)
    else:
        click.echo(table(rows, COLUMNS))
    failed = {r["name"] for r in rows if not r["ok"]}
    if failed and failed <= refused:
        raise SystemExit(exit_codes.USAGE)
    exit_for(rows)


def _wheelhouse(f, wheel_dir: Path | None, extras: str) -> tuple[dict, Path]:
    """The wheelhouse's manifest and folder: the one given, or one built for this machine in
    FLEET/wheelhouse; refused if it lacks the extra the fleet needs."""
    from edgegossip.fleet import bundle

    try:
        if wheel_dir is None:
            wheel_dir = f.root / "wheelhouse"
            manifest = bundle.build(
                wheel_dir, (extras,) if extras else (), progress=lambda s: click.echo(s, err=True)
            )
        else:
            manifest = bundle.load(wheel_dir)
    except bundle.BundleError as e:
        fail(str(e), exit_codes.FAILURE)
    if extras and extras not in manifest.get("extras", []):
        fail(
            f"{wheel_dir}: has no {extras} extra, which the fleet's "
            + ("compiled model needs" if extras == "onnx" else "deploy was asked for")
            + f": build it with `edgegossip fleet wheelhouse --extras {extras}`",
            exit_codes.USAGE,
        )
    return manifest, wheel_dir


def _check_runtime(manifest: dict, wheel_dir: Path, folder: Path) -> None:
    """The wheelhouse's onnxruntime runs the compiled model's opset, or the deploy stops here."""
    from edgegossip import artifact
    from edgegossip.fleet import bundle

    why = bundle.runtime_problem(manifest, artifact.read(folder).manifest.onnxruntime)
    if why is not None:
        fail(
            f"{wheel_dir}: {why}: build the wheelhouse again (`edgegossip fleet wheelhouse "
            "--extras onnx`) or export the model at an older opset",
            exit_codes.USAGE,
        )


COMMANDS = [deploy]
