"""Agent configurations of a fleet on loopback, one port each, every agent a peer of the rest."""

from edgegossip.config import AgentConfig, Peer


def fleet_configs(tmp_path, ports: list[int], ids, **settings) -> list[AgentConfig]:
    """The configurations of agents `ids` of a len(ports)-device fleet, each writing into
    tmp_path / a<id>; `settings` are the rest, as config.py names them."""
    n = len(ports)
    return [
        AgentConfig(
            id=i,
            listen=f"127.0.0.1:{ports[i]}",
            peers=tuple(Peer(j, "127.0.0.1", ports[j]) for j in range(n) if j != i),
            workers=n,
            output=str(tmp_path / f"a{i}"),
            **settings,
        )
        for i in ids
    ]
