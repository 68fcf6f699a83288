"""A new fleet folder: fleet.toml with one entry per host, secrets/, and (optionally) one data
file per device split from MNIST, so that each device is shipped only its own."""

from __future__ import annotations

import secrets as _random
from pathlib import Path

from edgegossip import config
from edgegossip.fleet import inventory, secrets
from edgegossip.fleet.inventory import Device, Fleet, InventoryError


def parse_hosts(text: str, source: str) -> list[dict]:
    """A hosts file: one device per line, `NAME ADDRESS [USER] [PORT]`; '#' starts a comment."""
    hosts = []
    for n, line in enumerate(text.splitlines(), 1):
        words = line.split("#", 1)[0].split()
        if not words:
            continue
        if len(words) < 2 or len(words) > 4 or (len(words) == 4 and not words[3].isdigit()):
            raise InventoryError(
                f"{source}:{n}: expected NAME ADDRESS [USER] [PORT], got {line.strip()!r}"
            )
        hosts.append(
            {
                "name": words[0],
                "address": words[1],
                "user": words[2] if len(words) > 2 else "root",
                "port": int(words[3]) if len(words) > 3 else 22,
            }
        )
    if not hosts:
        raise InventoryError(f"{source}: no hosts in it")
    return hosts


def create(
    root: Path,
    name: str,
    hosts: list[dict],
    settings: dict,
    ssh_key: Path | None = None,
    profile: str = "",
    split: str | None = None,
    progress=print,
    passphrase: str = "",
) -> Fleet:
    if (root / inventory.NAME).exists():
        raise InventoryError(f"{root / inventory.NAME}: a fleet is there already")
    settings = {k: dict(v) for k, v in settings.items()}
    source = _compiled_model(settings)
    devices = tuple(
        Device(
            name=h["name"],
            address=h["address"],
            id=i,
            user=h.get("user", "root"),
            port=h.get("port", 22),
            profile=h.get("profile", profile),
            groups=tuple(h.get("groups", ())),
            data=f"data/device-{i}.npz" if split else "",
        )
        for i, h in enumerate(hosts)
    )
    fleet = Fleet(
        root=root,
        name=name,
        id=_random.randbelow(2**32),
        devices=devices,
        settings=settings,
        ssh_key=str(ssh_key.resolve()) if ssh_key else "secrets/ssh/id_ed25519",
    )
    inventory.validate(fleet)  # before anything is written
    root.mkdir(parents=True, exist_ok=True)
    secrets.create(root / "secrets", make_ssh_key=ssh_key is None, passphrase=passphrase)
    if split:
        from edgegossip.data.split import split_mnist

        dataset = settings.get("data", {}).get("source", "mnist")
        progress(f"splitting {dataset} {split} into {len(devices)} device files in {root / 'data'}")
        train = settings.get("train", {})
        cut = {k: train.get(k, config.default(k)) for k in ("seed", "beta")}
        k = train.get("classes_per_worker", config.default("classes_per_worker"))
        for _ in split_mnist(root / "data", len(devices), split, k=k, dataset=dataset, **cut):
            pass
    if source is not None:  # the fleet folder holds its own copy, shipped by deploy
        from edgegossip.artifact import copy

        copy(source, root / MODEL)
        settings["train"]["model"] = MODEL
        fleet = fleet.with_settings(settings)
    inventory.save(fleet)
    return fleet


MODEL = "model"  # a compiled model's copy in the fleet folder


def _compiled_model(settings: dict) -> Path | None:
    """The compiled model's folder `[train] model` names (made absolute so the new fleet is
    validated against it), or None for a named model."""
    from edgegossip import models

    model = settings.get("train", {}).get("model", "mlp")
    if model in models.NAMED:
        return None
    source = Path(model).resolve()
    if not (source / "manifest.json").is_file():
        raise InventoryError(f"train.model: {model!r} is not {models.CHOICES_TEXT}")
    settings["train"]["model"] = str(source)
    return source
