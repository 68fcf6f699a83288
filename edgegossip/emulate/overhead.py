"""`edgegossip bench overhead`: what gossip costs the training it is there to help. It lives beside
the emulator because it drives emulated fleets.

One invocation runs the same emulated fleet (namespaces, kernel loss, tbf caps: emulate's) as
local-only training, the reference, before the gossip variants (algorithm, payload and, where a
variant names one, its own link cap) and, by default, again after them, each for --seconds;
with --rounds N, N times over, a local run between rounds (schedule()). Per
agent, from its own records: steps per second and their ratio to the reference (the mean of the
local runs' means), the CPU seconds of its training thread, receive thread and send thread (each
thread's own CPU clock), and the seconds until its held-out accuracy first reached the target. Per
run: the mean ratio, the first and the last agent to reach the target, and the test accuracy of the
average model. Agents share this machine's cores, so a data plane's CPU is taken from the training
of every agent: the ratio is what gossip costs here, not on a device with cores of its own; the CPU
seconds per exchanged megabyte are what carries over."""

from __future__ import annotations

import statistics
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path

from edgegossip import algorithms
from edgegossip import config as agent_config
from edgegossip.algorithms import DEFAULT
from edgegossip.algorithms.local import Local
from edgegossip.dataplane import payload as agent_payload
from edgegossip.emulate import floor
from edgegossip.emulate.fleet import EmulatedFleet, FleetSpec
from edgegossip.metrics import read
from edgegossip.models import make_model
from edgegossip.report.summary import summarize, time_to


def _cpu_times() -> list[int]:
    """The machine's CPU time by kind (/proc/stat's first line, in clock ticks)."""
    with open("/proc/stat") as f:
        return [int(v) for v in f.readline().split()[1:]]


def _steal(before: list[int], after: list[int]) -> float | None:
    """The share of the machine's CPU time a hypervisor took (steal) between two readings."""
    d = [b - a for a, b in zip(before, after)]
    return round(d[7] / sum(d), 4) if len(d) > 7 and sum(d) > 0 else None


def _fleet(
    name: str, spec: FleetSpec, progress, loads: list[floor.Load] | None = None
) -> list[dict]:
    """Run one fleet to its end; with loads (one per node), the floor's processes beside its
    local-only agents, whose results it returns."""
    fleet = EmulatedFleet(spec)
    floors = floor.Floors()
    try:
        fleet.up()
        if loads:
            assert fleet.lan is not None, "the floor runs in the nodes' namespaces"
            addrs = [(h, p + floor.PORT_OFFSET) for h, p in fleet.addresses()]
            floors.start(
                [
                    (
                        fleet.lan.exec_args(i)
                        + floor.argv(
                            addrs[i],
                            [a for j, a in enumerate(addrs) if j != i],
                            load,
                            fleet.configs[i].rate_mbps * 1e6 / 8,  # the agent's own pace
                            spec.duration_s,
                            spec.out / f"floor{i}.json",
                        ),
                        spec.out / f"floor{i}.json",
                    )
                    for i, load in enumerate(loads)
                ]
            )
        fleet.wait(spec.duration_s + 120)
        if fleet.failed():
            raise RuntimeError(f"agent {fleet.failed()[0]} failed: {fleet.why(fleet.failed()[0])}")
        found = floors.finish(30.0) if loads else []
    finally:
        floors.kill()
        fleet.down()
    progress(f"{name}: done")
    return found


def _traffic(
    bytes_sent: int,
    datagrams_sent: int,
    bytes_received: int,
    datagrams_received: int,
    wakes: int | None,
    receive_cpu_s: float | None,
    send_cpu_s: float | None,
    seconds: float,
) -> dict:
    """The data-plane columns of an agent row, from an agent's counts or a floor process's."""
    mb = (bytes_sent + bytes_received) / 1e6
    # None, not 0, where the agent has no data-plane threads (local; all-reduce's TCP ring)
    threads = [c for c in (receive_cpu_s, send_cpu_s) if c is not None]
    net_cpu = sum(threads) if threads else None
    return {
        "receive_cpu_s": receive_cpu_s,
        "send_cpu_s": send_cpu_s,
        "mb_exchanged": round(mb, 1),
        # what a floor replays (floor.Load)
        "mb_sent_per_s": round(bytes_sent / seconds / 1e6, 4),
        "datagram_bytes": round(bytes_sent / datagrams_sent) if datagrams_sent else None,
        "net_cpu_ms_per_mb": round(net_cpu * 1e3 / mb, 2) if mb and net_cpu is not None else None,
        "datagrams_per_wake": round(datagrams_received / wakes, 1) if wakes else None,
    }


def _agent_row(recs: list[dict]) -> dict:
    start = next(r for r in recs if r.get("event") == "start")
    stop = [r for r in recs if r.get("event") == "stop"][-1]
    span = max(stop["time"] - start["time"], 1e-9)
    cpu = stop.get("cpu_s") or {}
    return {
        "steps": stop["step"],
        "steps_per_s": round(stop["step"] / span, 2),
        "train_cpu_s": cpu.get("train"),
        "process_cpu_s": cpu.get("process"),
        **_traffic(
            stop.get("bytes_sent", 0),
            stop.get("datagrams_sent", 0),
            stop.get("bytes_received", 0),
            stop.get("datagrams_received", 0),
            stop.get("receive_batches"),
            cpu.get("receive"),
            cpu.get("send"),
            span,
        ),
    }


def _floor_row(f: dict) -> dict:
    """A floor process's figures, in the columns of a data plane's."""
    return _traffic(
        f["bytes_sent"],
        f["datagrams_sent"],
        f["bytes_received"],
        f["datagrams_received"],
        f["receive_batches"],
        f["receive_cpu_s"],
        f["send_cpu_s"],
        f["seconds"],
    )


# Where the local-only reference runs: first only, or first and again last. This machine's speed
# drifts by several percent within an hour (local's own steps per second moved 7% between three
# invocations, docs/changelog.md), more than the effects measured here, so by default the variants
# are compared with the mean of a local run before and one after them, and the drift is reported.
REFERENCES = ("around", "before")


def reference_rate(local_rates: list[float]) -> dict:
    """The reference: the mean steps per second of the local runs, and their drift (the last
    against the first, a fraction; 0 with one run)."""
    first, last = local_rates[0], local_rates[-1]
    return {
        "steps_per_s": round(statistics.mean(local_rates), 2),
        "local_steps_per_s": local_rates,
        "drift": round(last / first - 1, 4) if first else 0.0,
    }


def local_at(local_rates: dict[int, float], i: int) -> float:
    """Local's steps per second at run i, drawn on a straight line between the local runs just
    before and just after it (local_rates: run index -> steps per second): the fleets take equal
    turns, and this machine's speed mostly moves one way over a few fleets (docs/changelog.md).
    With a local run on one side only, that run's rate."""
    before = max((j for j in local_rates if j <= i), default=None)
    after = min((j for j in local_rates if j >= i), default=None)
    if before is None or after is None or before == after:
        nearest = after if before is None else before
        assert nearest is not None, "no local run"
        return local_rates[nearest]
    a, b = local_rates[before], local_rates[after]
    return a + (b - a) * (i - before) / (after - before)


def _sends_datagrams(variant: str) -> bool:
    """Whether a variant's run is traffic a floor can replay: a gossip algorithm's datagrams."""
    return variant != floor.NAME and algorithms.get(variant).datagrams


def schedule(variants, reference: str, rate: str | None = None, rounds: int = 1) -> list[tuple]:
    """(output folder name, algorithm, payload, link cap) of each fleet, in the order they run.
    A variant is (algorithm, payload) on links capped at `rate`, or (algorithm, payload, cap)
    with a cap of its own (None: uncapped), so capped and uncapped links meet one reference.

    rounds > 1 (around only) runs the variants that many times, in reverse order every other
    round, with a local run between rounds: each variant run is judged against the local runs
    just before and after it, and the one that ran last in a round runs first in the next, so
    neither a drift nor its place in the order favours a variant."""
    if reference not in REFERENCES:
        raise ValueError(f"reference {reference!r}: one of {', '.join(REFERENCES)}")
    if rounds < 1 or (rounds > 1 and reference != "around"):
        raise ValueError("rounds above 1 need the reference around them")
    for k, (a, p, *own) in enumerate(variants):
        cap = own[0] if own else rate
        if a == floor.NAME and not any(
            _sends_datagrams(b) and q == p and (o[0] if o else rate) == cap
            for b, q, *o in variants[:k]
        ):
            raise ValueError(
                f"{floor.NAME}:{p} replays the last gossip run of {p} on the same links: "
                "name that variant before it"
            )
    # local-only sends nothing: its payload is only the label of the reference rows
    local = (Local.name, agent_config.default("payload"), rate)
    named = []
    for a, p, *own in variants:
        cap = own[0] if own else rate
        name = f"{a}-{p}" if cap == rate else f"{a}-{p}-{cap or 'uncapped'}"
        named.append((name, a, p, cap))
    if rounds == 1:
        out = [(f"{local[0]}-{local[1]}", *local), *named]
        if reference == "around":
            out.append((f"{local[0]}-{local[1]}-after", *local))
        return out
    out = [(f"{local[0]}-{local[1]}-0", *local)]
    for k in range(1, rounds + 1):
        turn = named if k % 2 else named[::-1]
        out += [(f"{name}-{k}", *rest) for name, *rest in turn]
        out.append((f"{local[0]}-{local[1]}-{k}", *local))
    return out


def by_variant(runs: list[dict]) -> list[dict]:
    """Each variant's runs over the rounds, in the order it first ran: its share of local's
    steps (of_local_here) and the seconds until all its agents reached the target, per round,
    with the median and range of the share."""
    out: dict[tuple, dict] = {}
    for r in runs:
        if r["algorithm"] == Local.name:
            continue
        v = out.setdefault(
            (r["algorithm"], r["payload"], r["rate"]),
            {
                "algorithm": r["algorithm"],
                "payload": r["payload"],
                "rate": r["rate"],
                "of_local_here": [],
                "time_to_target_all_s": [],
            },
        )
        v["of_local_here"].append(r["of_local_here"])
        v["time_to_target_all_s"].append(r["time_to_target_all_s"])
    for v in out.values():
        shares = v["of_local_here"]
        v["median"] = round(statistics.median(shares), 3)
        v["min"], v["max"] = min(shares), max(shares)
    return list(out.values())


def _measure(spec: FleetSpec, target: float, data):
    """One finished fleet's per-agent rows (of_local not yet set) and its run summary."""
    folder, loss = spec.out, spec.network.loss
    s = summarize(folder, spec.nodes, spec.model, loss, "kernel", spec.duration_s, None, data)
    rows = []
    histories = {}
    for i in range(spec.nodes):
        recs = read(folder / f"agent{i}" / "metrics.jsonl")
        histories[i] = [r for r in recs if "accuracy" in r and r.get("accuracy") is not None]
        rows.append({"agent": i, **_agent_row(recs)})
    t0 = min((h[0]["time"] for h in histories.values() if h), default=None)
    reached = time_to(histories, target, t0)
    for r in rows:
        r["time_to_target_s"] = time_to({r["agent"]: histories[r["agent"]]}, target, t0)[
            "first_agent"
        ]
    return rows, {
        "steps_per_s": round(statistics.mean(r["steps_per_s"] for r in rows), 2),
        "time_to_target_first_s": reached["first_agent"],
        "time_to_target_all_s": reached["all_agents"],
        "average_model_accuracy": s["average_model_accuracy"],
        "observed_loss": s["observed_loss"],
    }


DEFAULT_VARIANTS = (f"{DEFAULT}:float32", f"{DEFAULT}:int8")


@dataclass(frozen=True)
class Plan:
    """What `bench overhead` runs: `fleet`, what every run shares (its size, length, model,
    network, settings and the folder each run writes under, run/), each run setting its own
    algorithm, payload and link cap; and the variants beside the local reference."""

    fleet: FleetSpec
    variants: tuple[tuple, ...] = ((DEFAULT, "float32"), (DEFAULT, "int8"))
    target: float = 0.95
    reference: str = "around"
    rounds: int = 1


def fleet(out: Path | None = None, settings: dict | None = None, **given) -> FleetSpec:
    """The fleet every run of a Plan shares: FleetSpec.of's keywords (nodes, duration_s, model,
    network, ...; their defaults are the CLI's) and agent settings, local-only in namespaces,
    under `out` or a new temporary folder."""
    out = out or Path(tempfile.mkdtemp(prefix="bench-overhead-"))
    return FleetSpec.of(settings, algorithm=Local.name, backend="netns", out=out, **given)


def run(plan: Plan, progress=print) -> dict:
    from edgegossip.data import mnist

    spec, net = plan.fleet, plan.fleet.network
    order = schedule(plan.variants, plan.reference, net.rate, plan.rounds)
    data = mnist.load()
    runs: list[dict] = []
    sent: dict[tuple, list[dict]] = {}  # (payload, cap): the agent rows of its last gossip run
    for name, algorithm, payload, cap in order:
        runs.append(_one(plan, name, (algorithm, payload, cap), sent, data, progress))
    local_rates = {i: r["steps_per_s"] for i, r in enumerate(runs) if r["algorithm"] == Local.name}
    ref = reference_rate(list(local_rates.values()))
    for i, r in enumerate(runs):
        r["of_local"] = round(r["steps_per_s"] / ref["steps_per_s"], 3)
        r["of_local_here"] = round(r["steps_per_s"] / local_at(local_rates, i), 3)
        for a in r["agents"]:
            a["of_local"] = round(a["steps_per_s"] / ref["steps_per_s"], 3)
    return {
        "benchmark": "overhead",
        "nodes": spec.nodes,
        "seconds": spec.duration_s,
        "model": spec.model,
        "settings": dict(spec.settings),  # the agents' beside their defaults (each run's payload)
        **{k: getattr(net, k) for k in ("loss", "loss_model", "burst", "rate")},
        **{k: getattr(plan, k) for k in ("target", "rounds")},
        "reference": ref,
        "runs": runs,
        "variants": by_variant(runs),
        "output": str(spec.out),
    }


def _one(plan: Plan, name: str, step: tuple, sent: dict, data, progress) -> dict:
    """One fleet of the schedule, measured; a gossip run's agent rows kept in `sent` for the
    floor that replays them."""
    algorithm, payload, cap = step
    base = plan.fleet
    loads = _loads(base.model, payload, sent[(payload, cap)]) if algorithm == floor.NAME else None
    spec = replace(
        base,
        algorithm=Local.name if loads else algorithm,
        network=replace(base.network, rate=cap),
        out=base.out / name,
        settings={**base.settings, "payload": payload},
    )
    progress(f"{name}: {spec.nodes} agents for {spec.duration_s:g} s")
    before = _cpu_times()
    found = _fleet(name, spec, progress, loads)
    steal = _steal(before, _cpu_times())
    rows, summary = _measure(spec, plan.target, data)
    for row, f in zip(rows, found):
        row.update(_floor_row(f))
    if found:  # what the kernel dropped of the replayed traffic, as a gossip run's loss
        sent_n = sum(f["datagrams_sent"] for f in found)
        got = sum(f["datagrams_received"] for f in found)
        summary["observed_loss"] = round(1 - got / sent_n, 4) if sent_n else None
    if _sends_datagrams(algorithm):
        sent[(payload, cap)] = rows
    return {
        "algorithm": algorithm,
        "payload": payload,
        "rate": cap,
        **summary,
        "steal": steal,
        "agents": rows,
    }


def _loads(model: str, payload: str, rows: list[dict]) -> list:
    """What each node of the gossip run sent, for the floor to replay."""
    n_chunks = (
        agent_payload.codec(payload)
        .plan(make_model(model).n_params, agent_config.default("chunk_bytes"))
        .n_chunks
    )
    return [floor.Load(a["mb_sent_per_s"] * 1e6, a["datagram_bytes"], n_chunks) for a in rows]
