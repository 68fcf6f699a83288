"""The agent's configuration: one frozen dataclass, read from TOML, validated with one-line
errors that name the bad key. Each setting is declared once, below, with its section, default,
allowed values and help (field metadata); the TOML sections (SECTIONS), the allowed values
(CHOICES) and their checks, the fleet's per-device rules and the CLI's choices derive from it.
Sections: [agent] [train] [net] [data] (data/device.py) [disk] (storage.py) [control]
(control/server.py) [metrics] (control/prometheus.py).
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Callable, Collection, Mapping
from dataclasses import MISSING, dataclass, field, fields
from pathlib import Path
from typing import Any

import tomli_w

from edgegossip import algorithms, models, transport
from edgegossip.algorithms import NAMES as ALGORITHMS
from edgegossip.algorithms import attack
from edgegossip.dataplane import congestion, payload, wire
from edgegossip.errors import UsageError
from edgegossip.paths import read_regular

PARTITIONS = ("iid", "dirichlet", "classes")  # data/partition.py
SOURCES = ("mnist", "fashion-mnist", "file")
BACKENDS = ("numpy", "onnx")
DEADLINES = ("fixed", "adaptive")


class ConfigError(UsageError, ValueError):
    pass


@dataclass(frozen=True)
class Peer:
    id: int
    host: str
    port: int


@dataclass(frozen=True)
class Range:
    """The numbers a setting allows: lo..hi, either end open (excluded) or absent."""

    lo: float | None = None
    hi: float | None = None
    lo_open: bool = False
    hi_open: bool = False

    def __contains__(self, v: float) -> bool:
        lo_ok = self.lo is None or (v > self.lo if self.lo_open else v >= self.lo)
        return lo_ok and (self.hi is None or (v < self.hi if self.hi_open else v <= self.hi))

    def text(self) -> str:
        """'must be ...', as a person says it."""
        if self.hi is None:
            if self.lo == 0 and self.lo_open:
                return "must be positive"
            return f"must be {'>' if self.lo_open else '>='} {self.lo:g}"
        return (
            f"must be in {'(' if self.lo_open else '['}{self.lo:g}, {self.hi:g}"
            f"{')' if self.hi_open else ']'}"
        )


POSITIVE = Range(0, lo_open=True)
NON_NEGATIVE = Range(0)
FRACTION = Range(0, 1)


def setting(
    section: str,
    default=None,
    help: str = "",
    choices: tuple[str, ...] = (),
    factory=None,
    required: bool = False,
    scope: str = "device",
    range: Range | None = None,
):
    """A field of AgentConfig: its TOML section, default, allowed values (choices, or a numeric
    range), help, and scope in a fleet: "device" (a profile or a device's overrides may set
    it), "fleet" (every device must share it: the chunk plan, the model, the algorithm's rule)
    or "managed" (the fleet tooling sets it, never by hand)."""
    md = {"section": section, "help": help, "choices": choices, "scope": scope, "range": range}
    if required:
        return field(metadata=md)
    if factory is not None:
        return field(default_factory=factory, metadata=md)
    return field(default=default, metadata=md)


@dataclass(frozen=True)
class AgentConfig:
    id: int = setting(
        "agent", required=True, help="this worker's id, 0 .. workers - 1", scope="managed"
    )
    listen: str = setting(
        "agent", required=True, help="HOST:PORT this agent receives datagrams on", scope="managed"
    )
    peers: tuple[Peer, ...] = setting(
        "agent", (), "every other agent of the fleet, ID@HOST:PORT", scope="managed"
    )
    fleet: int = setting(
        "agent",
        1,
        "fleet id carried in every datagram",
        scope="managed",
        range=Range(0, 2**32, hi_open=True),
    )
    key: str = setting(
        "agent", "", "fleet secret; every link key is derived from it", scope="managed"
    )
    keys: str = setting(
        "agent",
        "",
        "keyfile of this device's links (`edgegossip keys init`); when set, `key` is not used",
        scope="managed",
    )
    output: str = setting(
        "agent", "agent-out", "checkpoints and metrics.jsonl go here", scope="managed"
    )
    clock_wait_s: float = setting(
        "agent",
        30.0,
        "at start, wait at most this long for a synchronised clock, then train anyway (clock.py)",
        range=NON_NEGATIVE,
    )
    algorithm: str = setting(
        "train", algorithms.DEFAULT, "the algorithm (algorithms/)", ALGORITHMS, scope="fleet"
    )
    model: str = setting(
        "train",
        "mlp",
        "the model: mlp, logreg, cnn (models/), or a compiled model's folder",
        scope="fleet",
    )
    model_digest: str = setting(
        "train",
        "",
        "the SHA-256 of the compiled model's manifest this device must hold; set by the fleet "
        "tooling (the agent refuses another model, and its link keys are bound to this one)",
        scope="managed",
    )
    backend: str = setting("train", "numpy", "loss and gradient in NumPy or onnxruntime", BACKENDS)
    workers: int = setting(
        "train", 4, "fleet size, for sharding the data", scope="fleet", range=Range(1)
    )
    partition: str = setting(
        "train",
        "iid",
        "how the data set is cut across the fleet (data/partition.py)",
        PARTITIONS,
        scope="fleet",
    )
    beta: float = setting(
        "train",
        0.5,
        "partition dirichlet's concentration: small gives each device few classes",
        scope="fleet",
        range=POSITIVE,
    )
    classes_per_worker: int = setting(
        "train",
        2,
        "partition classes: the classes each device holds",
        scope="fleet",
        range=Range(1),
    )
    seed: int = setting(
        "train", 0, "seed of the shared initialisation and the shards", scope="fleet"
    )
    batch: int = setting("train", 32, "examples per local step", range=Range(1))
    lr: float = setting("train", 0.001, "learning rate", range=POSITIVE)
    momentum: float = setting("train", 0.99, "Nesterov momentum", range=Range(0, 1, hi_open=True))
    p: float = setting(
        "train", 1 / 32, "exchange probability per step (gossip)", scope="fleet", range=FRACTION
    )
    alpha: float = setting(
        "train", 0.5, "Elastic Gossip moving rate", scope="fleet", range=FRACTION
    )
    slices: int = setting(
        "train",
        1,
        "an exchange carries one of this many slices of the model, in turn: 1/slices of the "
        "bytes, each parameter exchanged at p / slices (Elastic Gossip)",
        scope="fleet",
        range=Range(1, 64),
    )
    max_steps: int = setting("train", 0, "0: no step limit", range=NON_NEGATIVE)
    duration_s: float = setting("train", 0.0, "0: no time limit", range=NON_NEGATIVE)
    phase: str = setting(
        "train",
        "train",
        "train: local steps and exchanges; closing: no more training, every step an exchange "
        "(p = 1), so that each device's own model comes to the fleet's average "
        "(`fleet set phase=closing`)",
        ("train", "closing"),
        scope="fleet",
    )
    closing_s: float = setting(
        "train",
        0.0,
        "with duration_s: its last closing_s seconds in phase closing",
        range=NON_NEGATIVE,
        scope="fleet",
    )
    # clip: a stolen device's rounds move an honest model a bounded step (docs/security.md);
    # none costs one pass over each round less, for a fleet whose every device is trusted
    bound: str = setting(
        "train",
        "clip",
        "how far one peer's round may move the model: clip (protocol/bound.py) or none",
        ("clip", "none"),
    )
    attack: str = setting(
        "train",
        "none",
        "emulate --hostile: what this device sends instead of its model (algorithms/attack.py)",
        attack.NAMES,
        scope="managed",
    )
    eval_every: int = setting("train", 100, "steps between held-out evaluations", range=Range(1))
    record_every_s: float = setting(
        "disk",
        1.0,
        "and at least this long between two (each one a metrics record)",
        range=NON_NEGATIVE,
    )
    eval_examples: int = setting("train", 2000, "size of the held-out slice")
    rps_period: int = setting(
        "train", 8, "local steps between RPS iterations", scope="fleet", range=Range(1)
    )
    inputs: int = setting(
        "train", 784, "features per example (mlp, logreg)", scope="fleet", range=Range(1)
    )
    classes: int = setting("train", 10, "labels 0 .. classes - 1", scope="fleet", range=Range(2))
    transport: str = setting(
        "net",
        "udp",
        "udp or zmq (allreduce always uses ZeroMQ TCP)",
        transport.NAMES,
        scope="fleet",
    )
    chunk_bytes: int = setting(
        "net", factory=wire.default_chunk_bytes, help="payload bytes a datagram", scope="fleet"
    )
    # int8: the same accuracy as float32 at the same epochs in simulation, a quarter of the bytes,
    # and on 20 Mbit/s links the fleet at 95% before local training (docs/results.md, payloads and
    # `bench overhead`)
    payload: str = setting(
        "net", "int8", "how parameters travel (dataplane/payload.py)", payload.NAMES
    )
    rate_mbps: float = setting(
        "net", 20.0, "send pacing, megabits per second on the link (frames)", range=POSITIVE
    )
    # aimd: on one 4 Mbit/s Wi-Fi channel, 8 agents stop flooding it (docs/results.md, "Sharing
    # the air")
    congestion: str = setting(
        "net",
        "aimd",
        "how the send pace follows what the links deliver, up to rate_mbps (dataplane/congestion)",
        congestion.NAMES,
    )
    deadline_s: float = setting(
        "net", 10.0, "an exchange gives up on missing chunks after this", range=POSITIVE
    )
    peer_wait_s: float = setting(
        "net",
        15.0,
        "at start, wait at most this long for every peer's name to resolve, then train anyway"
        " (the rest resolve in the background)",
        range=NON_NEGATIVE,
    )
    deadline: str = setting(
        "net", "fixed", "fixed, or adaptive: per link, from its transfer times", DEADLINES
    )
    deadline_min_s: float = setting(
        "net", 0.2, "adaptive: a link's shortest deadline", range=POSITIVE
    )
    deadline_max_s: float = setting("net", 120.0, "adaptive: a link's longest deadline")
    inject_loss: float = setting(
        "net",
        0.0,
        "loopback emulation only: drop this fraction on receive",
        range=Range(0, 1, hi_open=True),
    )
    inject_loss_model: str = setting(
        "net",
        "bernoulli",
        "loopback emulation only: how the injected loss falls (transport/lossmodel.py)",
        ("bernoulli", "gilbert-elliott"),
    )
    inject_burst: float = setting(
        "net",
        1.0,
        "loopback emulation only: the injected loss's mean burst, in datagrams of one sender",
        range=Range(1),
    )
    gso: bool = setting("net", True, "udp: send runs of datagrams as one UDP GSO buffer")
    encrypt: bool = setting(
        "net", False, "encrypt payloads too; receive only encrypted ones", scope="fleet"
    )
    source: str = setting(
        "data",
        "mnist",
        "mnist, fashion-mnist: this worker's shard; file: path below",
        SOURCES,
        scope="fleet",
    )
    path: str = setting("data", "", "this device's own .npz or .csv", scope="managed")
    label_column: str = setting("data", "", "csv: header name or index of the label column")
    eval_fraction: float = setting(
        "data",
        0.1,
        "held out from a file without x_eval/y_eval",
        range=Range(0, 1, lo_open=True, hi_open=True),
    )
    checkpoint_every_s: float = setting(
        "disk",
        600.0,
        "seconds between checkpoints, the most a power cut loses; 0: by steps",
        range=NON_NEGATIVE,
    )
    checkpoint_every: int = setting(
        "disk", 0, "steps between checkpoints too; 0: by time only", range=NON_NEGATIVE
    )
    budget_mb: float = setting(
        "disk",
        200.0,
        "most the output folder may hold: two checkpoints and metrics.jsonl",
        range=POSITIVE,
    )
    endpoint: str = setting(
        "control", "", "HOST:PORT of the CURVE control socket; empty: none", scope="managed"
    )
    server_key: str = setting(
        "control", "", "this agent's CURVE secret certificate (zmq.auth)", scope="managed"
    )
    client_keys: str = setting(
        "control", "", "folder of the public certificates allowed to ask", scope="managed"
    )
    allow_from: str = setting(
        "control",
        "",
        "addresses or networks (a,b/24) that may connect; empty: any (CURVE keys still decide)",
        scope="managed",
    )
    metrics_endpoint: str = setting(
        "metrics",
        "",
        "HOST:PORT of the Prometheus /metrics endpoint (plain HTTP); empty: none",
        scope="managed",
    )
    metrics_allow_from: str = setting(
        "metrics",
        "",
        "addresses or networks (a,b/24) whose scrapes are answered; empty: any",
        scope="managed",
    )

    def __post_init__(self) -> None:
        # a config built in code is checked as one read from a file is
        validate(self)

    @property
    def listen_endpoint(self) -> tuple[str, int]:
        return _endpoint(self.listen, "agent.listen")


SECTIONS: dict[str, tuple[str, ...]] = {}
for _f in fields(AgentConfig):
    SECTIONS[_f.metadata["section"]] = (*SECTIONS.get(_f.metadata["section"], ()), _f.name)
CHOICES = {f.name: f.metadata["choices"] for f in fields(AgentConfig) if f.metadata["choices"]}
RANGES: dict[str, Range] = {
    f.name: f.metadata["range"] for f in fields(AgentConfig) if f.metadata["range"]
}
HELP = {f.name: f.metadata["help"] for f in fields(AgentConfig)}
FLEET_WIDE = tuple(f.name for f in fields(AgentConfig) if f.metadata["scope"] == "fleet")
MANAGED = tuple(f.name for f in fields(AgentConfig) if f.metadata["scope"] == "managed")
# what a running agent takes on SIGHUP without a restart, whatever its algorithm (agent/reload.py;
# a protocol may take more: Protocol.live_settings), so `fleet set` reloads instead of restarting
LIVE = frozenset({"phase"})
# the sections a fleet shares in fleet.toml: those with a setting that is not the tooling's
SHARED_SECTIONS = tuple(s for s, keys in SECTIONS.items() if set(keys) - set(MANAGED))


def default(name: str):
    """Setting `name`'s default, for the simulator, the emulator and the CLI."""
    f = next(f for f in fields(AgentConfig) if f.name == name)
    if f.default is MISSING and callable(f.default_factory):
        return f.default_factory()
    return f.default


def _one_of(values: tuple[str, ...]) -> str:
    return values[0] if len(values) == 1 else f"{', '.join(values[:-1])} or {values[-1]}"


# Keys that act only under some settings: {key: (setting, the values it acts under)}. A key given
# where it has no effect is refused, naming both keys: a silently ignored path trains on MNIST.
APPLIES_WHEN = {
    "path": ("source", ("file",)),
    "label_column": ("source", ("file",)),
    "eval_fraction": ("source", ("file",)),
    "partition": ("source", tuple(s for s in SOURCES if s != "file")),
    "beta": ("partition", ("dirichlet",)),
    "classes_per_worker": ("partition", ("classes",)),
    **{
        k: ("algorithm", algorithms.acting(k))
        for a in algorithms.REGISTRY.values()
        for k in a.settings
    },
    "deadline_min_s": ("deadline", ("adaptive",)),
    "deadline_max_s": ("deadline", ("adaptive",)),
    "gso": ("transport", ("udp",)),
    "inject_burst": ("inject_loss_model", ("gilbert-elliott",)),
}


# A fleet secret anyone can read is no secret: the placeholders this project ever shipped (and its
# old default) are refused, and so is anything short enough to guess.
PUBLIC_SECRETS = ("edgegossip", "replace with a long random fleet secret", "a long fleet secret")
MIN_SECRET = 16


def secret_problem(key: str) -> str | None:
    """Why `key` cannot be a fleet secret, or None."""
    if not key:
        return "no fleet secret: set agent.key (e.g. `openssl rand -hex 16`) or agent.keys"
    if key.strip().lower() in PUBLIC_SECRETS:
        return f"agent.key {key!r} is a published placeholder; set a secret of your own"
    if len(key) < MIN_SECRET:
        return f"agent.key is {len(key)} characters; a fleet secret needs at least {MIN_SECRET}"
    return None


def is_network(text) -> bool:
    """An IPv4 or IPv6 address or network (CIDR), as the control socket's filter takes it."""
    import ipaddress

    try:
        ipaddress.ip_network(text, strict=False)
    except (TypeError, ValueError):
        return False
    return True


def section_of(key: str) -> str:
    return next(s for s, keys in SECTIONS.items() if key in keys)


def acts(key: str, value_of: Callable[[str], Any]) -> bool:
    """Whether setting `key` acts, the others' values as value_of gives them (APPLIES_WHEN)."""
    return key not in APPLIES_WHEN or value_of(APPLIES_WHEN[key][0]) in APPLIES_WHEN[key][1]


def sectioned(flat: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """Settings by name, as an agent.toml or a fleet.toml's sections hold them."""
    doc: dict[str, dict[str, Any]] = {}
    for key, value in flat.items():
        doc.setdefault(section_of(key), {})[key] = value
    return doc


def check_effective(c: AgentConfig, given) -> None:
    """Refuse a key in `given` that c's settings ignore (APPLIES_WHEN)."""
    for key in given:
        if key in APPLIES_WHEN:
            setting, values = APPLIES_WHEN[key]
            now = getattr(c, setting)
            if now not in values:
                raise ConfigError(
                    f"{section_of(key)}.{key} given but {section_of(setting)}."
                    f"{setting} is {now!r}: it acts only when {setting} is "
                    f"{' or '.join(repr(v) for v in values)}"
                )
    if "key" in given and c.keys:
        raise ConfigError("agent.key given but agent.keys is set: link keys come from the keyfile")


def _endpoint(text: str, key: str) -> tuple[str, int]:
    host, sep, port = str(text).rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError(f"{key}: {text!r} is not HOST:PORT")
    return host, int(port)


def _peer(text: str, key: str) -> Peer:
    ident, sep, rest = str(text).partition("@")
    if not sep or not ident.isdigit():
        raise ConfigError(f"{key}: {text!r} is not ID@HOST:PORT")
    host, port = _endpoint(rest, key)
    return Peer(int(ident), host, port)


def from_dict(doc: dict) -> AgentConfig:
    types = {f.name: str(f.type) for f in fields(AgentConfig)}  # annotations are strings here
    values: dict = {}
    for section, body in doc.items():
        if section not in SECTIONS:
            raise ConfigError(f"{section}: unknown section (expected {', '.join(SECTIONS)})")
        if not isinstance(body, dict):
            raise ConfigError(f"{section}: must be a table")
        for k, v in body.items():
            if k not in SECTIONS[section]:
                raise ConfigError(f"{section}.{k}: unknown key")
            values[k] = _coerce(f"{section}.{k}", types[k], v)
    for required in ("id", "listen"):
        if required not in values:
            raise ConfigError(f"agent.{required}: missing")
    if "peers" in values:
        values["peers"] = tuple(_peer(p, "agent.peers") for p in values["peers"])
    cfg = AgentConfig(**values)  # validated as it is made
    check_effective(cfg, values)
    return cfg


def _coerce(key: str, typ: str, v):
    if typ == "bool" and isinstance(v, bool):
        return v
    if typ == "int" and isinstance(v, int) and not isinstance(v, bool):
        return v
    if typ == "float" and isinstance(v, (int, float)) and not isinstance(v, bool):
        return float(v)
    if typ == "str" and isinstance(v, str):
        return v
    if typ.startswith("tuple") and isinstance(v, list) and all(isinstance(x, str) for x in v):
        return v
    raise ConfigError(f"{key}: expected {typ.split('[')[0]}, got {type(v).__name__} {v!r}")


def check_overrides(settings: Mapping[str, Any], reserved: Collection[str] = ()) -> None:
    """Settings a run gives its agents by name (an emulated fleet's): ConfigError, one line,
    for a name that is no setting, or is the fleet tooling's (scope "managed") or the run's own
    (reserved). Their values are checked as each agent's config is made."""
    for name in settings:
        if name not in HELP:
            raise ConfigError(f"{name}: no such setting (docs/configuration.md lists them)")
        if name in MANAGED or name in reserved:
            raise ConfigError(f"{name}: the fleet sets it, not a run's settings")


def check_values(settings: Mapping[str, Any]) -> None:
    """Each setting's value against its allowed values and range: ConfigError, one line naming
    the setting, for the first that is outside them."""
    for name, v in settings.items():
        if name in CHOICES and v not in CHOICES[name]:
            raise ConfigError(f"{name}: must be {_one_of(CHOICES[name])}")
        if name in RANGES and v not in RANGES[name]:
            raise ConfigError(f"{name}: {RANGES[name].text()}")


def closing_problem(algorithm: str, closing: bool) -> str | None:
    """Why `algorithm` can have no closing phase (train.phase), or None; simulate and emulate
    refuse their --closing by it too."""
    if closing and not algorithms.get(algorithm).datagrams:
        return f"{algorithm} has no exchanges to close with"
    return None


def payload_problem(algorithm: str, name: str) -> str | None:
    """Why `algorithm` cannot send payload `name`, or None: a relative payload needs an
    algorithm that sends the model itself (Algorithm.sends_model)."""
    codec = payload.CODECS.get(name)
    if codec is None or not codec.relative or algorithms.get(algorithm).sends_model:
        return None
    able = " or ".join(n for n in algorithms.NAMES if algorithms.get(n).sends_model)
    return (
        f"{name} sends the model's distance from its initial one, which {algorithm} does not "
        f"exchange: use it with {able}"
    )


def validate(c: AgentConfig) -> None:
    def need(ok: bool, key: str, msg: str) -> None:
        if not ok:
            raise ConfigError(f"{key}: {msg}")

    for name, allowed in CHOICES.items():
        need(
            getattr(c, name) in allowed, f"{section_of(name)}.{name}", f"must be {_one_of(allowed)}"
        )
    for name, allowed_range in RANGES.items():
        need(getattr(c, name) in allowed_range, f"{section_of(name)}.{name}", allowed_range.text())
    need(
        bool(re.fullmatch(r"|[0-9a-f]{64}", c.model_digest)),
        "train.model_digest",
        "must be a SHA-256 in hex",
    )
    need(
        models.known(c.model) or bool(c.model_digest),  # a device's model is checked at start
        "train.model",
        f"must be {models.CHOICES_TEXT}",
    )
    problem = models.backend_problem(c.model, c.backend)
    need(problem is None, "train.backend", str(problem))
    need(c.source != "file" or bool(c.path), "data.path", "needed when data.source is file")
    problem = payload_problem(c.algorithm, c.payload)
    need(problem is None, "net.payload", str(problem))
    problem = models.shape_problem(c.model, c.inputs, c.classes)
    need(problem is None, "train.model", str(problem))
    need(0 <= c.id < c.workers, "agent.id", f"must be in 0..{c.workers - 1}")
    for key, closing in (("train.phase", c.phase == "closing"), ("train.closing_s", c.closing_s)):
        problem = closing_problem(c.algorithm, bool(closing))
        need(problem is None, key, str(problem))
    need(
        c.closing_s <= c.duration_s,
        "train.closing_s",
        "is the end of train.duration_s: at most train.duration_s",
    )
    need(
        c.deadline_min_s <= c.deadline_max_s,
        "net.deadline_min_s",
        "must be at most net.deadline_max_s",
    )
    try:
        wire.check_chunk_bytes(c.chunk_bytes)
    except ValueError as e:
        raise ConfigError(f"net.chunk_bytes: {e}") from None
    _validate_endpoints(c, need)
    _validate_peers(c, need)


def _validate_endpoints(c: AgentConfig, need) -> None:
    _endpoint(c.listen, "agent.listen")
    if c.endpoint:
        _endpoint(c.endpoint, "control.endpoint")
        need(bool(c.server_key), "control.server_key", "needed when control.endpoint is set")
        need(bool(c.client_keys), "control.client_keys", "needed when control.endpoint is set")
    if c.metrics_endpoint:
        _endpoint(c.metrics_endpoint, "metrics.metrics_endpoint")
    for key, nets in (
        ("control.allow_from", c.allow_from),
        ("metrics.metrics_allow_from", c.metrics_allow_from),
    ):
        need(
            all(is_network(n.strip()) for n in nets.split(",") if n.strip()),
            key,
            "must be addresses or networks, comma-separated",
        )


def _validate_peers(c: AgentConfig, need) -> None:
    ids = [p.id for p in c.peers]
    need(len(set(ids)) == len(ids), "agent.peers", "duplicate peer id")
    need(c.id not in ids, "agent.peers", "lists this agent itself")
    need(all(0 <= i < c.workers for i in ids), "agent.peers", f"ids must be in 0..{c.workers - 1}")
    wants = algorithms.get(c.algorithm).peers
    if wants == "all":
        need(
            len(c.peers) == c.workers - 1,
            "agent.peers",
            f"{c.algorithm} needs all {c.workers - 1} other agents",
        )
    elif wants == "some":  # gossip copes with ids a fleet has retired
        need(len(c.peers) >= 1, "agent.peers", f"{c.algorithm} needs at least one peer")


MAX_CONFIG_BYTES = 1 << 20  # an agent.toml is a few KB; a peer list of thousands fits


def load(path: str | Path) -> AgentConfig:
    try:
        doc = tomllib.loads(read_regular(path, MAX_CONFIG_BYTES).decode())
    except OSError as e:
        raise ConfigError(f"{path}: {e.strerror}") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: not UTF-8 text") from None
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{path}: not valid TOML ({e})") from None
    return from_dict(doc)


def to_toml(c: AgentConfig) -> str:
    """Write a config back as TOML (used by `emulate` to configure each agent)."""

    def val(v):
        if isinstance(v, tuple):  # the peers, as a file gives them
            return [f"{p.id}@{p.host}:{p.port}" for p in v]
        return v

    def written(k: str) -> bool:
        return not (k == "key" and c.keys) and acts(k, lambda name: getattr(c, name))

    doc = {s: {k: val(getattr(c, k)) for k in keys if written(k)} for s, keys in SECTIONS.items()}
    return tomli_w.dumps(doc)
