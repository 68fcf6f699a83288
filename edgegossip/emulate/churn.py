"""What followed each event of a run's schedule (emulate/schedule.py), from OUT/events.jsonl
and the agents' metrics records:

- a device that came back (on) or joined: `merging_after_s`, seconds until its first record
  with a completed or partial exchange (its counters start again with its process, so such an
  exchange is a merge since it came back); and, for a join, `caught_up_after_s`, until its held-out
  accuracy was within CAUGHT_UP of the median of the others' latest;
- a device that went off or left: `silent_after_s`, until every other running agent's record
  named it a silent peer (it stopped waiting for it: protocol/liveness.py);
- a device that joined or was removed: `told_after_s`, until the last of the running agents
  that reloaded their config (agent/reload.py) had it among its peers (joined) or no longer
  (removed), and `told`, how many agents did so without a restart.

None where it never happened before the run ended."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

from edgegossip.emulate.schedule import GONE
from edgegossip.metrics import read

CAUGHT_UP = 0.01  # accuracy points from the others' median that count as caught up


def measure(out: Path, nodes: int) -> list[dict]:
    path = out / "events.jsonl"
    if not path.is_file():
        return []
    events = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    records = {i: _records(out, i) for i in range(nodes)}
    gone = {e["node"] for e in events if e["action"] in GONE}  # they name nobody silent
    rows = []
    for e in events:
        row = {"at_s": e["at_s"], "node": e["node"], "action": e["action"], "value": e["value"]}
        after = [r for r in records[e["node"]] if r["time"] >= e["time"]]
        if e["action"] in ("on", "join"):
            hit = next((r for r in after if _merged(r)), None)
            row["merging_after_s"] = _since(e, hit)
        if e["action"] == "join":
            row["caught_up_after_s"] = _since(e, _caught_up(after, records, e["node"]))
        if e["action"] in ("off", "leave"):
            row["silent_after_s"] = _silent_after(e, records, nodes, gone)
        if e["action"] in ("join", "remove"):
            row["told"], row["told_after_s"] = _told(e, records)
        rows.append(row)
    return rows


def _merged(r: dict) -> bool:
    """A record after an exchange merged something: one completed, or partial (what arrived
    of the peer's model merged through the mask)."""
    ex = r.get("exchanges") or {}
    return bool(ex.get("completed", 0) + ex.get("partial", 0))


def _records(out: Path, i: int) -> list[dict]:
    p = out / f"agent{i}" / "metrics.jsonl"
    return [r for r in read(p) if "time" in r and "step" in r] if p.is_file() else []


def _since(e: dict, r: dict | None) -> float | None:
    return None if r is None else round(r["time"] - e["time"], 1)


def _caught_up(after: list[dict], records: dict, node: int) -> dict | None:
    for r in after:
        if r.get("accuracy") is None:
            continue
        others = [_latest(records[j], r["time"]) for j in records if j != node]
        accs = [o["accuracy"] for o in others if o is not None and o.get("accuracy") is not None]
        if accs and r["accuracy"] >= statistics.median(accs) - CAUGHT_UP:
            return r
    return None


def _latest(recs: list[dict], t: float) -> dict | None:
    before = [r for r in recs if r["time"] <= t]
    return before[-1] if before else None


def _told(e: dict, records: dict) -> tuple[int, float | None]:
    """(agents whose peers changed for the event, seconds until the last of them did)."""
    joined = e["action"] == "join"
    times = []
    for j, recs in records.items():
        hit = next(
            (
                r
                for r in recs
                if j != e["node"]
                and r["time"] >= e["time"]
                and r.get("event") == "peers"
                and (e["node"] in r["peers"]) == joined
            ),
            None,
        )
        if hit is not None:
            times.append(hit["time"] - e["time"])
    return len(times), round(max(times), 1) if times else None


def _silent_after(e: dict, records: dict, nodes: int, gone: set[int]) -> float | None:
    """When every other agent still recording after the event, and not to leave, had named
    the node silent."""
    times = []
    for j in range(nodes):
        if j == e["node"] or j in gone:
            continue
        after = [r for r in records[j] if r["time"] >= e["time"]]
        if not after:
            continue
        hit = next((r for r in after if e["node"] in (r.get("silent_peers") or [])), None)
        if hit is None:
            return None
        times.append(hit["time"] - e["time"])
    return round(max(times), 1) if times else None
