"""Click options derived from the agent's settings (config.py): a setting's choices, default and
help are declared once there, and every command that offers it asks here."""

from __future__ import annotations

import click

from edgegossip import config
from edgegossip.config import default


def choice(name: str, extra: tuple[str, ...] = ()) -> click.Choice:
    """The allowed values of setting `name` (and extra ones a command adds, e.g. "none")."""
    return click.Choice([*config.CHOICES[name], *extra])


def setting(flag: str, name: str, *, dest: str | None = None, **kw):
    """--flag for setting `name`: its choices, default and help, unless given in kw."""
    kw.setdefault("default", default(name))
    kw.setdefault("show_default", True)
    kw.setdefault("help", config.HELP[name][:1].upper() + config.HELP[name][1:] + ".")
    if name in config.CHOICES and "type" not in kw:
        kw["type"] = choice(name)
    return click.option(flag, *([dest] if dest else []), **kw)


__all__ = ["choice", "default", "setting"]
