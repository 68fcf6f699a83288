"""The one root of the errors edgegossip raises for a person to read: one line, and the exit
code the CLI leaves with (exit_codes.py). Each module keeps its own class (ConfigError,
SshError, ...) under this root, beside the builtin it always was, so `except ValueError` in a
caller still holds, and the CLI catches EdgegossipError once (cli/app.py)."""

from __future__ import annotations

from edgegossip import exit_codes

# how the CLI prints such an error (cli/render.fail), one line on stderr: what emulate and
# `fleet status` look for at the end of an agent's log to say why it stopped
PREFIX = "edgegossip: error: "


class EdgegossipError(Exception):
    """Something failed at run time: a device, a peer, a build, a benchmark."""

    exit_code = exit_codes.FAILURE


class UsageError(EdgegossipError):
    """The user's input is wrong: a setting, an inventory, an argument, a file given."""

    exit_code = exit_codes.USAGE
