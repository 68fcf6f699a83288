"""Click options derived from the agent's settings (config.py): a setting's choices, default and
help are declared once there, and every command that offers it asks here."""

from __future__ import annotations

from fractions import Fraction

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
    if name in config.RANGES and "type" not in kw:
        kw["type"] = number_range(name)
    return click.option(flag, *([dest] if dest else []), **kw)


def dataset(help: str):
    """--data: one of the data sets `edgegossip data fetch` knows."""
    from edgegossip.data.mnist import DATASETS

    return click.option(
        "--data", type=click.Choice(list(DATASETS)), default="mnist", show_default=True, help=help
    )


def own_dataset(help: str):
    """--data for a fleet on this machine: a data set `edgegossip data fetch` knows, or the
    user's own (data/own.py)."""
    return click.option(
        "--data", metavar="NAME|FILE.npz|DIR", default="mnist", show_default=True, help=help
    )


class Number(click.ParamType):
    """A number within a declared range (config.Range); a float may be written as a fraction,
    1/32."""

    def __init__(self, allowed: config.Range, integer: bool = False):
        self.allowed, self.integer = allowed, integer
        self.name = "integer" if integer else "number"

    def convert(self, value, param, ctx):
        try:
            v = int(value) if self.integer else float(Fraction(str(value)))
        except (ValueError, ZeroDivisionError):
            self.fail(
                f"{value!r} is not {'an integer' if self.integer else 'a number'}", param, ctx
            )
        if v not in self.allowed:
            self.fail(f"{value}: {self.allowed.text()}", param, ctx)
        return v


def number_range(name: str) -> Number:
    """The type of setting `name`'s option, from its declaration."""
    return Number(config.RANGES[name], isinstance(config.default(name), int))


PROBABILITY = Number(config.FRACTION)  # 0.03125 or 1/32


def loss_model(kinds: tuple[str, ...] | None = None):
    """--loss-model: how each link loses its packets (transport/lossmodel.py)."""
    from edgegossip.transport.lossmodel import KINDS

    return click.option(
        "--loss-model",
        type=click.Choice(kinds or KINDS),
        default="bernoulli",
        show_default=True,
        help="How each link loses --loss of its packets: independently, in bursts of --burst "
        "packets on average (gilbert-elliott), or as --trace replays them (netns only).",
    )


def burst(help: str):
    """--burst: a Gilbert-Elliott loss's mean burst length (transport/lossmodel.py)."""
    return click.option(
        "--burst", type=click.FloatRange(min=1), default=1.0, show_default=True, help=help
    )


# where `emulate` and `exchange` run their processes: namespaces with the kernel dropping packets
# (root), or loopback with the loss injected in the receive path; auto picks by the user
NETWORK_BACKENDS = ("auto", "netns", "loopback")


def network_backend(help: str):
    return click.option(
        "--backend",
        type=click.Choice(NETWORK_BACKENDS),
        default="auto",
        show_default=True,
        help=help,
    )


def resolve_network_backend(backend: str) -> str:
    """netns or loopback for --backend; netns without root is a one-line error."""
    from edgegossip import exit_codes
    from edgegossip.cli.render import fail
    from edgegossip.emulate.netns import is_root

    if backend == "auto":
        return "netns" if is_root() else "loopback"
    if backend == "netns" and not is_root():
        fail(
            "network namespaces need root; rerun as root or add --backend loopback "
            "(the same processes on 127.0.0.0/8, loss injected in the receive path)",
            exit_codes.NEEDS_ROOT,
        )
    return backend


__all__ = ["choice", "default", "network_backend", "resolve_network_backend", "setting"]
