"""The click group; every command lives in its own module and is wired here (COMMANDS)."""

from __future__ import annotations

import importlib
import logging
import sys

import click

from edgegossip import __version__, exit_codes
from edgegossip.cli.render import fail
from edgegossip.errors import EdgegossipError

# name -> module:attribute; a command's module is imported only when that command runs, so the
# agent on a device does not carry the fleet, lab, emulator and benchmark code (8 MB resident)
COMMANDS = {
    name: f"edgegossip.cli.{name}:{name}"
    for name in (
        "agent",
        "bench",
        "data",
        "emulate",
        "simulate",
        "exchange",
        "export",
        "model",
        "keys",
        "fleet",
        "lab",
        "trace",
    )
}


class LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *COMMANDS})

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name not in self.commands and name in COMMANDS:
            module, attr = COMMANDS[name].split(":")
            self.add_command(getattr(importlib.import_module(module), attr), name)
        return super().get_command(ctx, name)

    def invoke(self, ctx: click.Context):
        """The one catch of edgegossip's own errors: one line, the error's exit code."""
        try:
            return super().invoke(ctx)
        except EdgegossipError as e:
            fail(str(e).splitlines()[0] if str(e) else type(e).__name__, e.exit_code)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="edgegossip")
@click.option("-v", "--verbose", is_flag=True, help="Log at debug level.")
def cli(verbose: bool) -> None:
    """Train one neural network across a fleet of small devices over lossy UDP gossip."""
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.WARNING,
        format="%(levelname)s %(name)s: %(message)s",
    )


def main() -> None:
    try:
        cli.main(standalone_mode=True)
    except KeyboardInterrupt:
        click.echo("interrupted", err=True)
        sys.exit(exit_codes.INTERRUPTED)


if __name__ == "__main__":
    main()
