"""What an agent does on SIGHUP (`systemctl reload`; `fleet deploy` after `fleet add` or `fleet
remove`; emulate's join and remove): it reads its config again.

When only what its protocol takes live differs (Protocol.live_settings: a gossip protocol's
peers and the fleet's size), it takes them without stopping: the new link keys are loaded (an
existing link's key does not change, so no exchange in flight is lost), the gate admits the
new peers and no longer the removed ones, the peer book sends to the new ones, and the
protocol draws among the new set, counting a new peer's silence from the moment it was added.
Anything else changed (a setting, or the peers of an algorithm whose partition or ring depends
on them: RPS, all-reduce), the agent stops as on SIGTERM, with a final checkpoint, and sets
`restart`: the CLI exits with exit_codes.RESTART, which systemd's Restart=on-failure turns
into a start on the new config.
The phase (train.phase: `fleet set phase=closing`) the agent itself takes between two steps,
whatever its algorithm: a restart would cost a small board its start-up and every exchange in
flight, and in an emulated fleet of small CPU shares half a minute.
A config that does not load is logged and the running one kept.

The file is read by a thread of its own (Reader), never by the training thread, and only as a
regular file of at most config.MAX_CONFIG_BYTES: agent.toml swapped for a FIFO or a device
neither holds training nor keeps SIGTERM from stopping the agent. The training thread applies
what was read (apply()) between two steps.

Push-sum's unit of weight is set by the fleet's size (algorithms/gossip_push.py: unit(W)), so a
change of `workers` while running sums are in flight would misread every sum: a push-sum agent
takes only its peers live (Protocol.live_settings) and restarts for a new size."""

from __future__ import annotations

import hashlib
import logging
import threading
from dataclasses import dataclass, fields, replace
from typing import TYPE_CHECKING

from edgegossip import config as config_io
from edgegossip.agent.keys import link_keys
from edgegossip.config import AgentConfig, ConfigError

if TYPE_CHECKING:
    from edgegossip.dataplane.plane import DataPlane
    from edgegossip.protocol import Context, Protocol
    from edgegossip.transport.peers import PeerBook

log = logging.getLogger(__name__)


@dataclass
class Live:
    """The running parts a change of peers reaches."""

    peers: PeerBook
    plane: DataPlane | None  # None: an algorithm without datagrams
    protocol: Protocol
    ctx: Context


def beyond_live(old: AgentConfig, new: AgentConfig, live: frozenset[str]) -> list[str]:
    """The settings whose values differ, other than those the protocol takes live."""
    return [
        f.name
        for f in fields(old)
        if f.name not in live and getattr(old, f.name) != getattr(new, f.name)
    ]


class Reader:
    """Reads agent.toml on its own thread each time `wake` is set (SIGHUP); take() hands the
    training thread the newest config read, once."""

    def __init__(self, path: str, wake: threading.Event, stop: threading.Event, refused):
        """refused(why): told of a config that does not load (the agent records it)."""
        self.path, self.wake, self.stop, self.refused = path, wake, stop, refused
        self._read: AgentConfig | None = None
        self._lock = threading.Lock()
        self.thread = threading.Thread(target=self._run, name="reload", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stop.is_set():
            if not self.wake.wait(0.5):
                continue
            self.wake.clear()
            try:
                new = config_io.load(self.path)
            except (ConfigError, OSError, ValueError) as e:
                log.warning("reload: %s: the running config is kept", e)
                self.refused(str(e))
                continue
            with self._lock:
                self._read = new

    def take(self) -> AgentConfig | None:
        with self._lock:
            new, self._read = self._read, None
        return new

    def close(self) -> None:
        self.thread.join(timeout=2)


def config_hash(cfg: AgentConfig) -> str:
    return hashlib.sha256(config_io.to_toml(cfg).encode()).hexdigest()[:12]


def apply(agent, new: AgentConfig) -> None:
    """Apply agent.toml as Reader read it to the running agent (see the module's docstring)."""
    old = agent.cfg
    inputs, classes = agent.model.shapes(new.inputs, new.classes)
    new = replace(new, inputs=inputs, classes=classes)
    if new == old:
        log.info("reload: agent.toml unchanged")
        return
    live: Live | None = agent.live
    protocol_live = live.protocol.live_settings if live is not None else frozenset()
    other = beyond_live(old, new, protocol_live | config_io.LIVE)
    if other or live is None:
        what = ", ".join(other) or "the phase before the data plane runs"
        log.warning("reload: %s changed: stopping to restart on the new config", what)
        agent.restart = True
        agent.stop_event.set()
        return
    if new.phase != old.phase:
        agent.cfg = live.ctx.cfg = replace(old, phase=new.phase)  # _closing_now sets p, alpha
        agent.config_hash = config_hash(agent.cfg)
        if agent.storage is not None:
            agent.storage.record(
                {"event": "phase", "agent": new.id, "step": agent.step, "phase": new.phase}
            )
        log.warning("reload: phase now %s, without a restart", new.phase)
    if beyond_live(agent.cfg, new, config_io.LIVE):
        _take_peers(agent, live, new)


def _take_peers(agent, live: Live, new: AgentConfig) -> None:
    try:
        keys = link_keys(new)
    except ConfigError as e:
        log.warning("reload: %s: the running peers are kept", e)
        return
    if agent.model.digest is not None:
        keys = keys.bound(agent.model.digest)
    before = {p.id for p in agent.cfg.peers}
    after = {p.id for p in new.peers}
    if live.plane is not None:
        live.plane.use_keys(keys, frozenset(after))
    live.peers.replace({p.id: (p.host, p.port) for p in new.peers})
    agent.cfg = live.ctx.cfg = new
    agent.config_hash = config_hash(new)
    live.protocol.peers_changed()
    if agent.storage is not None:
        agent.storage.record(
            {"event": "peers", "agent": new.id, "step": agent.step, "peers": sorted(after)}
        )
    log.warning(
        "reload: peers now %s (added %s, removed %s), without a restart",
        sorted(after),
        sorted(after - before),
        sorted(before - after),
    )
