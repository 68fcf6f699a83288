"""`fleet set KEY=VALUE`: parse a change against the agent config's own types, and apply it to
the inventory (shared, or as overrides of some devices) before anything is touched."""

from __future__ import annotations

from dataclasses import fields, replace
from fractions import Fraction

from edgegossip import config
from edgegossip.fleet import inventory
from edgegossip.fleet.inventory import InventoryError

_TYPES = {f.name: f.type for f in fields(config.AgentConfig)}


def parse(assignment: str) -> tuple[str, str, object]:
    """'p=1/16' or 'train.p=0.0625' -> ("train", "p", 0.0625)."""
    key, sep, text = assignment.partition("=")
    if not sep or not key:
        raise InventoryError(f"{assignment!r}: expected KEY=VALUE")
    section, _, name = key.rpartition(".")
    owners = [
        s for s, keys in config.SECTIONS.items() if name in keys and s in config.SHARED_SECTIONS
    ]
    if not owners or (section and section not in owners) or name in inventory.MANAGED:
        raise InventoryError(f"{key}: not a setting `fleet set` can change")
    typ = _TYPES[name]
    try:
        if typ == "bool":
            if text.lower() not in ("true", "false"):
                raise ValueError
            value: object = text.lower() == "true"
        elif typ == "int":
            value = int(text)
        elif typ == "float":
            value = float(Fraction(text))
        else:
            value = text
    except (ValueError, ZeroDivisionError):
        raise InventoryError(f"{key}: {text!r} is not a {typ}") from None
    return owners[0], name, value


def apply(fleet: inventory.Fleet, changes: list[tuple[str, str, object]], only: list | None):
    """The fleet with the changes made (validated: every device's config must still load)."""
    if only is None:
        settings = {s: dict(v) for s, v in fleet.settings.items()}
        for section, name, value in changes:
            settings.setdefault(section, {})[name] = value
        new = fleet.with_settings(settings)
    else:
        names = {d.name for d in only}
        for _, name, _ in changes:
            if name in inventory.FLEET_WIDE:
                raise InventoryError(
                    f"{name}: must be the same on every device; set it without --only"
                )
        new = replace(
            fleet,
            devices=tuple(
                replace(d, overrides={**d.overrides, **{n: v for _, n, v in changes}})
                if d.name in names
                else d
                for d in fleet.devices
            ),
        )
    inventory.validate(new)
    return new
