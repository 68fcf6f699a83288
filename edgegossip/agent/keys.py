"""This device's link keys, as its config says: from its keyfile, or derived from the fleet
secret; refused in one line when the secret is public or a link has no key."""

from __future__ import annotations

from edgegossip import config as config_io
from edgegossip.config import AgentConfig, ConfigError
from edgegossip.dataplane import wire
from edgegossip.dataplane.keys import KeyfileError, LinkKeys


def link_keys(cfg: AgentConfig) -> LinkKeys:
    if not cfg.keys:
        problem = config_io.secret_problem(cfg.key)
        if problem is not None:  # a public secret would let anyone forge every datagram
            raise ConfigError(problem)
        return LinkKeys.of(wire.derive_key(cfg.key))
    try:
        keys = LinkKeys.load(cfg.keys, cfg.id, cfg.fleet)
    except KeyfileError as e:
        raise ConfigError(f"agent.keys: {e}") from None
    missing = [
        p.id for p in cfg.peers if keys.key(cfg.id, p.id) is None or keys.key(p.id, cfg.id) is None
    ]
    if missing:
        raise ConfigError(f"agent.keys: no keys for the links with peers {missing}")
    return keys
