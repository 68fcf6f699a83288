"""The long-running process on one device (agent.py composes it), with what it owns beside it:
its examples (shard.py), its link keys (keys.py), its checkpoints (checkpoints.py) and what it
reports (report.py)."""

from edgegossip.agent.agent import Agent

__all__ = ["Agent"]
