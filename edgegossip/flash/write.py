"""Flash one device of the inventory: its bundle (what deploy ships) and the first-boot files of
the image's format onto its boot partition; one row describing what was written."""

from __future__ import annotations

import secrets
from pathlib import Path

from edgegossip.flash import card, firstboot
from edgegossip.fleet import hostkeys
from edgegossip.fleet.deploy import device_files


def flash(
    fleet,
    device,
    boot,
    fmt: str | None,
    wifi: tuple[str, str, str] | None,
    wheelhouse: Path,
    manifest: dict,
    over_another: bool = False,
    target: str | None = None,
) -> dict:
    """wifi: (ssid, hashed psk, country) or None. A card that still carries another device's
    bundle (flashed, never booted) is refused unless over_another: written over, that device's
    secrets would stay in the card's free clusters beside this one's. target: the system the
    user names (card.TARGET_NAMES), for a card whose markers do not tell it."""
    _check_not_another(boot, fleet, device, over_another)
    names, issue, system = _read_card(boot, manifest, target)  # before anything is written
    pub = fleet.ssh_key_path().with_name(fleet.ssh_key_path().name + ".pub")
    try:
        ssh_key = pub.read_text().strip()
    except OSError:
        raise ValueError(f"{pub}: the fleet's SSH public key is missing") from None
    files = device_files(fleet, device, {}, True, wheelhouse, manifest)
    # the device's SSH host key, made here and pinned before it ever boots: its first contact
    # is checked like every later one (first boot installs it, then shreds the bundle)
    host_secret, host_public = hostkeys.make(device.name)
    files[firstboot.HOST_KEY] = host_secret
    files[firstboot.HOST_KEY + ".pub"] = (host_public + "\n").encode()
    found = fmt or firstboot.detect(names, issue)
    for name, content in files.items():
        boot.write(f"{firstboot.BUNDLE}/{name}", content)
    instance = f"edgegossip-{device.name}-{secrets.token_hex(4)}"
    written = [f"{firstboot.BUNDLE}/{n}" for n in files]
    out = _first_boot(found, device, ssh_key, manifest["release"], wifi, instance)
    old = (boot.read("cmdline.txt") or b"").decode().strip()
    out["cmdline.txt"] = firstboot.cmdline(old, found, instance)
    for name, text in out.items():
        boot.write(name, text.encode())
    hostkeys.pin(fleet, device, host_public)
    return {
        "name": device.name,
        "format": found,
        "detected": fmt is None,
        "target": boot.label,
        "instance_id": instance if found == "cloud-init" else None,
        "wifi": wifi[0] if wifi else None,
        "files": written + list(out),
        "release": manifest["release"],
        "platform": manifest["platform"],
        "card": system,
        "named_target": target,
        "host_key": hostkeys.fingerprint(host_public),
    }


def _first_boot(found: str, device, ssh_key: str, release: str, wifi, instance: str) -> dict:
    """The first-boot files of the format found: cloud-init's, or Bookworm's firstrun.sh."""
    ssid, psk_hex, country = wifi if wifi else (None, None, None)
    if found == "cloud-init":
        return {
            "user-data": firstboot.user_data(device.name, device.user, ssh_key, release),
            "meta-data": firstboot.meta_data(instance, device.name),
            "network-config": firstboot.network_config(ssid, psk_hex, country),
        }
    return {
        "firstrun.sh": firstboot.firstrun(
            device.name, device.user, ssh_key, release, ssid, psk_hex, country
        )
    }


def _read_card(boot, manifest: dict, target: str | None) -> tuple[list[str], str, dict]:
    """The boot partition's names, its issue.txt, and its system as card.read() tells it;
    card.CardMismatch if the wheelhouse cannot run there."""
    names = boot.names()
    texts = {n: (boot.read(n) or b"").decode(errors="replace") for n in card.TEXT_FILES}
    system = card.read(names, texts, boot.root_system())
    card.judge(system, manifest["platform"], target)
    return names, texts["issue.txt"], system


def _check_not_another(boot, fleet, device, over_another: bool) -> None:
    import tomllib

    prior = boot.read(f"{firstboot.BUNDLE}/agent.toml")
    if not prior or over_another:
        return
    try:
        agent = tomllib.loads(prior.decode(errors="replace")).get("agent", {})
    except tomllib.TOMLDecodeError:
        agent = {}
    if (agent.get("fleet"), agent.get("id")) != (fleet.id, device.id):
        raise ValueError(
            f"{boot.label} still carries the bundle of agent {agent.get('id')} of fleet "
            f"{agent.get('fleet')}: write a fresh image, or pass --over-another-device"
        )
