"""What an agent does on SIGHUP (`systemctl reload`; `fleet deploy` after `fleet add` or `fleet
remove`; emulate's join and remove): it reads its config again.

When only its peers (and the fleet's size) differ and its algorithm gossips (Protocol.live_peers),
it takes them without stopping: the new link keys are loaded (an existing link's key does not
change, so no exchange in flight is lost), the gate admits the new peers and no longer the
removed ones, the peer book sends to the new ones, and the protocol draws among the new set,
counting a new peer's silence from the moment it was added. Anything else changed (a setting, or
the peers of an algorithm whose partition or ring depends on them: RPS, all-reduce), the agent
stops as on SIGTERM, with a final checkpoint, and sets `restart`: the CLI exits with
exit_codes.RESTART, which systemd's Restart=on-failure turns into a start on the new config.
A config that does not load is logged and the running one kept."""

from __future__ import annotations

import hashlib
import logging
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

LIVE = frozenset({"peers", "workers"})  # what a gossiping agent takes without a restart


@dataclass
class Live:
    """The running parts a change of peers reaches."""

    peers: PeerBook
    plane: DataPlane | None  # None: an algorithm without datagrams
    protocol: Protocol
    ctx: Context


def beyond_peers(old: AgentConfig, new: AgentConfig) -> list[str]:
    """The settings other than the peers whose values differ."""
    return [
        f.name
        for f in fields(old)
        if f.name not in LIVE and getattr(old, f.name) != getattr(new, f.name)
    ]


def config_hash(cfg: AgentConfig) -> str:
    return hashlib.sha256(config_io.to_toml(cfg).encode()).hexdigest()[:12]


def reload(agent) -> None:
    """Apply agent.toml as it is now to the running agent (see the module's docstring)."""
    agent.reload_event.clear()
    try:
        new = config_io.load(agent.config_path)
    except (ConfigError, OSError, ValueError) as e:
        log.warning("reload: %s: the running config is kept", e)
        return
    old = agent.cfg
    inputs, classes = agent.model.shapes(new.inputs, new.classes)
    new = replace(new, inputs=inputs, classes=classes)
    if new == old:
        log.info("reload: agent.toml unchanged")
        return
    other = beyond_peers(old, new)
    live: Live | None = agent.live
    if other or live is None or not live.protocol.live_peers:
        what = ", ".join(other) or f"the peers of {old.algorithm}"
        log.warning("reload: %s changed: stopping to restart on the new config", what)
        agent.restart = True
        agent.stop_event.set()
        return
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
