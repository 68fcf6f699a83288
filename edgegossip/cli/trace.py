"""`edgegossip trace make|send|record`: loss traces for `emulate --loss-model trace`, generated
from a loss model or recorded on a real link (emulate/traces.py)."""

from __future__ import annotations

from pathlib import Path

import click

from edgegossip import exit_codes
from edgegossip.cli import options
from edgegossip.cli.render import emit, fail


def _show(row: dict, as_json: bool) -> None:
    if as_json:
        emit(row, True)
    else:
        click.echo("  ".join(f"{k} {v}" for k, v in row.items()))


@click.group()
def trace() -> None:
    """Loss traces: one outcome per packet, 1 lost and 0 arrived (docs/usage.md)."""


@trace.command()
@options.network(offer=("loss", "loss_model", "burst"))
@click.option("--count", type=click.IntRange(1, 1 << 22), default=100_000, show_default=True)
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), required=True)
@click.option("--json", "as_json", is_flag=True, help='{"outcomes", "loss", "burst_mean", "out"}')
def make(count, seed, out, as_json, **network) -> None:
    """A trace drawn from the loss model (independent, or Gilbert-Elliott bursts), labelled
    generated."""
    from edgegossip.emulate import traces

    try:
        links = options.network_of(network, 1, "simulate").links()
    except ValueError as e:
        fail(str(e), exit_codes.USAGE)
    _show(traces.make(links, count, seed, out), as_json)


@trace.command()
@click.argument("target")
@click.option("--count", type=click.IntRange(1, 1 << 22), default=100_000, show_default=True)
@click.option("--rate", default="2mbit", show_default=True, help="Pace, e.g. 2mbit.")
@click.option("--size", type=click.IntRange(16, 1472), default=1400, show_default=True)
@click.option("--json", "as_json", is_flag=True, help='{"sent", "seconds"}')
def send(target, count, rate, size, as_json) -> None:
    """Send COUNT numbered datagrams to TARGET (HOST:PORT), where `trace record` listens."""
    from edgegossip.emulate import traces
    from edgegossip.run import rate_to_mbps

    host, _, port = target.rpartition(":")
    try:
        mbps = rate_to_mbps(rate)
        if not host or not port.isdigit() or not mbps:
            raise ValueError
    except ValueError:
        fail(f"want HOST:PORT and a rate like 2mbit, got {target} and {rate}", exit_codes.USAGE)
    _show(traces.send(host, int(port), count, mbps * 1e6, size), as_json)


@trace.command()
@click.option("--listen", default="0.0.0.0:47990", show_default=True, help="HOST:PORT.")
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), required=True)
@click.option(
    "--idle",
    type=click.FloatRange(0.1, 600),
    default=3.0,
    show_default=True,
    help="Stop once nothing came for this many seconds.",
)
@click.option("--json", "as_json", is_flag=True, help='{"outcomes", "loss", "burst_mean", "out"}')
def record(listen, out, idle, as_json) -> None:
    """Record what `trace send` sent here as a trace (run this first)."""
    from edgegossip.emulate import traces

    host, _, port = listen.rpartition(":")
    if not port.isdigit():
        fail(f"--listen {listen}: want HOST:PORT", exit_codes.USAGE)
    try:
        row = traces.record(host or "0.0.0.0", int(port), out, idle, 1 << 22)
    except OSError as e:
        fail(f"--listen {listen}: {e.strerror}", exit_codes.FAILURE)
    _show(row, as_json)
