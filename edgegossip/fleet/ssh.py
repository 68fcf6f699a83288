"""SSH to a device through the system's OpenSSH client (subprocess).

Why OpenSSH and not asyncssh or Fabric: it is already on every machine that manages Pis, it reads
the user's ~/.ssh/config (jump hosts, agents, hardware keys) as the user expects, it multiplexes
one TCP connection per device (ControlMaster) so the many short commands of a deploy cost one
handshake, and it adds no dependency. The price, one process per command, is small beside a
pip install. Host keys are pinned in the fleet's own known_hosts before the first
contact (`fleet flash` makes the device's host key, the lab writes its machines'), or pinned by
the operator (`fleet trust`, after comparing the fingerprint) or learned at a deploy told so
(`--accept-new-host-keys`); never silently on first use, and refused if they change."""

from __future__ import annotations

import hashlib
import os
import selectors
import stat
import subprocess
import tempfile
import threading
import time
from pathlib import Path

from edgegossip.errors import EdgegossipError

# what one command may send back unless it says otherwise: a probe, a status, a log page
MAX_OUTPUT = 4 << 20


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
    def __init__(self, fleet, device, deadline: float | None = None, accept_new: bool = False):
        """accept_new: learn the host key of a device none is pinned for (said explicitly, by
        `fleet deploy --accept-new-host-keys`); by default only a pinned key is trusted."""
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
            f"StrictHostKeyChecking={'accept-new' if accept_new else 'yes'}",
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
        self.key = key
        if key.is_file():
            # a passphrase-protected key is used through the user's ssh-agent: with BatchMode
            # ssh asks for no passphrase, and IdentitiesOnly still picks this key from the agent
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
        self,
        command: str,
        input: bytes | None = None,
        timeout: float = 60,
        check: bool = True,
        limit: int = MAX_OUTPUT,
    ) -> subprocess.CompletedProcess:
        """Run command on the device (as root, through sudo if the SSH user is not root). A
        device that says more than `limit` bytes (on stdout or stderr) is cut off: the device
        may be compromised, and what it sends must not fill the operator's memory."""
        try:
            p = bounded_run(self.argv(command), input, self._timeout(timeout), limit)
        except OutputTooLarge as e:
            self.close()
            raise SshError(str(e)) from None
        except subprocess.TimeoutExpired:
            # the shared connection may be left mid-session, and every later command would then
            # fail through it without a word: end it, the next command opens a fresh one
            self.close()
            raise SshError(f"timed out after {timeout:g} s") from None
        if p.returncode == 255:
            why = unreachable_reason(p.stderr.decode(errors="replace"))
            if why.startswith("SSH key refused") and needs_agent(self.key):
                why = (
                    f"SSH key refused: {self.key} has a passphrase and no ssh-agent holds it "
                    f"(run `ssh-add {self.key}` in this shell)"
                )
            raise SshError(why)
        if check and p.returncode != 0:
            raise SshError(last_line(p.stderr) or last_line(p.stdout) or f"exit {p.returncode}")
        return p


class OutputTooLarge(EdgegossipError):
    pass


def bounded_run(
    argv: list[str], input: bytes | None, timeout: float, limit: int
) -> subprocess.CompletedProcess:
    """subprocess.run(argv, input, capture_output=True, timeout) that kills the command once
    it has written more than `limit` bytes to stdout or to stderr."""
    proc = subprocess.Popen(
        argv,
        stdin=subprocess.PIPE if input is not None else subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    writer = None
    if input is not None:

        def feed() -> None:
            try:
                assert proc.stdin is not None
                proc.stdin.write(input)
                proc.stdin.close()
            except (BrokenPipeError, OSError, ValueError):
                pass

        writer = threading.Thread(target=feed, daemon=True)
        writer.start()
    assert proc.stdout is not None and proc.stderr is not None
    stdout, stderr = bytearray(), bytearray()
    bufs = {proc.stdout.fileno(): stdout, proc.stderr.fileno(): stderr}
    deadline = time.monotonic() + timeout
    try:
        with selectors.DefaultSelector() as sel:
            sel.register(proc.stdout, selectors.EVENT_READ)
            sel.register(proc.stderr, selectors.EVENT_READ)
            while sel.get_map():
                left = deadline - time.monotonic()
                if left <= 0:
                    raise subprocess.TimeoutExpired(argv, timeout)
                for key, _ in sel.select(min(left, 1.0)):
                    chunk = os.read(key.fd, 1 << 16)
                    if not chunk:
                        sel.unregister(key.fileobj)
                        continue
                    buf = bufs[key.fd]
                    buf += chunk
                    if len(buf) > limit:
                        raise OutputTooLarge(
                            f"the device sent more than {limit // 1024} KiB; cut off"
                        )
        rc = proc.wait(timeout=max(0.1, deadline - time.monotonic()))
    except BaseException:
        proc.kill()
        proc.wait()
        raise
    finally:
        proc.stdout.close()
        proc.stderr.close()
        if writer is not None:
            writer.join(timeout=5)
    return subprocess.CompletedProcess(argv, rc, bytes(stdout), bytes(stderr))


def needs_agent(key: Path) -> bool:
    """The private key is passphrase-protected (so only an ssh-agent can use it in batch)."""
    if not key.is_file():
        return False
    p = subprocess.run(
        ["ssh-keygen", "-y", "-P", "", "-f", str(key)], capture_output=True, timeout=10
    )
    return p.returncode != 0


def last_line(raw: bytes | str) -> str:
    text = raw.decode(errors="replace") if isinstance(raw, bytes) else raw
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1] if lines else ""


def unreachable_reason(stderr: str) -> str:
    line = last_line(stderr)
    if "Permission denied" in line:
        return f"SSH key refused ({line})"
    if "REMOTE HOST IDENTIFICATION HAS CHANGED" in stderr:
        return "host key differs from the one pinned in secrets/known_hosts (a different device?)"
    if "host key is known" in stderr or "Host key verification failed" in line:
        return (
            "no host key pinned for this device: compare its fingerprint and run "
            "`edgegossip fleet trust NAME --fingerprint SHA256:...`, or deploy with "
            "--accept-new-host-keys"
        )
    return f"unreachable ({line or 'ssh failed'})"
