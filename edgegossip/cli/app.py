"""The click group; every command lives in its own module and is wired here."""

from __future__ import annotations

import logging
import sys

import click

from edgegossip import __version__
from edgegossip.cli import exit_codes
from edgegossip.cli.agent import agent
from edgegossip.cli.bench import bench
from edgegossip.cli.data import data
from edgegossip.cli.emulate import emulate
from edgegossip.cli.simulate import simulate
from edgegossip.cli.exchange import exchange
from edgegossip.cli.export import export
from edgegossip.cli.keys import keys
from edgegossip.cli.fleet import fleet
from edgegossip.cli.lab import lab


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="edgegossip")
@click.option("-v", "--verbose", is_flag=True, help="Log at debug level.")
def cli(verbose: bool) -> None:
    """Train one neural network across a fleet of small devices over lossy UDP gossip."""
    logging.basicConfig(level=logging.DEBUG if verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")


cli.add_command(agent)
cli.add_command(bench)
cli.add_command(data)
cli.add_command(emulate)
cli.add_command(simulate)
cli.add_command(exchange)
cli.add_command(export)
cli.add_command(keys)
cli.add_command(fleet)
cli.add_command(lab)


def main() -> None:
    try:
        cli.main(standalone_mode=True)
    except KeyboardInterrupt:
        click.echo("interrupted", err=True)
        sys.exit(exit_codes.INTERRUPTED)


if __name__ == "__main__":
    main()
