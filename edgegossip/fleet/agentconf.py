"""Each device's agent.toml, rendered from the inventory: defaults < the device's profile < the
fleet's shared [train]/[net]/[data] < the device's overrides; ids, peers, keys, paths, the
control socket and /metrics are the tooling's. Where the files live on a device is fixed here,
once."""

from __future__ import annotations

import functools
from pathlib import Path

from edgegossip import config, models
from edgegossip.fleet.profiles import profile_settings

ETC = "/etc/edgegossip"
CONFIG = f"{ETC}/agent.toml"
KEYFILE = f"{ETC}/link.keys"
SERVER_KEY = f"{ETC}/control/server.key_secret"
CLIENT_KEYS = f"{ETC}/control/clients"
STATE = "/var/lib/edgegossip"
OUTPUT = f"{STATE}/out"
DATA = f"{STATE}/data/device.npz"
CACHE = f"{STATE}/cache"
MODEL = f"{STATE}/model"  # a compiled model's folder, shipped by deploy
UNIT = "edgegossip-agent"
FIRSTBOOT_TAG = "edgegossip-firstboot"  # the journal's tag of a failed first-boot install


def values(fleet, device) -> dict:
    v: dict = {}
    if device.profile:
        v.update(profile_settings(device.profile, f"devices.{device.name}"))
    for section in config.SHARED_SECTIONS:
        v.update(fleet.settings.get(section, {}))
    v.update(device.overrides)
    workers = max(d.id for d in fleet.devices) + 1
    v.update(
        id=device.id,
        workers=workers,
        fleet=fleet.id,
        keys=KEYFILE,
        output=OUTPUT,
        listen=f"0.0.0.0:{fleet.data_port}",
        peers=[f"{d.id}@{d.address}:{fleet.data_port}" for d in fleet.devices if d is not device],
        endpoint=f"0.0.0.0:{fleet.control_port}",
        server_key=SERVER_KEY,
        client_keys=CLIENT_KEYS,
        allow_from=",".join(fleet.control_from),
        metrics_endpoint=f"0.0.0.0:{fleet.metrics_port}" if fleet.metrics_port else "",
        metrics_allow_from=",".join(fleet.control_from),
    )
    if device.data:
        v.update(source="file", path=DATA)
    if v.get("model", "mlp") not in models.NAMED:
        v.update(model=MODEL, model_digest=model_digest(fleet))
    return v


def model_folder(fleet) -> Path | None:
    """The compiled model the fleet trains, on this machine (`[train] model`, a folder relative
    to the fleet's), or None for a named model."""
    name = fleet.settings.get("train", {}).get("model", "mlp")
    return None if name in models.NAMED else fleet.root / name


def model_digest(fleet) -> str | None:
    """The compiled model's digest, its files checked; config.ConfigError names what is wrong."""
    folder = model_folder(fleet)
    if folder is None:
        return None
    from edgegossip.artifact import ArtifactError, is_artifact

    if not is_artifact(str(folder)):
        raise config.ConfigError(
            f"train.model: must be {models.CHOICES_TEXT}, relative to the fleet's; "
            f"{folder} holds none"
        )
    try:
        return _digest(str(folder), _stamp(folder))
    except ArtifactError as e:
        raise config.ConfigError(f"train.model: {e}") from None


def _stamp(folder: Path) -> tuple:
    """What the folder's files are now (name, size, modification time): a changed file is a
    new stamp, so the digest is read (and every file hashed) again."""
    return tuple(
        (p.name, st.st_size, st.st_mtime_ns)
        for p in sorted(folder.iterdir())
        if p.is_file() and (st := p.stat())
    )


@functools.lru_cache(maxsize=8)
def _digest(folder: str, stamp: tuple) -> str:
    """The artifact's digest, its files checked: once per stamp, not once per device that a
    fleet's validation, deploy or status renders."""
    from edgegossip import artifact

    return artifact.read(folder).digest


def render(fleet, device) -> config.AgentConfig:
    """The device's AgentConfig; raises config.ConfigError naming the bad key."""
    return config.from_dict(config.sectioned(values(fleet, device)))


def toml(fleet, device) -> str:
    return config.to_toml(render(fleet, device))
