"""The lab's network: a bridge inside a "switch" namespace of its own (so the host's firewall,
e.g. a FORWARD policy of DROP left by Docker, never sees the devices' traffic), one namespace per
device on it, and a veth from the host into the switch so the operator's SSH and control
requests reach the devices. Each device drops `loss` of the packets arriving from the other
devices (nftables) and caps its egress (tbf), as `emulate` does; the operator's own packets are
exempt, as a wired management link would be.

Addresses: 10.78.<lab>.<i+1>/24 for device i, 10.78.<lab>.254 for the host."""

from __future__ import annotations

import re

from edgegossip.emulate.netns import (
    EmulationError,
    _run,
    install_rules,
    kill_namespace_processes,
    loss_rules,
    node_link_up,
    pin_tcp,
    tbf,
)
from edgegossip.run import Network

PREFIX = "egl"


def switch_ns(lab: int) -> str:
    return f"{PREFIX}{lab}sw"


def device_ns(lab: int, i: int) -> str:
    return f"{PREFIX}{lab}d{i}"


def host_link(lab: int) -> str:
    return f"{PREFIX}{lab}h"


def address(lab: int, i: int) -> str:
    return f"10.78.{lab}.{i + 1}"


def host_address(lab: int) -> str:
    return f"10.78.{lab}.254"


def free_lab_id() -> int:
    used = {
        int(m.group(1))
        for m in re.finditer(
            rf"\b{PREFIX}(\d+)sw\b", _run("ip", "netns", "list", check=False).stdout
        )
    }
    for lab in range(1, 250):
        if lab not in used:
            return lab
    raise EmulationError("250 labs are up already; `edgegossip lab down --all`")


def up(lab: int, n: int, net: Network) -> None:
    """The lab's switch and its n devices' namespaces, each device's link capped and losing
    packets as `net` says (independent loss: a device's rules drop what arrives from the
    others, never from the host)."""
    sw = switch_ns(lab)
    _run("ip", "netns", "add", sw)
    _run("ip", "-n", sw, "link", "add", "br0", "type", "bridge")
    _run("ip", "-n", sw, "link", "set", "br0", "up")
    _run("ip", "-n", sw, "link", "set", "lo", "up")
    _run("ip", "link", "add", host_link(lab), "type", "veth", "peer", "name", "host", "netns", sw)
    _run("ip", "-n", sw, "link", "set", "host", "master", "br0", "up")
    _run("ip", "addr", "add", f"{host_address(lab)}/24", "dev", host_link(lab))
    _run("ip", "link", "set", host_link(lab), "up")
    for i in range(n):
        ns = device_ns(lab, i)
        _run("ip", "netns", "add", ns)
        _run(
            "ip",
            "-n",
            sw,
            "link",
            "add",
            f"d{i}",
            "type",
            "veth",
            "peer",
            "name",
            "eth0",
            "netns",
            ns,
        )
        _run("ip", "-n", sw, "link", "set", f"d{i}", "master", "br0", "up")
        _run("ip", "-n", ns, "addr", "add", f"{address(lab, i)}/24", "dev", "eth0")
        node_link_up(ns, "eth0")
        _run("ip", "-n", ns, "link", "set", "lo", "up")
        pin_tcp(ns)
        rate = net.rate_of(i)
        if rate:
            _run(
                "ip",
                "netns",
                "exec",
                ns,
                "tc",
                "qdisc",
                "add",
                "dev",
                "eth0",
                "root",
                *tbf(rate),
            )
        set_loss(lab, i, net.loss)


def set_loss(lab: int, i: int, loss: float) -> None:
    install_rules(device_ns(lab, i), loss_rules(loss, exempt=host_address(lab)))


def down(lab: int) -> list[str]:
    """Remove the lab's namespaces and links (whatever exists of them); what was removed."""
    removed = []
    names = _run("ip", "netns", "list", check=False).stdout
    for m in re.finditer(rf"\b({PREFIX}{lab}d\d+)\b", names):
        kill_namespace_processes(m.group(1))
        _run("ip", "netns", "delete", m.group(1), check=False)
        removed.append(m.group(1))
    if re.search(rf"\b{switch_ns(lab)}\b", names):
        _run("ip", "netns", "delete", switch_ns(lab), check=False)
        removed.append(switch_ns(lab))
    if _run("ip", "link", "show", host_link(lab), check=False).returncode == 0:
        _run("ip", "link", "delete", host_link(lab), check=False)
        removed.append(host_link(lab))
    return removed


def all_labs() -> list[int]:
    text = (
        _run("ip", "netns", "list", check=False).stdout
        + _run("ip", "-o", "link", "show", check=False).stdout
    )
    return sorted({int(m.group(1)) for m in re.finditer(rf"\b{PREFIX}(\d+)(?:sw|d\d+|h)\b", text)})
