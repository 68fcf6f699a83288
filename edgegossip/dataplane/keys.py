"""Keys of the links between devices.

Every direction of every link has its own key, K(s -> r) = HMAC-SHA256(root, "edgegossip link
v2" || s || r) (16-bit little-endian ids), so the AEAD's nonce (session, seq) is never reused
under one key. Two ways to hold them:

- from a fleet secret (`agent.key`): every device derives every key from the same root. Quick to
  set up; a stolen device can speak for every other.
- from a keyfile (`agent.keys`, written by `edgegossip keys init`): the operator keeps the
  master secret; each device gets only the keys of its own links, so a stolen device can forge
  nothing in another's name and can disturb only its own links.

A keyfile is JSON: {"version": 1, "fleet": F, "device": D, "links": {"S>R": "hex key", ...}}.
"""

from __future__ import annotations

import hmac
import json
import os
import secrets
import struct
from pathlib import Path

from edgegossip.dataplane import aead
from edgegossip.errors import UsageError

_LABEL = b"edgegossip link v2"
_MODEL_LABEL = b"edgegossip model v1"


def link_key(root: bytes, sender: int, receiver: int) -> bytes:
    return hmac.digest(root, _LABEL + struct.pack("<HH", sender, receiver), "sha256")


class KeyfileError(UsageError, ValueError):
    """A keyfile that cannot serve this device."""


class LinkKeys:
    """The keys one device uses: key(s, r) for a datagram from s to r, and an AEAD per key."""

    def __init__(
        self, root: bytes | None = None, links: dict[tuple[int, int], bytes] | None = None
    ):
        self._root = root
        self._links = dict(links or {})
        self._aeads: dict[tuple[int, int], object] = {}
        self._model = b""

    def bound(self, model_digest: str) -> LinkKeys:
        """These keys bound to one compiled model: each becomes HMAC-SHA256(key, label ||
        digest), so a device holding another model (or another version of it) can neither make
        a tag its peers accept nor accept theirs; its datagrams are dropped as bad_tag, before
        a parameter of a foreign model could be averaged in."""
        out = LinkKeys(self._root, self._links)
        out._model = bytes.fromhex(model_digest)
        return out

    @classmethod
    def of(cls, key) -> LinkKeys:
        """A LinkKeys as given, or one derived from a fleet key (bytes)."""
        return key if isinstance(key, LinkKeys) else cls(root=bytes(key))

    def key(self, sender: int, receiver: int) -> bytes | None:
        if self._root is not None:
            key: bytes | None = link_key(self._root, sender, receiver)
        else:
            key = self._links.get((sender, receiver))
        if key is not None and self._model:
            key = hmac.digest(key, _MODEL_LABEL + self._model, "sha256")
        return key

    def aead(self, sender: int, receiver: int):
        """The AEAD of the link sender -> receiver, or None if this device has no key for it."""
        k = (sender, receiver)
        a = self._aeads.get(k)
        if a is None:
            key = self.key(sender, receiver)
            if key is None:
                return None
            a = self._aeads[k] = aead.new(key)
        return a

    @classmethod
    def load(cls, path: str | Path, device: int, fleet: int) -> LinkKeys:
        try:
            doc = json.loads(Path(path).read_text())
            links: dict[tuple[int, int], bytes] = {}
            for k, v in doc["links"].items():
                a, b = (int(i) for i in k.split(">"))  # exactly two ids, else not a keyfile
                links[(a, b)] = bytes.fromhex(v)
            owner, their_fleet = int(doc["device"]), int(doc["fleet"])
        except OSError as e:
            raise KeyfileError(f"{path}: {e.strerror}") from None
        except (ValueError, KeyError, TypeError, AttributeError):
            raise KeyfileError(f"{path}: not an edgegossip keyfile") from None
        if owner != device or their_fleet != fleet:
            raise KeyfileError(
                f"{path}: keys of device {owner} in fleet {their_fleet}, "
                f"not of device {device} in fleet {fleet}"
            )
        if any(len(v) != aead.KEY_SIZE or device not in k for k, v in links.items()):
            raise KeyfileError(f"{path}: holds a key that is not one of device {device}'s links")
        return cls(links=links)


def write_fleet(out: str | Path, workers: int, fleet: int) -> dict:
    """A new master secret and one keyfile per device, each file mode 0600; returns what was
    written. Refuses to overwrite an existing master secret."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    master_path = out / "master.key"
    if master_path.exists():
        raise FileExistsError(f"{master_path} exists; keys are made once per fleet")
    master = secrets.token_bytes(32)
    _write_private(master_path, master.hex() + "\n")
    files = []
    for d in range(workers):
        path = out / f"device-{d}.keys"
        _write_private(path, keyfile_text(master, d, range(workers), fleet))
        files.append(str(path))
    return {"master": str(master_path), "devices": files, "workers": workers, "fleet": fleet}


def keyfile_text(master: bytes, device: int, ids, fleet: int) -> str:
    """The keyfile of one device: the keys of its links with every other id in ids."""
    links = {}
    for peer in ids:
        if peer != device:
            links[f"{device}>{peer}"] = link_key(master, device, peer).hex()
            links[f"{peer}>{device}"] = link_key(master, peer, device).hex()
    return (
        json.dumps({"version": 1, "fleet": fleet, "device": device, "links": links}, indent=1)
        + "\n"
    )


def _write_private(path: Path, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
