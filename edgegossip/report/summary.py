"""What an emulated run produced: per-agent and average-model accuracy on the test set, traffic,
the loss receivers observed beside the loss configured, and the plots."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import numpy as np

from edgegossip import checkpoint
from edgegossip.catalog import invalid, summary_row
from edgegossip.data import mnist
from edgegossip.metrics import read as read_metrics
from edgegossip.models import make_model
from edgegossip.report import average as fleet_average
from edgegossip.report import plot


def summarize(
    out: Path,
    nodes: int | list[int],
    model_name: str,
    configured_loss: float | None,
    loss_kind: str,
    elapsed_s: float,
    kernel_dropped: list[int] | None,
    data: mnist.Mnist | None = None,
    hostile: Mapping[int, str] | None = None,
) -> dict:
    """The run's summary; `hostile` (node -> attack, emulate --hostile) are left out of the
    average model, which is then the honest devices'."""
    hostile = hostile or {}
    data = data or mnist.load()
    model = make_model(model_name, threads=0)  # after the run, on every core of this machine
    ids = range(nodes) if isinstance(nodes, int) else nodes  # ids: a fleet may have gaps
    params, agents, histories = _agents(out, ids, model, data, hostile)
    avg_scores: dict = {}
    if params:
        avg_scores = model.evaluate(
            fleet_average.average(params), data.x_test, _targets(model, data)
        )
    avg_acc = avg_scores.get("accuracy")
    # from sequence gaps on each incoming link: immune to agents starting or stopping at
    # different moments; injected loss never reaches the inbox, so it counts as lost
    arrived = sum(a["link_arrived"] for a in agents)
    expected = sum(a["link_expected"] for a in agents)
    observed = round(1 - arrived / expected, 4) if expected else None
    gaps = sum(a["link_gaps"] for a in agents)
    burst = round((expected - arrived) / gaps, 2) if gaps else None
    alarm = loss_alarm(configured_loss, observed, expected) if configured_loss is not None else None
    t0 = min((r["time"] for h in histories.values() for r in h[:1]), default=None)
    plots = _plots(out, histories, agents, avg_acc)
    curve = fleet_average.scored(out, model, data.x_test, _targets(model, data))
    return {
        "time_to_accuracy_s": {str(t): time_to(histories, t, t0) for t in (0.95, 0.97)},
        "configured_loss": configured_loss,
        "observed_loss": observed,
        "observed_burst_mean": burst,
        "loss_kind": loss_kind,
        "loss_alarm": alarm,
        "average_model_accuracy": avg_acc,
        "average_model_mse": avg_scores.get("eval_mse"),  # a model trained with mse
        "average_model_curve": curve,  # emulate --curve; else empty
        "time_to_average_accuracy_s": {
            str(t): fleet_average.time_to(curve, t) for t in fleet_average.TARGETS
        }
        if curve
        else None,
        "elapsed_s": round(elapsed_s, 1),
        "kernel_dropped_packets": kernel_dropped,
        "hostile": {str(i): a for i, a in sorted(hostile.items())},  # not in the average
        "agents": agents,
        "plots": plots,
    }


def _agents(out: Path, ids, model, data, hostile: Mapping[int, str]):
    """Each agent's row and accuracy history, and the parameters of the honest ones' last
    checkpoints (the average model's)."""
    params, agents, histories = [], [], {}
    for i in ids:
        recs = records(out / f"agent{i}" / "metrics.jsonl")
        last = ([r for r in recs if "step" in r] or [{}])[-1]  # a resumed agent's records go on
        histories[i] = [r for r in recs if r.get("accuracy") is not None]
        state = checkpoint.load(out / f"agent{i}")
        scores: dict = {}
        if state is not None:
            if i not in hostile:
                params.append(state["params"])
            scores = model.evaluate(state["params"], data.x_test, _targets(model, data))
        agents.append({**_agent_row(i, scores, last, recs), "attack": hostile.get(i)})
    return params, agents, histories


def records(path: Path) -> list[dict]:
    """An agent's metrics records that are what an agent writes (catalog.invalid); none if
    there is no file."""
    return [r for r in read_metrics(path) if invalid(r) is None] if path.is_file() else []


def _targets(model, data) -> np.ndarray:
    """What the test set's outputs are scored against: its labels, or for a model trained
    with mse its targets, or its input where it has only labels (an autoencoder)."""
    if model.loss == "mse" and data.y_test.ndim == 1:
        return data.x_test
    return data.y_test


def _agent_row(i: int, scores: dict, last: dict, recs: list[dict]) -> dict:
    """One agent's row: its test scores, and what its last metrics record and all of its
    records say."""
    return {
        "agent": i,
        "accuracy": scores.get("accuracy"),
        "mse": scores.get("eval_mse"),
        **summary_row(last, recs),
        "steps_per_s": step_rate(recs),
        "restarts": sum(1 for r in recs if r.get("event") == "start") - 1,
    }


def step_rate(recs: list[dict]) -> float | None:
    """Training steps a second from the agent's first step record to the first that holds its
    last step, in its last session: its pace once started, whatever its start-up took (a
    device held to a small CPU share takes a while to import what it runs), and not diluted by
    a closing phase, whose records repeat the last step."""
    starts = [k for k, r in enumerate(recs) if r.get("event") == "start"]
    steps = [r for r in recs[starts[-1] if starts else 0 :] if r.get("step") and "event" not in r]
    if steps:  # to the first record of the last step: a closing phase's records stand still
        steps = steps[: next(k for k, r in enumerate(steps) if r["step"] == steps[-1]["step"]) + 1]
    if len(steps) < 2 or steps[-1]["time"] <= steps[0]["time"]:
        return None
    return round((steps[-1]["step"] - steps[0]["step"]) / (steps[-1]["time"] - steps[0]["time"]), 1)


ALARM_POINTS = 0.10  # observed minus configured loss beyond which something else is dropping


def loss_alarm(configured: float, observed: float | None, expected: int) -> str | None:
    """One line when receivers saw far more loss than configured (a host firewall, a full
    socket buffer): such a run measures that, not the configured loss."""
    if observed is None or expected < 100 or observed - configured <= ALARM_POINTS:
        return None
    return (
        f"receivers observed {observed:.1%} loss where {configured:.1%} was configured: something "
        "else drops the fleet's packets (a firewall, an overloaded host); the figures of this run "
        "do not measure the configured loss"
    )


def time_to(histories: dict[int, list[dict]], target: float, t0: float | None) -> dict:
    """Seconds from the fleet's first record until the first agent, and until every agent, had
    held-out accuracy >= target (None if never)."""
    firsts = []
    for h in histories.values():
        hit = next((r["time"] for r in h if r["accuracy"] >= target), None)
        firsts.append(None if hit is None or t0 is None else round(hit - t0, 1))
    reached = [f for f in firsts if f is not None]
    return {
        "first_agent": min(reached) if reached else None,
        "all_agents": max(reached) if len(reached) == len(firsts) and firsts else None,
    }


def _plots(out: Path, histories: dict[int, list[dict]], agents: list[dict], avg_acc) -> list[str]:
    """Held-out accuracy against time and against bytes sent per agent, with the average
    model's test accuracy at the end; the loss observed on each link; exchanges over time."""
    t0 = min((h[0]["time"] for h in histories.values() if h), default=0.0)
    end = max((h[-1]["time"] - t0 for h in histories.values() if h), default=0.0)
    sent = [a["bytes_sent"] / 1e6 for a in agents]
    mark = "average model (test set)"
    paths = plot.lines(
        out / "accuracy_vs_time",
        {f"agent {i}": [(r["time"] - t0, r["accuracy"]) for r in h] for i, h in histories.items()},
        "seconds",
        "held-out accuracy",
        "accuracy against time",
        {mark: (end, avg_acc)} if avg_acc is not None else None,
    )
    paths += plot.lines(
        out / "accuracy_vs_bytes",
        {
            f"agent {i}": [(r.get("bytes_sent", 0) / 1e6, r["accuracy"]) for r in h]
            for i, h in histories.items()
        },
        "MB sent",
        "held-out accuracy",
        "accuracy against bytes sent",
        {mark: (float(np.mean(sent)), avg_acc)} if avg_acc is not None and sent else None,
    )
    paths += plot.bars(
        out / "loss_by_link",
        {
            f"{a['agent']} <- {peer}": loss
            for a in agents
            for peer, loss in sorted(a["link_loss"].items(), key=lambda kv: int(kv[0]))
            if loss is not None
        },
        "link (receiver <- sender)",
        "observed loss",
        "loss observed on each link",
    )
    paths += plot.lines(
        out / "exchanges_over_time",
        {
            f"agent {i}": [(r["time"] - t0, _merged(r["exchanges"])) for r in h]
            for i, h in histories.items()
        },
        "seconds",
        "exchanges merged (all chunks or some)",
        "exchanges over time",
    )
    return paths


def _merged(exchanges: dict) -> int:
    """Exchanges that merged a peer's parameters: with every chunk, or (under loss) some."""
    return exchanges.get("completed", 0) + exchanges.get("partial", 0)
