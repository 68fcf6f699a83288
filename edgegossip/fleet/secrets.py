"""The fleet folder's secrets/ (mode 0700; never in fleet.toml, never on a device whole):

master.key             the root of every link key; each device gets only its links' keys
ssh/id_ed25519[.pub]   the fleet's SSH key pair (unless fleet.ssh_key names the user's)
known_hosts            the devices' SSH host keys (made by flash, the lab's, or `fleet trust`)
control/client.key[_secret]     the operator's CURVE certificate for the control sockets
control/NAME.key[_secret]       each device's CURVE server certificate
"""

from __future__ import annotations

import os
import secrets as _random
import subprocess
from pathlib import Path

from edgegossip.dataplane import keys as link_keys
from edgegossip.errors import EdgegossipError


class SecretsError(EdgegossipError, RuntimeError):
    pass


def private_write(path: Path, data: bytes | str, mode: int = 0o600) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "wb") as f:
        f.write(data.encode() if isinstance(data, str) else data)


def create(folder: Path, make_ssh_key: bool, passphrase: str = "") -> None:
    """A new secrets folder; refuses to overwrite one. With a passphrase, the fleet's SSH key is
    protected by it (then used through ssh-agent): the key is root on every device."""
    if (folder / "master.key").exists():
        raise SecretsError(f"{folder}: secrets exist already; a fleet's keys are made once")
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    folder.chmod(0o700)
    private_write(folder / "master.key", _random.token_bytes(32).hex() + "\n")
    private_write(folder / "known_hosts", "")
    if make_ssh_key:
        (folder / "ssh").mkdir(mode=0o700, exist_ok=True)
        p = subprocess.run(
            [
                "ssh-keygen",
                "-q",
                "-t",
                "ed25519",
                "-N",
                passphrase,
                "-C",
                "edgegossip-fleet",
                "-f",
                str(folder / "ssh" / "id_ed25519"),
            ],
            capture_output=True,
            text=True,
        )
        if p.returncode != 0:
            raise SecretsError(f"ssh-keygen: {p.stderr.strip()}")
    client_certificate(folder)


def master(folder: Path) -> bytes:
    try:
        return bytes.fromhex((folder / "master.key").read_text().strip())
    except (OSError, ValueError):
        raise SecretsError(f"{folder / 'master.key'}: missing or unreadable") from None


def keyfile(folder: Path, device: int, ids, fleet: int) -> str:
    return link_keys.keyfile_text(master(folder), device, ids, fleet)


def _certificate(directory: Path, name: str) -> tuple[Path, Path]:
    import zmq.auth

    public, secret = directory / f"{name}.key", directory / f"{name}.key_secret"
    if not secret.is_file():
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        zmq.auth.create_certificates(str(directory), name)
        secret.chmod(0o600)
    return public, secret


def client_certificate(folder: Path) -> tuple[Path, Path]:
    return _certificate(folder / "control", "client")


def server_certificate(folder: Path, device_name: str) -> tuple[Path, Path]:
    """A device's CURVE server certificate, made at its first deploy and kept."""
    return _certificate(folder / "control", f"device-{device_name}")
