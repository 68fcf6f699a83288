"""`edgegossip fleet start | stop | restart`: the agent's systemd unit on each device."""

from __future__ import annotations

import click

from edgegossip.cli.fleet import exit_for, fleet_options, open_fleet, select
from edgegossip.cli.render import emit, table

PAST = {"start": "started", "stop": "stopped", "restart": "restarted"}


def _command(action: str, doc: str):
    @click.command(
        name=action,
        help=doc + '\n\n--json: {"devices": [{"name", "ok", "error", "service", "seconds"}]}',
    )
    @fleet_options(timeout=120)
    def run(fleet_dir, as_json, concurrency, timeout_s, only) -> None:
        from edgegossip.fleet import parallel, remote
        from edgegossip.fleet.ssh import Ssh

        f = open_fleet(fleet_dir)
        rows = parallel.each(
            select(f, only),
            lambda d, dl: {"service": remote.service(Ssh(f, d, dl), action)},
            concurrency,
            timeout_s,
            verb=PAST[action],
        )
        emit({"devices": rows}, True) if as_json else click.echo(
            table(rows, ["name", "ok", "service", "seconds", "error"])
        )
        exit_for(rows)

    return run


COMMANDS = [
    _command("start", "Start the agent; it resumes from its last checkpoint."),
    _command("stop", "Stop the agent (it writes a final checkpoint first)."),
    _command("restart", "Restart the agent; it resumes from its last checkpoint."),
]
