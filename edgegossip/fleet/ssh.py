"""SSH to a device through the system's OpenSSH client (subprocess).

Why OpenSSH and not asyncssh or Fabric: it is already on every machine that manages Pis, it reads
the user's ~/.ssh/config (jump hosts, agents, hardware keys) as the user expects, it multiplexes
one TCP connection per device (ControlMaster) so the many short commands of a deploy cost one
handshake, and it adds no dependency. The price, one process per command, is small beside a
pip install. Host keys are pinned in the fleet's own known_hosts: learned at first contact
(accept-new, as Ansible does by default) or written by the lab, and refused if they change."""

from __future__ import annotations

import hashlib
import os
import stat
import subprocess
import tempfile
import time
from pathlib import Path

from edgegossip.errors import EdgegossipError


class SshError(EdgegossipError, RuntimeError):
    """One line saying why a device could not be reached or a command failed there."""


def _private(d: Path) -> bool:
    """d is a real directory (no symlink) of this user that nobody else can enter."""
    try:
        st = os.lstat(d)
    except FileNotFoundError:
        return False
    return stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid() and not st.st_mode & 0o077


def _control_dir() -> str:
    """Where the shared connections' sockets live. ssh trusts whatever answers on a master socket
    (it checks no owner), so a folder another user can write would hand them every command and
    its input: $XDG_RUNTIME_DIR when it is private, else a folder of ours in the temp dir,
    created 0700 or refused when someone else made it first."""
    run = os.environ.get("XDG_RUNTIME_DIR")
    if run and _private(Path(run)):
        d = Path(run) / "edgegossip-ssh"
    else:
        d = Path(tempfile.gettempdir()) / f"edgegossip-ssh-{os.getuid()}"
    try:
        d.mkdir(mode=0o700)
    except FileExistsError:
        pass
    if not _private(d):
        raise SshError(
            f"{d} is not a private folder of this user (a symlink, another owner, or "
            "open to others): refusing to share SSH connections through it; remove it"
        )
    return str(d)


class Ssh:
    def __init__(self, fleet, device, deadline: float | None = None):
        self.device = device
        self.deadline = deadline  # time.monotonic() after which nothing more is started
        key = fleet.ssh_key_path()
        # one shared connection per (fleet, key, device): another key never rides on this one
        tag = hashlib.sha256(f"{key.resolve()}\0{fleet.secrets.resolve()}".encode()).hexdigest()[:8]
        self.base = [
            "ssh",
            "-p",
            str(device.port),
            "-o",
            "BatchMode=yes",
            "-o",
            f"UserKnownHostsFile={fleet.secrets / 'known_hosts'}",
            "-o",
            "StrictHostKeyChecking=accept-new",
            "-o",
            "ConnectTimeout=5",
            "-o",
            "ServerAliveInterval=5",
            "-o",
            "ServerAliveCountMax=2",
            "-o",
            "ControlMaster=auto",
            "-o",
            f"ControlPath={_control_dir()}/{tag}-%C",
            "-o",
            "ControlPersist=60",
            "-o",
            "LogLevel=ERROR",
            "-F",
            "none",
        ]
        if key.is_file():
            self.base += ["-i", str(key), "-o", "IdentitiesOnly=yes"]
        self.target = f"{device.user}@{device.address}"
        self.sudo = "" if device.user == "root" else "sudo -n "

    def argv(self, command: str, tty: bool = False) -> list[str]:
        return self.base + (["-t"] if tty else []) + [self.target, "--", self.sudo + command]

    def close(self) -> None:
        """End the shared connection (it would otherwise linger ControlPersist seconds)."""
        try:
            subprocess.run(self.base + ["-O", "exit", self.target], capture_output=True, timeout=10)
        except subprocess.TimeoutExpired:
            pass

    def _timeout(self, timeout: float) -> float:
        if self.deadline is None:
            return timeout
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise SshError("timed out")
        return min(timeout, left)

    def run(
        self, command: str, input: bytes | None = None, timeout: float = 60, check: bool = True
    ) -> subprocess.CompletedProcess:
        """Run command on the device (as root, through sudo if the SSH user is not root)."""
        try:
            p = subprocess.run(
                self.argv(command),
                input=input,
                capture_output=True,
                timeout=self._timeout(timeout),
                stdin=None if input is not None else subprocess.DEVNULL,
            )
        except subprocess.TimeoutExpired:
            # the shared connection may be left mid-session, and every later command would then
            # fail through it without a word: end it, the next command opens a fresh one
            self.close()
            raise SshError(f"timed out after {timeout:g} s") from None
        if p.returncode == 255:
            raise SshError(unreachable_reason(p.stderr.decode(errors="replace")))
        if check and p.returncode != 0:
            raise SshError(last_line(p.stderr) or last_line(p.stdout) or f"exit {p.returncode}")
        return p


def last_line(raw: bytes | str) -> str:
    text = raw.decode(errors="replace") if isinstance(raw, bytes) else raw
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1] if lines else ""


def unreachable_reason(stderr: str) -> str:
    line = last_line(stderr)
    if "Permission denied" in line:
        return f"SSH key refused ({line})"
    if "REMOTE HOST IDENTIFICATION HAS CHANGED" in stderr or "Host key verification failed" in line:
        return "host key differs from the one pinned in secrets/known_hosts (a different device?)"
    return f"unreachable ({line or 'ssh failed'})"
