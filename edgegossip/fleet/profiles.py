"""Device profiles (devices/profiles/NAME.toml): settings that fit a kind of board. Only the
per-device ones count: a profile cannot change what the whole fleet shares (config.py's scopes)."""

from __future__ import annotations

import tomllib
from pathlib import Path

from edgegossip import config, paths


class ProfileError(config.ConfigError):
    pass


def profiles_dir() -> Path:
    return paths.devices_dir() / "profiles"


def profile_settings(name: str, where: str = "profile") -> dict:
    """A device profile's per-device settings ({key: value}); fleet-wide keys in it are left to
    the fleet (a profile cannot change the model the whole fleet trains)."""
    path = profiles_dir() / f"{name}.toml"
    try:
        with open(path, "rb") as f:
            doc = tomllib.load(f)
    except OSError:
        raise ProfileError(f"{where}.profile: no profile {name!r} in {profiles_dir()}") from None
    except tomllib.TOMLDecodeError as e:
        raise ProfileError(f"{where}.profile: {path} is not valid TOML ({e})") from None
    return {
        k: v
        for body in doc.values()
        if isinstance(body, dict)
        for k, v in body.items()
        if k not in config.FLEET_WIDE and k not in config.MANAGED
    }
