"""`edgegossip fleet prometheus`: the fleet as a Prometheus file_sd target list."""

from __future__ import annotations

from pathlib import Path

import click

from edgegossip import exit_codes
from edgegossip.cli.fleet import fleet_options, open_fleet
from edgegossip.cli.render import emit, fail


@click.command()
@click.option(
    "--out",
    type=click.Path(dir_okay=False, path_type=Path),
    required=True,
    help="The file_sd JSON file to write (Prometheus re-reads it when it changes).",
)
@fleet_options(only=False)
def prometheus(out: Path, fleet_dir, as_json, concurrency, timeout_s) -> None:
    """Write a Prometheus file_sd target list from fleet.toml: one target per device,
    ADDRESS:metrics_port, labelled device, group and fleet. The scrape job in prometheus.yml:
    `file_sd_configs: [{files: [OUT]}]` (docs/watching.md).

    JSON: {"out", "targets": [{"targets": ["HOST:PORT"], "labels": {"device", "group",
    "fleet"}}, ...]}"""
    from edgegossip.fleet import prometheus as p

    f = open_fleet(fleet_dir)
    if not f.metrics_port:
        fail(
            "fleet.metrics_port is 0 in fleet.toml: the devices serve no /metrics", exit_codes.USAGE
        )
    try:
        entries = p.write(f, out)
    except OSError as e:
        fail(f"{out}: {e.strerror}", exit_codes.USAGE)
    if as_json:
        emit({"out": str(out), "targets": entries}, as_json)
    else:
        click.echo(f"{out}: {len(entries)} targets (job {p.JOB}, port {f.metrics_port})")


COMMANDS = [prometheus]
