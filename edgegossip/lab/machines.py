"""Lab devices up and down. Each device is `systemd-nspawn --boot` of the cached Debian root,
read-only under a throw-away overlay (--volatile=overlay), in its own network namespace, with its
own hostname and SSH host key and the fleet's SSH key authorised for the user `pi` (passwordless
sudo, as on Raspberry Pi OS; root cannot log in), so every fleet command goes through sudo.
The lab's state
(OUT/lab.json, and a pointer in /run/edgegossip/labs so `lab down --all` finds it after a crash)
names everything it made."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from edgegossip import config
from edgegossip.emulate.netns import kill_namespace_processes
from edgegossip.errors import EdgegossipError
from edgegossip.fleet import create as fleet_create
from edgegossip.fleet import inventory
from edgegossip.fleet.ssh import Ssh, SshError
from edgegossip.lab import network
from edgegossip.lab import root as lab_root
from edgegossip.run import Run

REGISTRY = Path("/run/edgegossip/labs")
STATE = "lab.json"


class LabError(EdgegossipError, RuntimeError):
    pass


def _save_state(out: Path, state: dict) -> None:
    (out / STATE).write_text(json.dumps(state, indent=1) + "\n")
    REGISTRY.mkdir(parents=True, exist_ok=True)
    (REGISTRY / f"{state['lab']}.json").write_text(json.dumps({"out": str(out.resolve())}) + "\n")


def up(
    run: Run,
    out: Path,
    split: str | None = "iid",
    progress=print,
    spec: lab_root.Spec = lab_root.DEFAULT,
) -> dict:
    """Boot run.nodes devices on run.network, their fleet.toml in `out` giving them its
    algorithm, data and settings; each device's own file cut from the data set by `split`
    (None: the data set shipped whole)."""
    n, net = run.nodes, run.network
    if os.geteuid() != 0:
        raise LabError("a lab needs root (network namespaces, systemd-nspawn)")
    if (out / STATE).exists():
        raise LabError(f"{out}: a lab is there already (`edgegossip lab down {out}` first)")
    root = lab_root.ensure(spec, progress=progress)
    lab = network.free_lab_id()
    out.mkdir(parents=True, exist_ok=True)
    names = [f"lab{lab}-{i}" for i in range(n)]
    state: dict[str, Any] = {
        "lab": lab,
        "root": str(root),
        "os": spec.os,
        "arch": spec.debian_arch,
        "devices": [],
        "loss": net.loss,
        "rate": net.rate,
    }
    _save_state(out, state)
    try:
        network.up(lab, n, net)
        settings = config.sectioned(
            {"algorithm": run.algorithm, "source": run.data, **run.settings}
        )
        fleet = _fleet(out, lab, names, settings, split, progress)
        pub = (fleet.ssh_key_path().with_suffix(".pub")).read_text()
        progress(f"booting {n} devices from {root}")
        for i, nm in enumerate(names):
            state["devices"].append(_boot(out, root, lab, i, nm, pub, fleet, spec))
            _save_state(out, state)
        # every program of an emulated device runs under qemu-user: its boot takes minutes
        boot_s = 90 * (5 if spec.emulated else 1)
        for i, nm in enumerate(names):
            _wait_ssh(fleet, fleet.device(nm), time.monotonic() + boot_s, boot_s / 2)
            progress(f"{nm} up at {network.address(lab, i)}")
    except BaseException:
        down(out)
        raise
    return {
        "lab": lab,
        "os": spec.os,
        "arch": spec.debian_arch,
        "fleet": str(out / inventory.NAME),
        "devices": [{"name": d["name"], "address": d["address"]} for d in state["devices"]],
    }


def _fleet(out: Path, lab: int, names: list[str], settings: dict, split, progress):
    """The lab's fleet folder, its devices at their lab addresses."""
    hosts = [
        {"name": nm, "address": network.address(lab, i), "user": lab_root.USER, "groups": ["lab"]}
        for i, nm in enumerate(names)
    ]
    fleet = fleet_create.create(out, f"lab{lab}", hosts, settings, split=split, progress=progress)
    # the operator's side of the lab is the host's veth: only it may reach the control
    # sockets and /metrics, as a fleet.toml with control_from = [the laptop] would say
    fleet = replace(fleet, control_from=(network.host_address(lab),))
    inventory.save(fleet)
    return fleet


def _boot(
    out: Path, root: Path, lab: int, i: int, name: str, pub: str, fleet, spec: lab_root.Spec
) -> dict:
    d = out / "lab" / name
    keys = d / "hostkeys"
    keys.mkdir(parents=True, exist_ok=True)
    key = keys / "ssh_host_ed25519_key"
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", name, "-f", str(key)],
        check=True,
        capture_output=True,
    )
    (d / "hosts").write_text(f"127.0.0.1 localhost\n127.0.1.1 {name}\n")  # sudo resolves its host
    # systemd 257 (Trixie's) sets the hostname from /etc/hostname over nspawn's --hostname
    (d / "hostname").write_text(f"{name}\n")
    (d / "authorized_keys").write_text(pub)
    (d / "authorized_keys").chmod(0o644)  # sshd reads it as the user
    host_pub = (keys / "ssh_host_ed25519_key.pub").read_text().split()
    with open(fleet.secrets / "known_hosts", "a") as f:  # pinned: no trust on first use here
        f.write(f"{network.address(lab, i)} {host_pub[0]} {host_pub[1]}\n")
    log = open(d / "console.log", "wb")
    argv = [
        "systemd-nspawn",
        "-D",
        str(root),
        "--boot",
        "--register=no",
        "--keep-unit",
        "-M",
        name,
        f"--hostname={name}",
        "--volatile=overlay",
        "--console=pipe",
        f"--network-namespace-path=/run/netns/{network.device_ns(lab, i)}",
        f"--bind-ro={keys}:/etc/ssh/lab",
        f"--bind-ro={d / 'hosts'}:/etc/hosts",
        f"--bind-ro={d / 'hostname'}:/etc/hostname",
        f"--bind-ro={d / 'authorized_keys'}:/home/{lab_root.USER}/.ssh/authorized_keys",
    ]
    argv += [f"--setenv={k}={v}" for k, v in spec.qemu_env().items()]
    if spec.emulated:
        # systemd makes /run/systemd/incoming a mount point of its own with a mount call that
        # qemu-user does not pass on; a service whose sandbox needs it then fails at NAMESPACE.
        # A bind of an empty folder there makes it one before systemd starts.
        (d / "incoming").mkdir(exist_ok=True)
        argv.append(f"--bind={d / 'incoming'}:/run/systemd/incoming")
    # a word of the kernel command line (init's, in a container): this device was provisioned
    # by the lab, and cloud-init, where the root has it, has no seed to look for
    argv.append("cloud-init=disabled")
    p = subprocess.Popen(
        argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )
    log.close()
    return {
        "name": name,
        "address": network.address(lab, i),
        "pid": p.pid,
        "netns": network.device_ns(lab, i),
    }


def boot(out: Path, name: str, card_dir: Path, progress=print) -> dict:
    """Power lab device `name` off and boot it as a fresh Pi from the flashed card in card_dir
    (card.py); wait until sshd answers with the host key `fleet flash` pinned and the key it
    authorised. What the first boot then does (the install, the agent) goes on after this."""
    from edgegossip.lab import card

    try:
        state = json.loads((out / STATE).read_text())
    except (OSError, ValueError):
        raise LabError(f"{out}: no lab there ({STATE} missing)") from None
    dev = next((x for x in state["devices"] if x["name"] == name), None)
    if dev is None:
        raise LabError(f"{name}: not a device of the lab in {out}")
    if not (card_dir / "cmdline.txt").is_file():
        raise LabError(f"{card_dir}: no cmdline.txt (flash it first: `fleet flash {name} --boot`)")
    spec = lab_root.Spec(state.get("os", "bookworm"), state.get("arch", ""))
    fleet = inventory.load(out)
    try:  # the multiplexed connection to the device as it was would answer for the new one
        Ssh(fleet, fleet.device(name)).close()
    except (inventory.InventoryError, subprocess.TimeoutExpired):
        pass
    _power_off([dev], 5)  # its overlay is thrown away: no need to wait for a clean power-off
    # a container whose nspawn had to be killed keeps running in the device's namespace (seen
    # under emulation): it would hold port 22 and the agent's ports against the new boot
    kill_namespace_processes(dev["netns"])
    d = out / "lab" / name
    progress(f"{name}: a fresh {spec.name} root of its own (once per device)")
    device_root = card.fresh_root(Path(state["root"]), d / "root", spec.os)
    incoming = d / "incoming" if spec.emulated else None
    if incoming is not None:
        incoming.mkdir(exist_ok=True)
    card.as_fat(card_dir)
    with open(d / "console.log", "ab") as log:
        p = subprocess.Popen(
            card.argv(device_root, name, dev["netns"], card_dir.resolve(), incoming, spec),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    dev.update(pid=p.pid, card=str(card_dir.resolve()))
    _save_state(out, state)
    progress(f"{name}: booting from {card_dir}")
    t0 = time.monotonic()
    boot_s = 90 * (10 if spec.emulated else 2)  # the first boot runs cloud-init first
    _wait_ssh(fleet, fleet.device(name), t0 + boot_s, 30)
    return {"name": name, "address": dev["address"], "boot_s": round(time.monotonic() - t0, 1)}


def _wait_ssh(fleet, device, deadline: float, boot_wait_s: float) -> None:
    last = "not started"
    while time.monotonic() < deadline:
        try:
            with socket.create_connection((device.address, device.port), timeout=1):
                pass
            # bounded on the device: a boot job that hangs (network-online can wait 2 min) must
            # not leave a killed ssh client behind, nor keep the lab from coming up
            Ssh(fleet, device).run(
                f"timeout {boot_wait_s:.0f} systemctl is-system-running --wait >/dev/null 2>&1;"
                " true",
                timeout=boot_wait_s + 15,
            )
            return
        except (OSError, SshError) as e:
            last = str(e)
            time.sleep(0.5)
    raise LabError(f"{device.name}: sshd did not answer in time ({last})")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def down(out: Path) -> list[str]:
    """Stop the lab's devices and remove its network; what was removed. Safe to call twice."""
    try:
        state = json.loads((out / STATE).read_text())
    except (OSError, ValueError):
        raise LabError(f"{out}: no lab there ({STATE} missing)") from None
    removed = []
    try:
        fleet = inventory.load(out)
    except inventory.InventoryError:
        fleet = None
    for dev in state.get("devices", []):
        if fleet is not None:  # close the multiplexed SSH connection to it
            try:
                Ssh(fleet, fleet.device(dev["name"])).close()
            except (inventory.InventoryError, subprocess.TimeoutExpired):
                pass
    _power_off(state.get("devices", []))
    removed += [dev["name"] for dev in state.get("devices", [])]
    removed += network.down(state["lab"])
    (REGISTRY / f"{state['lab']}.json").unlink(missing_ok=True)
    (out / STATE).unlink(missing_ok=True)
    return removed


def _power_off(devices: list[dict], wait_s: float = 15) -> None:
    """Stop each device's nspawn (and the shell supervising a card-booted one: both are the
    process group Popen started), politely first: nspawn powers the container off."""
    groups = [d["pid"] for d in devices if _alive(d["pid"]) and _is_nspawn(d["pid"])]
    for g in groups:
        _signal_group(g, signal.SIGTERM)
    deadline = time.monotonic() + wait_s
    for g in groups:
        while _group_alive(g) and time.monotonic() < deadline:
            time.sleep(0.2)
        if _group_alive(g):
            _signal_group(g, signal.SIGKILL)


def _group_alive(pgid: int) -> bool:
    """Whether a process of the group still runs (a zombie nobody reaped does not count)."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if fields[0] != "Z" and int(fields[2]) == pgid:
            return True
    return False


def _signal_group(pgid: int, sig: int) -> bool:
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        return False
    return True


def _is_nspawn(pid: int) -> bool:
    try:
        return b"systemd-nspawn" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


def down_all() -> list[str]:
    """Every lab this machine knows of, and the leftovers of crashed ones."""
    removed = []
    for ptr in sorted(REGISTRY.glob("*.json")) if REGISTRY.is_dir() else []:
        try:
            out = Path(json.loads(ptr.read_text())["out"])
            removed += down(out)
        except (LabError, OSError, ValueError, KeyError):
            ptr.unlink(missing_ok=True)
    for pid_dir in Path("/proc").iterdir():  # nspawn processes booting a lab root, orphaned
        if pid_dir.name.isdigit():
            try:
                cmd = (pid_dir / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if (
                cmd
                and cmd[0].endswith(b"systemd-nspawn")
                and any(
                    re.search(
                        rb"network-namespace-path=/run/netns/"
                        + network.PREFIX.encode()
                        + rb"\d+d\d+",
                        a,
                    )
                    for a in cmd
                )
            ):
                os.kill(int(pid_dir.name), signal.SIGKILL)
                removed.append(f"nspawn:{pid_dir.name}")
    for lab in network.all_labs():
        removed += network.down(lab)
    return removed
