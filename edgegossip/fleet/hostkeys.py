"""The devices' SSH host keys in the fleet's known_hosts: made at flash time and pinned before the
device ever boots, or pinned after the operator compared a scanned key's fingerprint."""

from __future__ import annotations

import subprocess
import tempfile
from pathlib import Path

from edgegossip.errors import EdgegossipError
from edgegossip.fleet.secrets import private_write


class HostKeyError(EdgegossipError, RuntimeError):
    pass


def host(device) -> str:
    """The device as known_hosts names it."""
    return device.address if device.port == 22 else f"[{device.address}]:{device.port}"


def make(name: str) -> tuple[bytes, str]:
    """A new ed25519 host key pair: (private key file bytes, public key line)."""
    with tempfile.TemporaryDirectory(prefix="edgegossip-hostkey-") as d:
        key = Path(d) / "key"
        p = subprocess.run(
            ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", name, "-f", str(key)],
            capture_output=True,
            text=True,
        )
        if p.returncode != 0:
            raise HostKeyError(f"ssh-keygen: {p.stderr.strip()}")
        return key.read_bytes(), key.with_suffix(".pub").read_text().strip()


def pin(fleet, device, public_line: str) -> None:
    """Make public_line the only key known_hosts holds for the device."""
    path = fleet.secrets / "known_hosts"
    name = host(device)
    kept = [
        ln
        for ln in (path.read_text().splitlines() if path.exists() else [])
        if ln.split(" ", 1)[0] != name
    ]
    kind, blob = public_line.split()[:2]
    private_write(path, "\n".join([*kept, f"{name} {kind} {blob}"]) + "\n")


def fingerprint(public_line: str) -> str:
    """SHA256:... of a public key line, as ssh-keygen -l and ssh show it."""
    p = subprocess.run(
        ["ssh-keygen", "-l", "-E", "sha256", "-f", "-"],
        input=public_line + "\n",
        capture_output=True,
        text=True,
    )
    if p.returncode != 0:
        raise HostKeyError(f"not a public key: {public_line[:60]!r}")
    return p.stdout.split()[1]


def scan(device, timeout_s: float = 10) -> list[str]:
    """The public key lines the device's address answers with (ssh-keyscan)."""
    try:
        p = subprocess.run(
            ["ssh-keyscan", "-T", str(int(timeout_s)), "-p", str(device.port), device.address],
            capture_output=True,
            text=True,
            timeout=timeout_s + 5,
        )
    except subprocess.TimeoutExpired:
        raise HostKeyError(f"{device.name}: no answer from {device.address}") from None
    lines = [" ".join(ln.split()[1:3]) for ln in p.stdout.splitlines() if ln and ln[0] != "#"]
    if not lines:
        raise HostKeyError(f"{device.name}: {device.address} offered no host key")
    return lines


def trust(fleet, device, expected: str | None, timeout_s: float = 10) -> dict:
    """Pin the scanned key whose fingerprint is `expected`; with none given, only report them."""
    keys = {fingerprint(k): k for k in scan(device, timeout_s)}
    row = {"name": device.name, "host": host(device), "fingerprints": sorted(keys)}
    if expected is None:
        return {**row, "pinned": None}
    if expected not in keys:
        raise HostKeyError(
            f"{device.name}: {host(device)} offers {', '.join(sorted(keys))}, not {expected}: "
            "nothing pinned (another machine at that address?)"
        )
    pin(fleet, device, keys[expected])
    return {**row, "pinned": expected}
