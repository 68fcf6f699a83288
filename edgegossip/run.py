"""What a run is, described once for every tool that runs a fleet: `simulate`, `emulate`, `bench
overhead` and the lab each take a Run and add only where and how they run it (simulate.py's
Simulation, emulate/fleet.py's FleetSpec, lab/machines.py). Offering an agent setting on all of
them is its declaration in config.py and its use: a Run carries any setting by name, checked there.

    Run(algorithm, nodes, network, devices, data, epochs, duration_s, settings)

The fleet's size is `nodes` everywhere (simulate's workers, the lab's devices; an agent's own
config calls it train.workers, for sharding its data).

A run's network: `simulate` draws its losses from it, `emulate` and `bench overhead` have the
kernel (or the receive path) apply it, and their summaries and reports name it.

    Network(loss, loss_model, burst, trace, rate, slow, schedule)

- loss, loss_model, burst, trace: how each link loses packets (transport/lossmodel.py):
  independently, in Gilbert-Elliott bursts of `burst` on average, or as a trace file replays
  them. The loss model is always named, never guessed from the burst length.
- rate: each link's cap, tc's words ("20mbit"), None uncapped; slow: (node, rate) pairs, nodes
  whose links are capped at their own rate.
- schedule: emulate/schedule.py's events (links changing, devices coming and going).
- medium: switch, each node's link its own (capped at rate); or wifi, one channel of rate that
  every station shares and every frame between two stations crosses twice, through an access
  point (emulate/netns.py, Lan._add_air).

Each part is checked where it is made (ValueError, one line naming the option): a Network that
exists is one a tool can run.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar

from edgegossip import config
from edgegossip.transport.lossmodel import LossModel

RATE_UNITS = (("gbit", 1000.0), ("mbit", 1.0), ("kbit", 0.001))
MEDIA = ("switch", "wifi")


def rate_to_mbps(rate: str | None) -> float | None:
    """A link rate in tc's words (20mbit, 500kbit, 1gbit) in megabits per second; None for
    none."""
    if not rate:
        return None
    r = rate.strip().lower()
    for unit, mult in RATE_UNITS:
        if r.endswith(unit):
            try:
                return float(r[: -len(unit)]) * mult
            except ValueError:
                break
    raise ValueError(f"--rate {rate!r}: write it as e.g. 20mbit, 500kbit or 1gbit")


def link_cap(text: str) -> str | None:
    """A link cap as the command line gives it: a rate (e.g. 20mbit), or None for "none"
    (uncapped). ValueError, with the one line to show, for anything else."""
    if text.strip().lower() == "none":
        return None
    rate_to_mbps(text)
    return text


def slow_links(values: tuple[str, ...], nodes: int) -> tuple[tuple[int, str], ...]:
    """--slow NODE:RATE values as (node, rate) pairs, one per node, in node order."""
    out = {}
    for v in values:
        node, _, rate = v.partition(":")
        try:
            i = int(node)
            if not 0 <= i < nodes or not rate_to_mbps(rate):
                raise ValueError
        except ValueError:
            raise ValueError(
                f"--slow {v}: want NODE:RATE with NODE in 0..{nodes - 1} and RATE like 2mbit"
            ) from None
        out[i] = rate
    return tuple(sorted(out.items()))


# A device's CPU share, in cores of this machine: at least the kernel's least CFS quota (1 ms)
# over the period emulate/cgroups.py sets (100 ms), at most far more than any machine here has.
MIN_SHARE = 0.01
MAX_SHARE = 64.0


def cpu_shares(values: tuple[str, ...], nodes: int) -> tuple[tuple[int, float], ...]:
    """--cpu NODES:SHARE values as (node, share of one core) pairs in node order, NODES one node
    (3), a range (0-7) or all; a later value wins for a node named twice."""
    out: dict[int, float] = {}
    for v in values:
        which, _, share = v.rpartition(":")
        try:
            cores = float(share)
            first, _, last = which.partition("-")
            span = range(nodes) if which == "all" else range(int(first), int(last or first) + 1)
            if not MIN_SHARE <= cores <= MAX_SHARE or not span or span[0] < 0 or span[-1] >= nodes:
                raise ValueError
        except ValueError:
            raise ValueError(
                f"--cpu {v}: want NODES:SHARE, NODES a node, a range (0-7) or all within "
                f"0..{nodes - 1}, SHARE the cores it gets (0.25: a quarter of one; "
                f"{MIN_SHARE:g} to {MAX_SHARE:g})"
            ) from None
        out.update(dict.fromkeys(span, cores))
    return tuple(sorted(out.items()))


@dataclass(frozen=True)
class Device:
    """One emulated device beyond its agent: its board (emulate/profiles.py), if the run named
    one, and the limits the kernel holds it to (emulate/cgroups.py), None where it does not."""

    board: str | None = None
    cpu: float | None = None  # cores of this machine, MIN_SHARE to MAX_SHARE
    memory_mb: int | None = None


@dataclass(frozen=True)
class Network:
    loss: float = 0.0  # the fraction of each link's packets lost
    loss_model: str = "bernoulli"  # KINDS
    burst: float = 1.0  # gilbert-elliott: the mean burst, in packets of one link
    trace: str = ""  # trace: the file of per-packet outcomes
    rate: str | None = None  # each link's cap, "20mbit"; None: uncapped
    slow: tuple[tuple[int, str], ...] = ()  # (node, rate): these nodes' links capped apart
    schedule: tuple = ()  # emulate/schedule.py's events
    medium: str = "switch"  # MEDIA

    def __post_init__(self) -> None:
        if self.medium not in MEDIA:
            raise ValueError(f"--medium {self.medium!r}: choose {' or '.join(MEDIA)}")
        if self.medium == "wifi" and not self.rate:
            raise ValueError("--medium wifi shares one channel's rate: give --rate")
        if self.loss_model != "gilbert-elliott" and self.burst != 1.0:
            raise ValueError("--burst is the mean burst of --loss-model gilbert-elliott: name it")
        rate_to_mbps(self.rate)
        for _, rate in self.slow:
            rate_to_mbps(rate)
        self.links().check()
        if self.loss_model == "trace":  # the trace says the loss
            object.__setattr__(self, "loss", round(self.links().mean_loss, 4))

    def links(self) -> LossModel:
        """How each link loses its packets."""
        return LossModel(self.loss_model, self.loss, self.burst, trace=self.trace)

    def rate_of(self, node: int) -> str | None:
        """Node's link cap: its own if it is slow, else the network's (on Wi-Fi, the channel's:
        what the node can send at when it has the air to itself)."""
        return dict(self.slow).get(node, self.rate)

    def goodput_mbps(self, node: int) -> float | None:
        """What node can deliver to another node at most, alone on the network: its link's
        rate on a switch; on Wi-Fi half of it, each frame crossing the air twice."""
        mbps = rate_to_mbps(self.rate_of(node))
        if mbps is None:
            return None
        return mbps / 2 if self.medium == "wifi" else mbps

    def described(self) -> dict:
        """What a result row or summary says of the network: the loss, and the loss model's
        parameters where they are not the default's."""
        out: dict = {"loss": self.loss}
        if self.loss_model != "bernoulli":
            out.update(loss_model=self.loss_model, burst=self.burst)
        if self.medium != "switch":
            out.update(medium=self.medium)
        return out


# The agent settings a run takes on the command line of every tool that runs one (cli/options.py,
# run_settings), in this order: offering one more everywhere is its name here, its declaration
# in config.py and its use. simulate models those of SIMULATED (and refuses any other), the lab
# those of LAB (its --split cuts the data).
RUN_SETTINGS = (
    "model",
    "p",
    "alpha",
    "slices",
    "lr",
    "momentum",
    "batch",
    "partition",
    "beta",
    "classes_per_worker",
    "bound",
) + ("seed", "payload", "chunk_bytes", "transport", "congestion", "deadline", "checkpoint_every_s")
SIMULATED = frozenset(RUN_SETTINGS) - {
    "batch",
    "bound",
    "transport",
    "congestion",
    "deadline",
    "checkpoint_every_s",
}
LAB = frozenset(RUN_SETTINGS) - {"partition", "beta", "classes_per_worker", "seed"}


@dataclass(frozen=True)
class Run:
    """One run of a fleet: what it runs (algorithm), how many devices (nodes) with which boards
    and limits (devices, where set), its network, what it trains on (data: a data set `data
    fetch` knows, or the user's FILE.npz or DIR, data/own.py), its length (epochs over each
    device's shard, or duration_s) and `settings`, every other agent setting by name, as an
    agent.toml would set them (config.py: their defaults, allowed values and ranges). Run.of
    takes all of them in one set of keywords; a tool's class adds its own fields and the
    settings it sets itself (RESERVED) or otherwise than an agent does (DEFAULTS)."""

    algorithm: str = config.default("algorithm")
    nodes: int = config.default("workers")
    network: Network = Network()
    devices: tuple[Device, ...] = ()
    data: str = "mnist"
    epochs: float = 0.0
    duration_s: float = 0.0
    settings: Mapping[str, Any] = field(default_factory=dict)

    RESERVED: ClassVar[frozenset[str]] = frozenset()
    DEFAULTS: ClassVar[Mapping[str, Any]] = {}

    def __post_init__(self) -> None:
        config.check_overrides(self.settings, self.RESERVED)

    @classmethod
    def of(cls, settings: Mapping[str, Any] | None = None, **given: Any):
        """A run of keywords: its fields by name, every other an agent setting, as are those of
        `settings` (where a name is both: an agent's backend is its training's)."""
        own = {f.name for f in fields(cls)} - {"settings"}
        return cls(
            **{k: v for k, v in given.items() if k in own},
            settings={**{k: v for k, v in given.items() if k not in own}, **(settings or {})},
        )

    def setting(self, name: str) -> Any:
        """An agent setting as this run's agents run it."""
        return self.settings.get(name, self.DEFAULTS.get(name, config.default(name)))

    @property
    def model(self) -> str:
        return self.setting("model")

    def device(self, i: int) -> Device:
        """Node i's board and limits (none set: Device())."""
        return self.devices[i] if i < len(self.devices) else Device()

    def check(self) -> None:
        """The settings' values: ConfigError, one line naming the setting, for what no agent
        would run."""
        config.check_values({"algorithm": self.algorithm, **self.settings})
