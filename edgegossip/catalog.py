"""Every metric an agent reports, declared once: the key it has in each metrics.jsonl record and
in the control endpoint's `status`, its kind and unit, what it means, and where else it shows.
From this table come the Prometheus exposition (control/prometheus.py), the rows `emulate` and
`fleet collect` summarise (report/summary.py), the columns of `fleet status`, of emulate's table
and of the report page, and the metrics reference (docs/metrics.md). Adding a metric is one
Metric here and the line of the agent that computes it.

shape: "number" (one value); "by" (a {label value: number} dict, one series per label value);
"members" (a list, one series per member, 1 while listed, and 0 for the other known values);
"state" (one of `values`, one series per value, 1 for the one it has).
summary: how the run's summary takes it from an agent's records: "last" (the last record's, or
`empty`), "max" (the largest over them), or None (not summarised).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from edgegossip import clock
from edgegossip.metrics import ALARMS

STATES = ("starting", "training", "closing", "paused", "stopping")  # closing: train.phase
RUNNING = ("training", "closing")  # an agent that runs its config, as far as rollouts wait
PREFIX = "edgegossip_"  # of every Prometheus series


@dataclass(frozen=True)
class Metric:
    key: str
    help: str
    kind: str = "gauge"  # "gauge" or "counter" (counts from the agent process's start)
    unit: str = ""  # of the value under key: "MB", "s", "ms", "bytes", "ratio", "" (a count)
    prometheus: str | None = None  # the series' name, without edgegossip_; None: not exposed
    factor: float = 1.0  # the value times this is in the series' base unit
    shape: str = "number"
    label: str = ""  # "by" and "members": the label; "state": the series' name
    values: tuple[str, ...] = ()  # "members" and "state": the values it may take
    summary: str | None = None
    summary_key: str = ""  # its key in the summary's agent rows, if not key
    empty: object = None  # the summary's value for an agent that never reported it
    column: str = ""  # its heading in emulate's table and the report page (summary rows)
    scale: float = 1.0  # the value times this is what the column shows
    status: str = ""  # its heading in `fleet status` (live rows, as the agent reports it)


METRICS: tuple[Metric, ...] = (
    Metric(
        "step",
        "training step (resumes from the checkpoint)",
        prometheus="step",
        summary="last",
        summary_key="steps",
        empty=0,
        column="steps",
        status="step",
    ),
    Metric("epoch", "epochs over this device's shard", prometheus="epoch", status="epoch"),
    Metric(
        "closing_steps",
        "steps of the closing phase (train.phase): exchanges only, no training",
        summary="last",
        empty=0,
    ),
    Metric(
        "loss",
        "mean training loss over the last record's steps",
        prometheus="training_loss",
        status="loss",
    ),
    Metric(
        "accuracy",
        "accuracy on the held-out slice",
        unit="ratio",
        prometheus="heldout_accuracy_ratio",
        status="accuracy",
    ),
    Metric(
        "eval_mse",
        "mean squared error per element on the held-out slice (a model trained with mse; its "
        "accuracy is null)",
        prometheus="heldout_mse",
        summary="last",
        status="mse",
    ),
    Metric(
        "exchanges_initiated_per_step",
        "exchanges this agent opened per step of this run, beside train.p",
        summary="last",
        column="exchanges/step",
    ),
    Metric(
        "bytes_sent",
        "parameter bytes sent to peers, framing included",
        "counter",
        "bytes",
        "sent_bytes_total",
        summary="last",
        empty=0,
        column="MB sent",
        scale=1e-6,
    ),
    Metric(
        "bytes_received", "bytes of datagrams accepted", "counter", "bytes", "received_bytes_total"
    ),
    Metric(
        "datagrams_sent",
        "datagrams sent",
        "counter",
        prometheus="datagrams_sent_total",
        summary="last",
        empty=0,
        column="datagrams sent",
    ),
    Metric(
        "datagrams_received",
        "datagrams accepted",
        "counter",
        prometheus="datagrams_received_total",
        summary="last",
        empty=0,
        column="received",
    ),
    Metric(
        "datagrams_dropped",
        "datagrams not accepted, late and refused together",
        "counter",
        summary="last",
        empty=0,
    ),
    Metric(
        "datagrams_lost",
        "datagrams from peers that never arrived (from sequence gaps)",
        "counter",
        prometheus="datagrams_lost_total",
        summary="last",
        empty=0,
        column="lost",
        status="lost",
    ),
    Metric(
        "datagrams_late",
        "datagrams that arrived when nothing could use them any more",
        "counter",
        prometheus="datagrams_late_total",
        summary="last",
        empty=0,
        column="late",
        status="late",
    ),
    Metric(
        "datagrams_refused",
        "datagrams that failed a check (reasons: drops)",
        "counter",
        prometheus="datagrams_refused_total",
        summary="last",
        empty=0,
        column="refused",
        status="refused",
    ),
    Metric(
        "drops",
        "datagrams dropped, by reason (docs/metrics.md lists them)",
        "counter",
        prometheus="datagrams_dropped_total",
        shape="by",
        label="reason",
        summary="last",
        empty={},
    ),
    Metric(
        "exchanges",
        "exchanges by outcome",
        "counter",
        prometheus="exchanges_total",
        shape="by",
        label="outcome",
        summary="last",
        empty={},
    ),
    Metric(
        "send_errors",
        "sends the kernel refused (a peer unreachable, an interface gone): datagrams lost",
        "counter",
        prometheus="send_errors_total",
        summary="last",
        empty=0,
    ),
    Metric(
        "link_arrived",
        "datagrams that arrived on the incoming links, between each session's first and last",
        "counter",
        summary="last",
        empty=0,
    ),
    Metric(
        "link_expected",
        "datagrams the incoming links numbered between each session's first and last arrival",
        "counter",
        summary="last",
        empty=0,
    ),
    Metric(
        "link_gaps",
        "runs of datagrams the incoming links numbered that did not arrive (each a burst)",
        "counter",
        summary="last",
        empty=0,
    ),
    Metric(
        "link_loss",
        "loss observed on the link from each peer",
        unit="ratio",
        prometheus="link_loss_ratio",
        shape="by",
        label="peer",
        summary="last",
        empty={},
    ),
    Metric(
        "send_rate_mbps",
        "the pace the rate controller allows, the mean of the outgoing links' (net.congestion)",
        unit="Mbit/s",
        prometheus="send_rate_bits_per_second",
        factor=1e6,
        summary="last",
        column="pace Mbit/s",
        status="pace_mbps",
    ),
    Metric(
        "link_rate_mbps",
        "the pace of each outgoing link, by peer (net.congestion)",
        unit="Mbit/s",
        prometheus="link_send_rate_bits_per_second",
        factor=1e6,
        shape="by",
        label="peer",
        summary="last",
        empty={},
    ),
    Metric(
        "link_queue_delay_ms",
        "how long each outgoing link's datagrams last queued on the way, by peer: their one-way "
        "delay above its least (the receivers' reports)",
        unit="ms",
        prometheus="link_queue_delay_seconds",
        factor=1e-3,
        shape="by",
        label="peer",
        summary="last",
        empty={},
    ),
    Metric(
        "link_congested",
        "report intervals each outgoing link showed congestion in, by peer: a queue above its "
        "target, or loss beyond the link's random loss",
        "counter",
        prometheus="link_congested_intervals_total",
        shape="by",
        label="peer",
        summary="last",
        empty={},
    ),
    Metric(
        "congested_intervals",
        "report intervals that showed congestion, all outgoing links together",
        "counter",
        prometheus="congested_intervals_total",
        summary="last",
        empty=0,
        column="congested",
    ),
    Metric(
        "deadline_s_by_link",
        "each incoming link's exchange deadline",
        unit="s",
        shape="by",
        label="peer",
        summary="last",
        empty={},
    ),
    Metric(
        "push_weight",
        "push-sum weight held (gossip-push)",
        prometheus="push_weight",
        summary="last",
    ),
    Metric(
        "merged_by_peer",
        "rounds merged that moved this model, by the peer they came from (gossip)",
        "counter",
        prometheus="merged_rounds_total",
        shape="by",
        label="peer",
        summary="last",
        empty={},
    ),
    Metric(
        "push_lent",
        "push-sum weight lent to each peer, net of what it gave back (at most LEND_SHARE)",
        prometheus="push_lent",
        shape="by",
        label="peer",
        summary="last",
        empty={},
    ),
    Metric(
        "push_reclaimed",
        "push-sum weight taken back from peers gone silent",
        "counter",
        prometheus="push_reclaimed_total",
        summary="last",
    ),
    Metric(
        "peak_rss_mb",
        "peak resident memory of the agent",
        unit="MB",
        prometheus="peak_rss_bytes",
        factor=1e6,
        summary="max",
        column="peak RSS MB",
        status="rss_mb",
    ),
    Metric(
        "disk_written_mb",
        "what the agent wrote to disk since it started",
        "counter",
        "MB",
        "disk_written_bytes_total",
        1e6,
        summary="last",
    ),
    Metric(
        "disk_written_mb_per_h",
        "the agent's disk writes per hour in steady state: between the end of its first and of "
        "its latest checkpoint (start-up's writes excluded; none until two are written)",
        unit="MB",
        summary="last",
        column="disk MB/h",
        status="written_mb_h",
    ),
    Metric(
        "disk_free_mb",
        "free space where the agent writes",
        unit="MB",
        prometheus="disk_free_bytes",
        factor=1e6,
        summary="last",
        column="disk free MB",
        status="free_mb",
    ),
    Metric(
        "checkpoint_age_s",
        "time since the last checkpoint",
        unit="s",
        prometheus="checkpoint_age_seconds",
        status="ckpt_age_s",
    ),
    Metric(
        "checkpoint_stall_ms", "the longest a checkpoint held training", unit="ms", summary="max"
    ),
    Metric(
        "step_ms", "a training step's time (median of the last record's)", unit="ms", summary="last"
    ),
    Metric(
        "uptime_s",
        "time since the agent started",
        unit="s",
        prometheus="uptime_seconds",
        status="uptime_s",
    ),
    Metric(
        "silent_peers",
        "peers silent now: weight goes only to peers heard",
        prometheus="peer_silent",
        shape="members",
        label="peer",
        summary="last",
        empty=[],
    ),
    Metric(
        "suspect_peers",
        "peers whose rounds the merge bound clips or refuses again and again (protocol/bound.py)",
        prometheus="peer_suspect",
        shape="members",
        label="peer",
        summary="last",
        empty=[],
    ),
    Metric(
        "suspicion_by_peer",
        "each peer's suspicion: the running mean of where its rounds land, 0 within the "
        "radius, 1/2 just past it, 1 refused; its say in a merge is 1 minus this",
        unit="ratio",
        prometheus="peer_suspicion",
        shape="by",
        label="peer",
        summary="last",
        empty={},
    ),
    Metric(
        "merges_clipped",
        "rounds whose difference was clipped to the merge radius before merging",
        "counter",
        prometheus="merges_clipped_total",
        summary="last",
        empty=0,
        column="merges clipped",
    ),
    Metric(
        "merges_refused",
        "rounds refused whole: farther than the refusal multiple of the merge radius",
        "counter",
        prometheus="merges_refused_total",
        summary="last",
        empty=0,
        column="merges refused",
    ),
    Metric(
        "merge_radius",
        "the merge radius last used: how far one round may move the model (L2, whole model)",
        prometheus="merge_radius",
        summary="last",
    ),
    Metric(
        "alarms",
        "alarms raised now (protocol/liveness.py)",
        prometheus="alarm",
        shape="members",
        label="alarm",
        values=tuple(ALARMS),
        summary="last",
        empty=[],
    ),
    Metric(
        "state",
        "what the agent is doing",
        prometheus="state",
        shape="state",
        label="state",
        values=STATES,
    ),
    Metric(
        "clock",
        "whether the wall clock is synchronised (clock.py)",
        prometheus="clock",
        shape="state",
        label="clock",
        values=clock.STATES,
        status="clock",
    ),
)
BY_KEY = {m.key: m for m in METRICS}


def summary_row(last: dict, records: list[dict]) -> dict:
    """An agent's summarised metrics, from its records (the last one, and all of them)."""
    row: dict = {}
    for m in METRICS:
        if m.summary == "last":
            row[m.summary_key or m.key] = last.get(m.key, m.empty)
        elif m.summary == "max":
            seen = [r[m.key] for r in records if r.get(m.key)]
            row[m.summary_key or m.key] = max(seen, default=m.empty)
    return row


def columns() -> dict[str, tuple[str, float]]:
    """{heading: (summary key, scale)} of the metrics with a column, in table order."""
    return {m.column: (m.summary_key or m.key, m.scale) for m in METRICS if m.column}


def series(key: str) -> str:
    """The Prometheus series of the metric under key, as a query names it."""
    name = BY_KEY[key].prometheus
    if name is None:
        raise KeyError(f"{key} has no Prometheus series")
    return PREFIX + name


def status_columns() -> dict[str, str]:
    """{heading: key} of the metrics `fleet status` shows, in table order."""
    return {m.status: m.key for m in METRICS if m.status}


# what every step record (one with an accuracy) carries besides its metrics: the report plots
# these against each other
STEP_KEYS = ("time", "step", "exchanges")


def _number(v, none_ok: bool = True) -> bool:
    if v is None:
        return none_ok
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _fits(m: Metric, v) -> bool:
    if m.shape == "number":
        return _number(v)
    if m.shape == "by":
        return isinstance(v, dict) and all(isinstance(k, str) and _number(x) for k, x in v.items())
    if m.shape == "members":
        return isinstance(v, list)
    return isinstance(v, str)  # state


def invalid(record) -> str | None:
    """Why a metrics record is not one an agent writes (None if it is): a JSON object with a
    finite `time`, each metric of this table that it holds of its shape, and a step record
    holding STEP_KEYS. A device's records are its word: what fails is refused, never read."""
    if not isinstance(record, dict):
        return f"a record is {type(record).__name__}, not an object"
    if not _number(record.get("time"), none_ok=False):
        return "a record has no time"
    if "accuracy" in record:
        missing = [k for k in STEP_KEYS if k not in record]
        if missing:
            return f"a step record has no {missing[0]}"
    for key, v in record.items():
        m = BY_KEY.get(key)
        if m is not None and not _fits(m, v):
            return f"{key} is {json_type(v)}, not a {m.shape}"
    return None


def json_type(v) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean"}.get(
        type(v), repr(v)[:20]
    )
