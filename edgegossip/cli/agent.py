"""`edgegossip agent --config agent.toml`: the long-running process on one device."""

from __future__ import annotations

import faulthandler
import json
import signal
import threading

import click

from edgegossip import exit_codes
from edgegossip.cli.render import fail, score


@click.command()
@click.option(
    "--config",
    "config_path",
    required=True,
    type=click.Path(dir_okay=False),
    help="The agent's TOML configuration.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the final record as JSON.")
def agent(config_path: str, as_json: bool) -> None:
    """Train on this device's shard and gossip with peers until stopped (SIGTERM/SIGINT)."""
    # `kill -USR1` prints every thread's Python stack to stderr (the journal, `podman logs`) and
    # the agent goes on: where an agent far away is stuck, from its start on, without stopping it
    try:
        faulthandler.register(signal.SIGUSR1, all_threads=True)
    except (RuntimeError, ValueError):  # no stderr file to print to (an in-process runner)
        pass
    # a SIGHUP while the agent starts (a peer added meanwhile) is kept for its first step, not
    # the default's end of the process
    hup = threading.Event()
    signal.signal(signal.SIGHUP, lambda *_: hup.set())
    from edgegossip import config
    from edgegossip.agent import Agent
    from edgegossip.data.mnist import DataError
    from edgegossip.protocol.allreduce import RingStalled

    try:
        cfg = config.load(config_path)
        a = Agent(cfg)
    except config.ConfigError as e:
        fail(f"config: {e}", exit_codes.USAGE)
    except DataError as e:
        fail(str(e), exit_codes.MISSING_DATA)
    except ValueError as e:
        fail(str(e), exit_codes.USAGE)
    a.config_path, a.reload_event = config_path, hup
    a.install_signal_handlers()
    try:
        final = a.run()
    except OSError as e:
        if e.filename:  # a file the agent could not open, not its sockets
            fail(f"{e.filename}: {e.strerror or e}", exit_codes.FAILURE)
        fail(f"network: {e.strerror or e} (listen {cfg.listen})", exit_codes.FAILURE)
    except RingStalled as e:
        fail(str(e), exit_codes.FAILURE)
    if a.restart:
        fail("agent.toml changed beyond its peers: stopped to restart on it", exit_codes.RESTART)
    if as_json:
        click.echo(json.dumps(final))
    else:
        click.echo(
            f"agent {cfg.id} stopped at step {final['step']}, "
            f"{score(final.get('accuracy'), final.get('eval_mse'))}"
        )
