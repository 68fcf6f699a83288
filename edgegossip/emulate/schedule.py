"""A run's timeline (`emulate --schedule FILE`): at a time, a node's link changes, or the
device goes off, comes back, joins or leaves for good. One event a line, `#` a comment:

    SECONDS NODE rate RATE     its link capped at RATE from then on (e.g. 2mbit; none: uncapped)
    SECONDS NODE loss FRACTION its incoming packets lost with this probability, independently
    SECONDS NODE cut           its link cut (every packet to it dropped)
    SECONDS NODE heal          its link back to the run's loss model
    SECONDS NODE off           the device loses power (kill -9)
    SECONDS NODE on            it comes back: restarted from its last checkpoint
    SECONDS NODE join          it starts for the first time, and its peers learn of it then
                               (as after `fleet add` and deploy: each running agent's config
                               gains it and the agent reloads it, without a restart)
    SECONDS NODE leave         it dies for good, unannounced (kill -9, never back): its peers
                               name it silent once it has been quiet long enough
    SECONDS NODE remove        the operator removes it (kill -9, and as `fleet remove` and
                               deploy: each running agent's config loses it, reloaded)

Seconds count from the fleet's start. Link events need namespaces (netns). What each event did
and when is written to OUT/events.jsonl, and churn.py measures what followed."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path

from edgegossip.errors import UsageError

LINK = ("rate", "loss", "cut", "heal")
DEVICE = ("off", "on", "join", "leave", "remove")
GONE = ("leave", "remove")  # nothing of a node follows these
WITH_VALUE = ("rate", "loss")


class ScheduleError(UsageError, ValueError):
    """A schedule that cannot be played: its line named (exit 2)."""


@dataclass(frozen=True)
class Event:
    """One line of a schedule."""

    at_s: float
    node: int
    action: str
    value: str = ""


def parse(text: str, nodes: int, source: str = "schedule") -> list[Event]:
    """The events, in time order; ScheduleError naming the line of the first bad one."""
    events = []
    for n, line in enumerate(text.splitlines(), 1):
        words = line.split("#", 1)[0].split()
        if not words:
            continue
        try:
            events.append(_event(words, nodes))
        except ScheduleError as e:
            raise ScheduleError(f"{source}:{n}: {e}") from None
    _check_order(events, source)
    return sorted(events, key=lambda e: e.at_s)


def _event(words: list[str], nodes: int) -> Event:
    if len(words) not in (3, 4):
        raise ScheduleError("want SECONDS NODE ACTION [VALUE]")
    try:
        at, node = float(words[0]), int(words[1])
    except ValueError:
        raise ScheduleError("SECONDS is a number and NODE an integer") from None
    action, value = words[2], words[3] if len(words) == 4 else ""
    if at < 0 or not 0 <= node < nodes:
        raise ScheduleError(f"a time >= 0 and a node in 0..{nodes - 1}")
    if action not in LINK + DEVICE:
        raise ScheduleError(f"{action!r}: one of {', '.join(LINK + DEVICE)}")
    if (action in WITH_VALUE) != bool(value):
        raise ScheduleError(f"{action} {'needs' if action in WITH_VALUE else 'takes no'} a value")
    if action == "loss" and not 0 <= _number(value) <= 1:
        raise ScheduleError("a loss is a fraction in [0, 1]")
    return Event(at, node, action, value)


def _number(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise ScheduleError(f"{text!r} is not a number") from None


def _check_order(events: list[Event], source: str) -> None:
    """A device joins before anything else of it, and nothing follows its leaving."""
    for node in {e.node for e in events}:
        mine = sorted((e for e in events if e.node == node), key=lambda e: e.at_s)
        kinds = [e.action for e in mine if e.action in DEVICE]
        if "join" in kinds and kinds[0] != "join":
            raise ScheduleError(f"{source}: node {node} joins after it was switched")
        if set(GONE) & set(kinds) and mine[-1].action not in GONE:
            raise ScheduleError(f"{source}: node {node} has events after it left")


def late(events: list[Event]) -> set[int]:
    """Nodes that join later: not started with the fleet."""
    return {e.node for e in events if e.action == "join"}


class Timeline:
    """Applies each event once its time has come (`due`, from the watch loop)."""

    def __init__(self, events: list[Event], out: Path):
        self.pending = list(events)
        self.log = out / "events.jsonl"

    def due(self, fleet, elapsed_s: float) -> list[Event]:
        done = []
        while self.pending and self.pending[0].at_s <= elapsed_s:
            e = self.pending.pop(0)
            # the moment it began: what follows it (an agent's reload, which a reload thread
            # applies within milliseconds) is measured from here, never seen before it
            began = time.time()
            _apply(fleet, e)
            done.append(e)
            with open(self.log, "a") as f:
                f.write(
                    json.dumps({"time": began, "at_s": round(elapsed_s, 1), **e.__dict__}) + "\n"
                )
        return done


def _apply(fleet, e: Event) -> None:
    if e.action in ("off", "leave"):
        fleet.kill_agent(e.node)
    elif e.action == "on":
        fleet.start_agent(e.node)
    elif e.action == "join":
        fleet.join(e.node)
    elif e.action == "remove":
        fleet.remove(e.node)
    elif e.action == "rate":
        fleet.set_rate(e.node, None if e.value == "none" else e.value)
    elif e.action == "loss":
        fleet.set_loss(e.node, float(e.value))
    elif e.action == "cut":
        fleet.set_loss(e.node, 1.0)
    else:  # heal
        fleet.set_loss(e.node, fleet.spec.network.loss)
