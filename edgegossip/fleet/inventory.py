"""fleet.toml, the inventory: the fleet's shared agent settings and one entry per device.

    [fleet]      name, id (carried in every datagram), data_port, control_port, metrics_port
                 (each agent's Prometheus /metrics; 0: none), ssh_key, control_from (addresses
                 or networks the control sockets and /metrics answer; empty: any)
    [train] [net] [data] [disk]   agent settings shared by every device (config.py's keys)
    [[devices]]  name, address, user, port (SSH), id (agent id: assigned once, never reused),
                 profile (devices/profiles/NAME.toml), groups, overrides {key = value}, data
                 (this device's own data file, shipped by deploy)

Secrets never live here: they are in the fleet folder's secrets/ (secrets.py)."""

from __future__ import annotations

import re
import tomllib
from dataclasses import MISSING, dataclass, field, fields, replace
from pathlib import Path

import tomli_w

from edgegossip import algorithms, config
from edgegossip.errors import UsageError
from edgegossip.fleet.agentconf import render
from edgegossip.fleet.profiles import ProfileError, profile_settings

NAME = "fleet.toml"
# settings every device must share, and those the tooling sets: each setting's scope (config.py)
FLEET_WIDE, MANAGED = config.FLEET_WIDE, config.MANAGED
_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,62}")


class InventoryError(UsageError, ValueError):
    pass


@dataclass(frozen=True)
class Device:
    name: str
    address: str
    id: int
    user: str = "root"
    port: int = 22
    profile: str = ""
    groups: tuple[str, ...] = ()
    overrides: dict = field(default_factory=dict)
    data: str = ""


@dataclass(frozen=True)
class Fleet:
    root: Path
    name: str
    id: int
    devices: tuple[Device, ...]
    settings: dict  # {"train": {...}, "net": {...}, "data": {...}}
    data_port: int = 47000
    control_port: int = 47100
    metrics_port: int = 47200  # 0: no /metrics on the devices
    ssh_key: str = "secrets/ssh/id_ed25519"
    # addresses or networks the agents' control sockets accept connections from; empty: any
    control_from: tuple[str, ...] = ()

    @property
    def secrets(self) -> Path:
        return self.root / "secrets"

    def ssh_key_path(self) -> Path:
        p = Path(self.ssh_key).expanduser()
        return p if p.is_absolute() else self.root / p

    def device(self, name: str) -> Device:
        for d in self.devices:
            if d.name == name:
                return d
        raise InventoryError(f"{name}: no such device in {self.root / NAME}")

    def select(self, only: str | None) -> list[Device]:
        """Devices by name or group, comma separated; all of them when only is empty."""
        if not only:
            return list(self.devices)
        wanted = [w.strip() for w in only.split(",") if w.strip()]
        chosen = []
        for w in wanted:
            hits = [d for d in self.devices if d.name == w or w in d.groups]
            if not hits:
                raise InventoryError(f"--only: {w!r} is neither a device nor a group")
            chosen += [d for d in hits if d not in chosen]
        return chosen

    def with_settings(self, settings: dict) -> Fleet:
        return replace(self, settings=settings)


def load(root: str | Path) -> Fleet:
    root = Path(root)
    path = root / NAME
    try:
        with open(path, "rb") as f:
            doc = tomllib.load(f)
    except FileNotFoundError:
        raise InventoryError(
            f"{path}: no fleet here (make one with `edgegossip fleet init`)"
        ) from None
    except OSError as e:
        raise InventoryError(f"{path}: {e.strerror}") from None
    except tomllib.TOMLDecodeError as e:
        raise InventoryError(f"{path}: not valid TOML ({e})") from None
    return from_dict(root, doc)


def _head() -> dict[str, tuple[type, object]]:
    """[fleet]'s keys, their types and defaults (None: required), from Fleet's own fields."""
    out = {}
    for f in fields(Fleet):
        if f.name in ("root", "devices", "settings"):
            continue
        typ = {"str": str, "int": int}.get(str(f.type), list)
        out[f.name] = (typ, None if f.default is MISSING else f.default)
    return out


def _get(table: dict, key: str, typ: type, where: str, default=None):
    if key not in table:
        if default is None:
            raise InventoryError(f"{where}.{key}: missing")
        return default
    v = table[key]
    if typ is int and (isinstance(v, bool) or not isinstance(v, int)):
        raise InventoryError(f"{where}.{key}: expected an integer, got {v!r}")
    if not isinstance(v, typ):
        raise InventoryError(f"{where}.{key}: expected {typ.__name__}, got {v!r}")
    return v


HEAD = _head()


def from_dict(root: Path, doc: dict) -> Fleet:
    known = {"fleet", "devices", *config.SECTIONS} - {"agent"}
    for k in doc:
        if k not in known:
            raise InventoryError(f"{k}: unknown section (expected {', '.join(sorted(known))})")
    head = doc.get("fleet")
    if not isinstance(head, dict):
        raise InventoryError("fleet: missing [fleet] table")
    for k in head:
        if k not in HEAD:
            raise InventoryError(f"fleet.{k}: unknown key")
    settings = {s: dict(doc.get(s, {})) for s in config.SHARED_SECTIONS}
    for section, body in settings.items():
        for k in body:
            if k not in config.SECTIONS[section] or k in MANAGED:
                raise InventoryError(
                    f"{section}.{k}: unknown key"
                    + (" (set by the fleet tooling)" if k in MANAGED else "")
                )
    rows = doc.get("devices", [])
    if not isinstance(rows, list):
        raise InventoryError("devices: must be an array of tables ([[devices]])")
    devices = tuple(_device(r, i) for i, r in enumerate(rows))
    values = {k: _get(head, k, typ, "fleet", default) for k, (typ, default) in HEAD.items()}
    values["control_from"] = tuple(values["control_from"])
    fleet = Fleet(root=root, devices=devices, settings=settings, **values)
    validate(fleet)
    return fleet


def _device(row, i: int) -> Device:
    where = f"devices[{i}]"
    if not isinstance(row, dict):
        raise InventoryError(f"{where}: must be a table")
    for k in row:
        if k not in (
            "name",
            "address",
            "id",
            "user",
            "port",
            "profile",
            "groups",
            "overrides",
            "data",
        ):
            raise InventoryError(f"{where}.{k}: unknown key")
    name = _get(row, "name", str, where)
    where = f"devices.{name}"
    groups = _get(row, "groups", list, where, [])
    if not all(isinstance(g, str) for g in groups):
        raise InventoryError(f"{where}.groups: must be a list of names")
    overrides = _get(row, "overrides", dict, where, {})
    for k in overrides:
        if k in MANAGED or not any(
            k in keys for s, keys in config.SECTIONS.items() if s != "agent"
        ):
            raise InventoryError(f"{where}.overrides.{k}: unknown key")
        if k in FLEET_WIDE:
            raise InventoryError(
                f"{where}.overrides.{k}: must be the same on every device "
                "(set it in the fleet's [train], [net] or [data])"
            )
    return Device(
        name=name,
        address=_get(row, "address", str, where),
        id=_get(row, "id", int, where),
        user=_get(row, "user", str, where, "root"),
        port=_get(row, "port", int, where, 22),
        profile=_get(row, "profile", str, where, ""),
        groups=tuple(groups),
        overrides=dict(overrides),
        data=_get(row, "data", str, where, ""),
    )


def validate(f: Fleet) -> None:
    def need(ok: bool, key: str, msg: str) -> None:
        if not ok:
            raise InventoryError(f"{key}: {msg}")

    need(bool(_NAME_RE.fullmatch(f.name)), "fleet.name", "letters, digits, '.', '_' or '-'")
    need(0 <= f.id < 2**32, "fleet.id", "must fit 32 bits")
    for key in ("data_port", "control_port"):
        need(0 < getattr(f, key) < 65536, f"fleet.{key}", "must be a port number")
    need(0 <= f.metrics_port < 65536, "fleet.metrics_port", "must be a port number, or 0")
    ports = [f.data_port, f.control_port] + ([f.metrics_port] if f.metrics_port else [])
    need(len(set(ports)) == len(ports), "fleet.control_port", "the fleet's ports must differ")
    for net in f.control_from:
        need(config.is_network(net), "fleet.control_from", f"{net!r} is not an address or network")
    ids = _validate_devices(f, need)
    algorithm = f.settings["train"].get("algorithm", algorithms.DEFAULT)
    if (
        algorithm in algorithms.REGISTRY
        and algorithms.get(algorithm).peers == "all"
        and ids != list(range(len(ids)))
    ):
        raise InventoryError(
            f"devices: {algorithm} needs agent ids 0..{len(ids) - 1} without gaps "
            f"(ids are {ids}); use a gossip algorithm or renumber"
        )
    for d in f.devices:  # every device's config must validate too
        try:
            render(f, d)
        except config.ConfigError as e:
            raise InventoryError(f"devices.{d.name}: {e}") from None


def _validate_devices(f: Fleet, need) -> list[int]:
    """Each device's own fields, and no name, id or address twice; the ids, sorted."""
    seen_names: set[str] = set()
    seen_ids: dict[int, str] = {}
    seen_addr: dict[str, str] = {}
    for d in f.devices:
        w = f"devices.{d.name}"
        need(bool(_NAME_RE.fullmatch(d.name)), f"{w}.name", "letters, digits, '.', '_' or '-'")
        need(d.name not in seen_names, f"{w}.name", "duplicate device name")
        need(0 <= d.id < 65535, f"{w}.id", "must be in 0..65534")
        need(
            d.id not in seen_ids,
            f"{w}.id",
            f"duplicate agent id {d.id} (also {seen_ids.get(d.id)})",
        )
        need(
            d.address not in seen_addr,
            f"{w}.address",
            f"{d.address} is also {seen_addr.get(d.address)}'s address",
        )
        need(
            bool(d.address) and not any(c in d.address for c in " /@'\""),
            f"{w}.address",
            "must be a host name or IP address",
        )
        need(0 < d.port < 65536, f"{w}.port", "must be a port number")
        need(bool(re.fullmatch(r"[a-z_][a-z0-9_-]*", d.user)), f"{w}.user", "not a user name")
        if d.profile:
            try:
                profile_settings(d.profile, w)
            except ProfileError as e:
                raise InventoryError(str(e)) from None
        seen_names.add(d.name)
        seen_ids[d.id] = d.name
        seen_addr[d.address] = d.name
    return sorted(seen_ids)


def next_id(f: Fleet) -> int:
    """Ids are never reused: a new device gets one above every id in the inventory."""
    return max((d.id for d in f.devices), default=-1) + 1


# -- writing ------------------------------------------------------------------------------------


def dumps(f: Fleet) -> str:
    head = {k: getattr(f, k) for k in HEAD}
    doc: dict = {"fleet": {k: list(v) if isinstance(v, tuple) else v for k, v in head.items()}}
    if not f.control_from:
        del doc["fleet"]["control_from"]
    doc |= {s: dict(f.settings[s]) for s in config.SHARED_SECTIONS if f.settings.get(s)}
    devices = []
    for d in f.devices:
        entry = {"name": d.name, "address": d.address, "id": d.id, "user": d.user, "port": d.port}
        entry |= {
            k: getattr(d, k) for k in ("profile", "groups", "overrides", "data") if getattr(d, k)
        }
        devices.append(entry)
    if devices:
        doc["devices"] = devices
    title = (
        "# edgegossip fleet inventory: see `edgegossip fleet --help`. Secrets live in secrets/.\n"
    )
    return title + tomli_w.dumps(doc)


def save(f: Fleet) -> Path:
    """Write fleet.toml atomically (a crash leaves the old inventory or the new one)."""
    validate(f)
    path = f.root / NAME
    tmp = path.with_name(f".{NAME}.tmp")
    tmp.write_text(dumps(f))
    tmp.replace(path)
    return path
