"""An emulated LAN: one network namespace per node on a Linux bridge, with kernel packet loss
(nftables `numgen random` in each node's namespace, on packets arriving from other nodes) and an
optional egress rate cap (tbf). Needs root. Every object is named with a per-run prefix so that
teardown, and `cleanup()` of an earlier crashed run, remove exactly what we made.

The bridge lives in a "switch" namespace of its own, never on the host: a host whose FORWARD
policy is DROP (Docker's daemon leaves it so, and bridged traffic passes FORWARD on these
kernels) would otherwise silently drop the whole fleet's traffic. No host rule sees a packet
between two nodes.

Addresses are 10.77.<run>.<node+1>/24 and exist only inside the namespaces this module creates.
"""

from __future__ import annotations

import logging
import os
import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from edgegossip import tools
from edgegossip.errors import EdgegossipError
from edgegossip.run import rate_to_mbps
from edgegossip.transport.lossmodel import LossModel
from edgegossip.transport.pacing import BURST_S, EARLY_S

log = logging.getLogger(__name__)

PREFIX = "eg"  # every namespace, bridge and veth we create starts with this
# A new namespace inherits the host's TCP congestion control, and that decides what the TCP
# baseline costs under loss: BBR ignores random loss, CUBIC halves its window at each one (a
# 3-agent MLP ring at 10% loss: 12-14 steps in 30 s with BBR, 1 with CUBIC, on one machine).
# Pinned, so a result does not depend on the host's sysctl; CUBIC is Linux's default and what
# Raspberry Pi OS runs.
TCP_CONGESTION_CONTROL = "cubic"


class EmulationError(EdgegossipError, RuntimeError):
    pass


def is_root() -> bool:
    return os.geteuid() == 0


def _run(*args: str, check: bool = True, input: str | None = None) -> subprocess.CompletedProcess:
    p = subprocess.run(args, capture_output=True, text=True, input=input)
    if check and p.returncode != 0:
        raise EmulationError(f"{' '.join(args)}: {p.stderr.strip() or p.stdout.strip()}")
    return p


# A namespace other than the host's may only choose from the host's allowed list, which is the
# host's default and reno unless an administrator added more: on a host whose default is BBR,
# CUBIC is refused there (EPERM, "I/O error" from sh) until the list names it.
TCP_ALLOWED = Path("/proc/sys/net/ipv4/tcp_allowed_congestion_control")


def allow_tcp(name: str = TCP_CONGESTION_CONTROL) -> None:
    """Add `name` to the host's allowed congestion controls; it only adds, so what any other
    program may already choose stays allowed."""
    allowed = TCP_ALLOWED.read_text().split()
    if name not in allowed:
        log.info("adding %s to %s (was: %s)", name, TCP_ALLOWED, " ".join(allowed))
        try:
            TCP_ALLOWED.write_text(" ".join([*allowed, name]))
        except OSError as e:
            raise EmulationError(
                f"cannot allow TCP {name} in namespaces: {TCP_ALLOWED}: {e}"
            ) from e


def pin_tcp(ns: str) -> None:
    """Give namespace `ns` the devices' TCP congestion control (TCP_CONGESTION_CONTROL)."""
    allow_tcp()
    _run(
        "ip",
        "netns",
        "exec",
        ns,
        "sh",
        "-c",
        f"echo {TCP_CONGESTION_CONTROL} > /proc/sys/net/ipv4/tcp_congestion_control",
    )


AIR = "air"  # the Wi-Fi channel's device in the switch's namespace (Lan._add_air)

# tbf's bucket: what may leave back to back. As much as the agents' pacer releases at once
# (BURST_S of the rate, and a burst may leave EARLY_S early), and one whole frame more (tbf books
# the frame a burst ends on whole); never below 4 KB. What does not fit waits in tbf's queue for
# its timer, whose softirqs then send it on, charged to whatever thread the timer interrupted:
# mostly training threads. A bucket of a few datagrams did that to every burst; one of exactly
# BURST_S still to many (tc's overlimits per node halved with this one, docs/changelog.md).
TBF_BURST_S = BURST_S + EARLY_S
TBF_MIN_BURST = 4000
MAX_FRAME = 1514  # an Ethernet frame with a 1,500-byte MTU


QUEUE_S = 0.05  # what a cap's queue holds: this long at its rate


def _bucket(mbps: float) -> int:
    """The bytes a cap of mbps lets leave back to back (TBF_BURST_S, and one frame more)."""
    return max(TBF_MIN_BURST, int(mbps * 1e6 / 8 * TBF_BURST_S) + MAX_FRAME)


def tbf(rate: str) -> list[str]:
    """tc's words for a tbf cap at rate (e.g. "20mbit"): its rate, bucket and queue."""
    burst = _bucket(rate_to_mbps(rate) or 0.0)
    return ["tbf", "rate", rate, "burst", str(burst), "latency", f"{QUEUE_S * 1000:g}ms"]


def _htb(rate_mbps: float, ceil_mbps: float, bucket: bool = False) -> list[str]:
    """tc's words for an htb class guaranteed rate_mbps and borrowing up to ceil_mbps, with a
    quantum of one frame; with `bucket` the bucket tbf() would have (the channel's), else two
    frames (a station's: its bursts wait in its queue, so the channel's sum is its rate)."""
    burst = str(_bucket(ceil_mbps) if bucket else 2 * MAX_FRAME)
    words = ["htb", "rate", f"{rate_mbps:.4f}mbit", "ceil", f"{ceil_mbps:.4f}mbit"]
    return [*words, "burst", burst, "cburst", burst, "quantum", str(MAX_FRAME)]


def _queue_bytes(mbps: float) -> int:
    """A class's queue: what its ceiling sends in QUEUE_S, and a bucket more."""
    return int(mbps * 1e6 / 8 * QUEUE_S) + _bucket(mbps)


def node_link_up(ns: str, dev: str) -> None:
    """Bring up a node's end of its link. A UDP GSO buffer (what a device sends by default) is
    cut into its datagrams as it leaves (after tbf, before the wire), so the loss rule at the
    receiver meets, and drops, single datagrams."""
    _run("ip", "-n", ns, "link", "set", dev, "gso_max_segs", "1", "up")


def loss_rules(loss: float, exempt: str | None = None, links: tuple = ()) -> str:
    """nftables ruleset for a node: drop `loss` of IPv4 packets arriving from the other nodes,
    each independently; or, with links ((source address, pattern), ...), drop the packets of
    each source whose count on that link falls on a lost outcome of its pattern
    (transport/lossmodel.py), replayed over and over.

    Loss applies to UDP and TCP alike (the all-reduce baseline must pay for it too); ICMP and ARP
    are left alone so the LAN itself stays up, and so is traffic from `exempt` (an address: the
    lab's operator)."""
    pct = round(loss * 10000)
    if not 0 <= pct <= 10000:
        raise ValueError("loss must be a fraction in [0, 1]")
    if links:
        rule = "\n    ".join(r for r in (_replay_rule(a, p) for a, p in links) if r)
    elif pct == 10000:  # numgen's range is 0..9999: a cut link is a plain drop
        rule = "meta l4proto { udp, tcp } goto lost"
    elif pct:
        rule = f"meta l4proto {{ udp, tcp }} numgen random mod 10000 < {pct} goto lost"
    else:
        rule = ""
    spare = f"ip saddr {exempt} accept" if exempt else ""
    return f"""table inet edgegossip {{
  chain lost {{
    counter drop
  }}
  chain input {{
    type filter hook input priority 0; policy accept;
    iifname "lo" accept
    {spare}
    {rule}
  }}
}}
"""


def link_pattern(model: LossModel, seed: int, sender: int, receiver: int) -> np.ndarray:
    """The outcomes of the link sender -> receiver: one stream of the run's seed per link."""
    return model.pattern([seed, sender, receiver])


def replayed_links(
    model: LossModel | None, seed: int, addresses: list[str], receiver: int
) -> tuple:
    """((source address, pattern), ...) of each link into `receiver` whose loss model replays a
    pattern, for loss_rules(); () for independent loss (numgen random does that)."""
    if model is None or model.kind == "bernoulli":
        return ()
    return tuple(
        (a, link_pattern(model, seed, j, receiver))
        for j, a in enumerate(addresses)
        if j != receiver
    )


def install_rules(ns: str, rules: str) -> None:
    """Replace namespace ns's edgegossip table with these rules (loss_rules())."""
    _run("ip", "netns", "exec", ns, "nft", "delete", "table", "inet", "edgegossip", check=False)
    _run("ip", "netns", "exec", ns, "nft", "-f", "-", input=rules)


def _replay_rule(source: str, pattern: np.ndarray) -> str:
    """The rule that replays one link's pattern: numgen inc counts the link's packets, and the
    verdict map sends those on a lost run to `lost` (one interval a run: a burst is one entry)."""
    edges = np.flatnonzero(np.diff(np.concatenate(([0], pattern.astype(np.int8), [0]))))
    spans = [(int(a), int(b) - 1) for a, b in zip(edges[::2], edges[1::2])]
    if not spans:
        return ""
    verdicts = ", ".join(f"{a}-{b} : goto lost" if b > a else f"{a} : goto lost" for a, b in spans)
    return (
        f"ip saddr {source} meta l4proto {{ udp, tcp }} "
        f"numgen inc mod {len(pattern)} vmap {{ {verdicts} }}"
    )


@dataclass
class Lan:
    n_nodes: int
    loss: float = 0.0
    rate: str | None = None  # tbf rate, e.g. "20mbit"
    rates: dict[int, str] = field(default_factory=dict)  # nodes whose link has a rate of its own
    run_id: int = field(default_factory=lambda: os.getpid() % 250)
    created: list[str] = field(default_factory=list)
    # how each link loses packets (transport/lossmodel.py); None: `loss`, independently
    model: LossModel | None = None
    seed: int = 0  # of the links' patterns
    # switch: each node's link its own (capped at `rate`); wifi: one channel of `rate` that
    # every frame crosses twice, station to access point and access point to station (AIR)
    medium: str = "switch"

    @property
    def switch(self) -> str:
        return f"{PREFIX}{self.run_id}sw"

    def ns(self, i: int) -> str:
        return f"{PREFIX}{self.run_id}n{i}"

    def address(self, i: int) -> str:
        return f"10.77.{self.run_id}.{i + 1}"

    def up(self) -> Lan:
        if not is_root():
            raise EmulationError("network emulation needs root (network namespaces, nftables)")
        tools.require("ip", "nft", why="network emulation")
        try:
            _run("ip", "netns", "add", self.switch)
            self.created.append(f"ns:{self.switch}")
            _run("ip", "-n", self.switch, "link", "add", "br0", "type", "bridge")
            _run("ip", "-n", self.switch, "link", "set", "br0", "up")
            if self.medium == "wifi":
                self._add_air()
            for i in range(self.n_nodes):
                self._add_node(i)
        except Exception:
            self.down()
            raise
        return self

    def _add_node(self, i: int) -> None:
        ns, port, ns_end = self.ns(i), f"p{i}", f"{PREFIX}{self.run_id}v{i}"
        _run("ip", "netns", "add", ns)
        self.created.append(f"ns:{ns}")
        _run(
            "ip",
            "-n",
            self.switch,
            "link",
            "add",
            port,
            "type",
            "veth",
            "peer",
            "name",
            ns_end,
            "netns",
            ns,
        )
        _run("ip", "-n", self.switch, "link", "set", port, "master", "br0", "up")
        if self.medium == "wifi":
            self._on_air(port)
        _run("ip", "-n", ns, "addr", "add", f"{self.address(i)}/24", "dev", ns_end)
        node_link_up(ns, ns_end)
        _run("ip", "-n", ns, "link", "set", "lo", "up")
        pin_tcp(ns)
        rate = self.station_rate(i)
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
                ns_end,
                "root",
                *tbf(rate),
            )
        self.set_loss(i, self.loss)

    def station_rate(self, i: int) -> str | None:
        """Node i's own link cap: the Lan's rate on a switch, on Wi-Fi only a slow station's
        (the channel holds the rate)."""
        if self.medium == "wifi":
            return self.rates.get(i)
        return self.rates.get(i, self.rate)

    def _add_air(self) -> None:
        """The channel: an ifb device in the switch's namespace that every frame passes through
        on its way in from a station and again on its way out to one (_on_air), so that all
        stations share one budget of `rate` and a frame between two of them spends it twice,
        as a frame relayed by an access point does. Within the budget each station's frames
        (by their source address, both crossings) have an htb class of their own, an equal
        share guaranteed and the whole channel to borrow, as Wi-Fi's contention shares the air
        between stations that all have frames to send; a slow station's class cannot exceed its
        own rate. tc counts bytes, not airtime: what a slow station's frames take from the
        others' air is not charged."""
        sw = self.switch
        _run("ip", "-n", sw, "link", "add", AIR, "type", "ifb")
        _run("ip", "-n", sw, "link", "set", AIR, "up")
        if self.rate:
            self._air_classes(rate_to_mbps(self.rate) or 0.0)

    def _air_classes(self, mbps: float) -> None:
        """The channel's htb: class 1:1 the channel, 1:9 what no station sent (ARP), 1:(10 + i)
        station i's frames, each with a queue of its own."""
        tc = ["ip", "netns", "exec", self.switch, "tc"]
        _run(*tc, "qdisc", "add", "dev", AIR, "root", "handle", "1:", "htb", "default", "9")
        _run(
            *tc,
            "class",
            "add",
            "dev",
            AIR,
            "parent",
            "1:",
            "classid",
            "1:1",
            *_htb(mbps, mbps, True),
        )
        share = mbps / (self.n_nodes + 1)
        for k, own in [(9, mbps), *((10 + i, self._station_mbps(i)) for i in range(self.n_nodes))]:
            cls = _htb(min(share, own), own)
            _run(*tc, "class", "add", "dev", AIR, "parent", "1:1", "classid", f"1:{k}", *cls)
            queue = ["bfifo", "limit", str(_queue_bytes(own))]
            _run(*tc, "qdisc", "add", "dev", AIR, "parent", f"1:{k}", *queue)
        for i in range(self.n_nodes):
            by_source = [
                "u32",
                "match",
                "ip",
                "src",
                f"{self.address(i)}/32",
                "flowid",
                f"1:{10 + i}",
            ]
            _run(*tc, "filter", "add", "dev", AIR, "parent", "1:", "protocol", "ip", *by_source)

    def _station_mbps(self, i: int) -> float:
        """Station i's ceiling on the channel: its own rate if it is slow, else the channel's."""
        own = rate_to_mbps(self.rates.get(i)) or 0.0
        channel = rate_to_mbps(self.rate) or 0.0
        return min(own, channel) if own else channel

    def _on_air(self, port: str) -> None:
        """Every frame arriving from the station on `port`, and every frame leaving to it,
        through the channel."""
        tc = ["ip", "netns", "exec", self.switch, "tc"]
        _run(*tc, "qdisc", "add", "dev", port, "clsact")
        for hook in ("ingress", "egress"):
            _run(
                *tc,
                "filter",
                "add",
                "dev",
                port,
                hook,
                "protocol",
                "all",
                *("u32", "match", "u32", "0", "0"),  # every frame (matchall: not in every kernel)
                "action",
                "mirred",
                "egress",
                "redirect",
                "dev",
                AIR,
            )

    def air(self) -> dict:
        """What the channel carried so far, each relayed frame counted twice (bytes,
        packets), and the frames it dropped, its queues full (dropped)."""
        out = _run(
            "ip", "netns", "exec", self.switch, "tc", "-s", "qdisc", "show", "dev", AIR, check=False
        ).stdout
        m = re.search(r"Sent (\d+) bytes (\d+) pkt \(dropped (\d+)", out)
        sent, packets, dropped = (int(g) for g in m.groups()) if m else (0, 0, 0)
        return {"bytes": sent, "packets": packets, "dropped": dropped}

    def set_rate(self, i: int, rate: str | None) -> None:
        """Node i's link capped at rate from now on (None: uncapped)."""
        ns, dev = self.ns(i), f"{PREFIX}{self.run_id}v{i}"
        _run("ip", "netns", "exec", ns, "tc", "qdisc", "del", "dev", dev, "root", check=False)
        if rate:
            _run("ip", "netns", "exec", ns, "tc", "qdisc", "add", "dev", dev, "root", *tbf(rate))

    def set_loss(self, i: int, loss: float) -> None:
        """(Re)install node i's loss rule; 1.0 cuts it off, 0.0 heals it, the Lan's own loss
        brings its loss model back."""
        install_rules(self.ns(i), loss_rules(loss, links=self.links(i, loss)))

    def links(self, i: int, loss: float) -> tuple:
        """replayed_links() into node i while it has the run's loss; () once a schedule set
        another (that loss is independent)."""
        if loss != self.loss:
            return ()
        return replayed_links(
            self.model, self.seed, [self.address(j) for j in range(self.n_nodes)], i
        )

    def pattern(self, sender: int, receiver: int) -> np.ndarray:
        """The link sender -> receiver's outcomes, as the kernel replays them."""
        assert self.model is not None
        return link_pattern(self.model, self.seed, sender, receiver)

    def dropped_packets(self, i: int) -> int:
        """Packets node i's loss rule has dropped so far."""
        out = _run(
            "ip",
            "netns",
            "exec",
            self.ns(i),
            "nft",
            "list",
            "table",
            "inet",
            "edgegossip",
            check=False,
        ).stdout
        m = re.search(r"counter packets (\d+)", out)
        return int(m.group(1)) if m else 0

    def exec_args(self, i: int) -> list[str]:
        """Command prefix that runs a program inside node i's namespace."""
        return ["ip", "netns", "exec", self.ns(i)]

    def down(self) -> None:
        for item in self.created:
            if item.startswith("ns:"):
                kill_namespace_processes(item[3:])
        for item in reversed(self.created):
            kind, name = item.split(":", 1)
            if kind == "ns":
                _run("ip", "netns", "delete", name, check=False)
            else:
                _run("ip", "link", "delete", name, check=False)
        self.created.clear()

    def __enter__(self) -> Lan:
        return self.up()

    def __exit__(self, *exc) -> None:
        self.down()


def kill_namespace_processes(ns: str) -> None:
    """SIGKILL whatever still runs in a namespace: deleting it would not stop them."""
    for pid in _run("ip", "netns", "pids", ns, check=False).stdout.split():
        try:
            os.kill(int(pid), 9)
        except (ProcessLookupError, ValueError):
            pass


def cleanup() -> list[str]:
    """Remove every namespace and link an earlier run left behind, and the processes still in
    them; returns what was removed."""
    removed = []
    for line in _run("ip", "netns", "list", check=False).stdout.splitlines():
        name = line.split()[0] if line.strip() else ""
        if re.fullmatch(rf"{PREFIX}\d+(?:n\d+|sw)", name):
            kill_namespace_processes(name)
            _run("ip", "netns", "delete", name, check=False)
            removed.append(name)
    for line in _run("ip", "-o", "link", "show", check=False).stdout.splitlines():
        m = re.match(rf"\d+: ({PREFIX}(?:br\d+|\d+h\d+))[@:]", line)  # host bridges of old versions
        if m:
            _run("ip", "link", "delete", m.group(1), check=False)
            removed.append(m.group(1))
    return removed
