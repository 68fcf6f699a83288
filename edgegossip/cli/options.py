"""Click options derived from the agent's settings (config.py): a setting's choices, default and
help are declared once there, and every command that offers it asks here."""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import click

from edgegossip import config
from edgegossip.config import default
from edgegossip.run import MEDIA, RUN_SETTINGS


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


def nodes(
    most: int, least: int = 1, default: int | None = 4, alias: str = "--workers", dest="nodes"
):
    """--nodes: the fleet's size, one name on every command that takes it (run.Run.nodes), with
    the name the command had before (alias) kept."""
    return click.option(
        "--nodes",
        alias,
        dest,
        type=click.IntRange(least, most),
        default=default,
        required=default is None,
        show_default=default is not None,
        help="How many devices the fleet has.",
    )


def run_settings(offer: frozenset[str] | None = None, defaults: dict | None = None, **helps: str):
    """The options of the agent settings a run takes (run.RUN_SETTINGS; those of `offer`), each
    as config.py declares it but where `defaults` or `helps` say otherwise."""
    names = [n for n in RUN_SETTINGS if offer is None or n in offer]

    def wrap(f):
        for name in reversed(names):
            kw = {"help": helps[name]} if name in helps else {}
            if defaults and name in defaults:
                kw["default"] = defaults[name]
            f = setting("--" + name.replace("_", "-"), name, **kw)(f)
        return f

    return wrap


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


# The network's options (run.Network), each declared once: a command offers those it can run
# (network(...)) and network_of() makes the Network of what was given.
def _loss(default: str, help: str):
    return click.option("--loss", type=PROBABILITY, default=default, show_default=True, help=help)


def _loss_model(kinds: tuple[str, ...]):
    return click.option(
        "--loss-model",
        type=click.Choice(kinds),
        default="bernoulli",
        show_default=True,
        help="How each link loses --loss of its packets: independently, in bursts of --burst "
        "packets on average (gilbert-elliott)"
        + (", or as --trace replays them" if "trace" in kinds else "")
        + ".",
    )


_NETWORK_OPTIONS = {
    "burst": lambda: click.option(
        "--burst",
        type=click.FloatRange(min=1),
        default=1.0,
        show_default=True,
        help="gilbert-elliott: the mean burst length, in packets of one link.",
    ),
    "trace": lambda: click.option(
        "--trace",
        type=click.Path(dir_okay=False, exists=True),
        default=None,
        help="trace: a file of per-packet outcomes, 1 lost and 0 arrived (docs/usage.md).",
    ),
    "schedule": lambda: click.option(
        "--schedule",
        type=click.Path(dir_okay=False, exists=True, path_type=Path),
        default=None,
        help="Events at given times: a link's rate or loss changes or it is cut, a device goes "
        "off, comes back, joins or leaves (format: edgegossip/emulate/schedule.py, "
        "docs/usage.md).",
    ),
    "medium": lambda: click.option(
        "--medium",
        type=click.Choice(MEDIA),
        default="switch",
        show_default=True,
        help="switch: each node's link its own, capped at --rate; wifi: one channel of --rate "
        "that every station shares, each frame between two stations crossing it twice "
        "(through an access point); netns only.",
    ),
    "slow": lambda: click.option(
        "--slow",
        "slow",
        multiple=True,
        metavar="NODE:RATE",
        help="Cap node NODE's link at RATE instead (e.g. 3:2mbit); repeatable.",
    ),
}
NETWORK = ("loss", "loss_model", "burst", "trace", "schedule", "rate", "medium", "slow")


def network(
    offer: tuple[str, ...] = NETWORK, loss: str = "0.1", loss_help: str = "", rate: str = "20mbit"
):
    """The network's options a command offers, in NETWORK's order (--loss-model lists trace
    only where --trace is offered)."""
    from edgegossip.transport.lossmodel import KINDS

    kinds = KINDS if "trace" in offer else tuple(k for k in KINDS if k != "trace")
    made = {
        "loss": lambda: _loss(loss, loss_help or "Fraction of each link's packets lost."),
        "loss_model": lambda: _loss_model(kinds),
        **_NETWORK_OPTIONS,
        "rate": lambda: click.option(
            "--rate", default=rate, show_default=True, help="Link cap per node (tbf), or 'none'."
        ),
    }

    def wrap(f):
        for name in reversed([n for n in NETWORK if n in offer]):
            f = made[name]()(f)
        return f

    return wrap


def network_of(given: dict, nodes: int, backend: str = "netns"):
    # backend: netns or loopback for emulate's fleets, simulate for simulate's
    """The run.Network of the network options in `given` (taken out of it); ValueError, one
    line naming the option, for what cannot be run."""
    from edgegossip.run import Network, link_cap, slow_links

    def take(name, default=None):
        return given.pop(name, default)

    rate = take("rate")
    kind = take("loss_model", "bernoulli")
    burst = take("burst", 1.0)
    if kind == "trace" and backend == "loopback":
        raise ValueError("--loss-model trace replays in the kernel: it needs --backend netns")
    medium = take("medium", "switch")
    if medium == "wifi" and backend != "netns":
        raise ValueError("--medium wifi is a queue in the kernel: it needs --backend netns")
    return Network(
        loss=take("loss", 0.0),
        loss_model=kind,
        burst=burst,
        trace=take("trace") or "",
        rate=None if rate is None else link_cap(rate),
        slow=slow_links(take("slow", ()), nodes),
        schedule=_schedule(take("schedule"), nodes, backend),
        medium=medium,
    )


def _schedule(path: Path | None, nodes: int, backend: str) -> tuple:
    """The schedule's events; ValueError (one line, naming its line) for a bad one."""
    from edgegossip.emulate import schedule

    if path is None:
        return ()
    events = schedule.parse(path.read_text(), nodes, str(path))
    if backend != "netns" and any(e.action in schedule.LINK for e in events):
        raise ValueError(f"{path}: link events (rate, loss, cut, heal) need --backend netns")
    return tuple(events)


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
