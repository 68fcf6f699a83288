"""`edgegossip emulate`: a fleet of agents on this machine with real kernel packet loss."""

from __future__ import annotations

import dataclasses
import json
import signal
import time
from collections import Counter
from pathlib import Path

import click

from edgegossip import catalog, exit_codes
from edgegossip.algorithms import DEFAULT as DEFAULT_ALGORITHM
from edgegossip.algorithms import NAMES as ALGORITHMS
from edgegossip.algorithms import attack
from edgegossip.cli import options
from edgegossip.cli.render import fail, score, table
from edgegossip.dataplane.drops import KINDS
from edgegossip.run import MAX_SHARE, MIN_SHARE

# the table printed at the end (without --json)
COLUMNS = ("agent", "accuracy", *(key for key, _ in catalog.columns().values()))


def _progress_line(i: int, r: dict | None, alive: bool) -> str:
    if r is None:
        return f"  agent {i}: starting" if alive else f"  agent {i}: not running"
    ex = r.get("exchanges", {})
    return (
        f"  agent {i}: step {r['step']:>6}  loss {r.get('loss') or 0:.3f}  "
        f"{score(r.get('accuracy'), r.get('eval_mse'))}"
        f"  exchanges {sum(ex.values()):>4} ({ex.get('partial', 0)} partial, "
        f"{ex.get('timed_out', 0)} timed out)  datagrams "
        + ", ".join(f"{k} {r.get(f'datagrams_{k}', 0)}" for k in KINDS)
        + (f"  alarm: {', '.join(r['alarms'])}" if r.get("alarms") else "")
        + ("" if alive else "  [stopped]")
    )


@click.command()
@options.nodes(64, least=2)
@click.option(
    "--algorithm", type=click.Choice(ALGORITHMS), default=DEFAULT_ALGORITHM, show_default=True
)
@options.network(loss_help="Fraction of packets from other agents the kernel drops at each node.")
@options.run_settings(
    batch="Examples per training step on each device.",
    checkpoint_every_s="Seconds between each agent's checkpoints: what a device that loses "
    "power loses.",
)
@click.option(
    "--cpu",
    "cpu",
    multiple=True,
    metavar="NODES:SHARE",
    help="Give these devices SHARE cores of this machine (e.g. 3:0.25, 0-7:0.1, all:0.5), the "
    "kernel's quota (cgroups): slow devices beside fast ones; repeatable.",
)
@click.option(
    "--devices",
    "devices",
    default=None,
    metavar="COUNT:PROFILE,...",
    help="The fleet as Raspberry Pi boards, e.g. 8:pi-zero-2w,4:pi4,4:pi5 (the node count "
    "follows): each device's CPU share and memory limit from its board's profile.",
)
@click.option(
    "--device-scale",
    "device_scale",
    type=click.FloatRange(min=MIN_SHARE, max=MAX_SHARE),
    default=None,
    help="With --devices: the cores of this machine a Pi 5 gets, the others their ratio of it "
    "[default: 0.25].",
)
@click.option(
    "--duration", "duration_s", type=click.FloatRange(min=0), default=0.0, help="Seconds to train."
)
@click.option("--epochs", type=click.FloatRange(min=0), default=0.0, help="Epochs over each shard.")
@click.option(
    "--closing",
    "closing_s",
    type=click.FloatRange(min=0),
    default=0.0,
    help="The last SECONDS of --duration in the closing phase (train.phase): no more "
    "training, every step an exchange, so that each device's own model comes to the average; "
    "every device enters it at once, SECONDS before the first to start ends its --duration.",
)
@options.own_dataset(
    "What the agents train on: a data set's shards (edgegossip data fetch NAME); a .npz of x, y "
    "(x_eval, y_eval; x_test, y_test to score the average model) cut across the nodes; or a "
    "folder of one .npz per node."
)
@click.option(
    "--train-backend",
    type=options.choice("backend"),
    default=options.default("backend"),
    show_default=True,
    help="What runs each agent's training step.",
)
@options.network_backend("netns needs root; loopback injects loss in the receive path.")
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Output folder (default runs/emulate-TIMESTAMP).",
)
@click.option(
    "--cleanup",
    is_flag=True,
    help="Remove namespaces, links, device cgroups and agents left by an earlier run.",
)
@click.option(
    "--export",
    "export_kind",
    type=click.Choice(["compose"]),
    default=None,
    help="Write this fleet as containers into --out instead of running it: compose.yaml, "
    "Containerfile, entrypoint, one agent config per node (Docker or Podman).",
)
@click.option(
    "--base", default=None, help="With --export: the base image (default debian:bookworm-slim)."
)
@click.option(
    "--metrics-port",
    type=click.IntRange(0, 65535),
    default=0,
    show_default=True,
    help="Serve each agent's Prometheus /metrics on this port (loopback: PORT + id; netns: at "
    "the agent's address inside its namespace); 0: none.",
)
@click.option(
    "--curve",
    is_flag=True,
    help="Sample the fleet's average model at every --checkpoint-every-s (each agent writes a "
    "checkpoint that often) and score the samples after the run: average_model_curve and "
    "time_to_average_accuracy_s in the summary.",
)
@click.option(
    "--hostile",
    "hostile",
    multiple=True,
    metavar="NODES:ATTACK",
    help="These devices (e.g. 7 or 6,7) attack the fleet instead of training honestly, with "
    "their own keys: " + ", ".join(attack.ATTACKS) + " (algorithms/attack.py; gossip "
    "algorithms). The average model is then the honest devices'.",
)
@click.option("--json", "as_json", is_flag=True)
def emulate(backend, out, cleanup, export_kind, base, curve, as_json, **settings) -> None:
    """Run NODES agents, each a light device in its own network namespace on one bridge, for a
    while. --json: the summary, with per agent rows (agent, accuracy, steps, exchanges,
    exchanges_initiated_per_step beside the configured p, bytes and datagrams, drops, peak_rss_mb,
    deadline_s_by_link: each link's last deadline, peer id -> seconds; link_loss: the loss
    observed on each incoming link, peer id -> fraction; steps_per_s: its pace from its first
    step to its last; device, cpu_share, cpu_throttled_s, memory_limit_mb, memory_peak_mb,
    oom_kills: its board, the limits the kernel held it to, the most memory its group held and
    the processes killed at its limit, null where none), "plots" (PNG and SVG paths) and "report"
    (OUT/report.html)."""
    if cleanup:
        _cleanup(as_json)
        return
    if export_kind and out is None:
        fail("--export needs --out DIR", exit_codes.USAGE)
    if not export_kind:
        backend = options.resolve_network_backend(backend)
    if not settings["duration_s"] and not settings["epochs"]:
        fail("give --duration SECONDS or --epochs E", exit_codes.USAGE)
    every = settings["checkpoint_every_s"]
    if curve and (export_kind or not settings["duration_s"] or every >= settings["duration_s"]):
        fail(
            "--curve samples at every --checkpoint-every-s of a --duration: give both, the "
            "first the smaller, and no --export",
            exit_codes.USAGE,
        )
    spec = _spec(
        settings,
        "netns" if export_kind else backend,
        out,
        check_plots=not export_kind,
        export_compose=bool(export_kind),
    )
    if export_kind:
        _export(spec, base, as_json)
        return
    if backend == "loopback" and spec.network.rate:
        # tbf needs namespaces; the agents still pace at the configured rate
        spec = dataclasses.replace(spec, network=dataclasses.replace(spec.network, rate=None))
    summary = _run(spec, as_json, every if curve else None)
    if as_json:
        click.echo(json.dumps(summary))
    else:
        _show(summary, spec.network.loss)
    if summary["loss_alarm"]:
        fail(summary["loss_alarm"], exit_codes.FAILURE)


def _cleanup(as_json: bool) -> None:
    from edgegossip.emulate import cgroups, netns

    if not netns.is_root():
        fail("--cleanup needs root", exit_codes.NEEDS_ROOT)
    removed = netns.cleanup() + cgroups.cleanup()
    click.echo(
        json.dumps({"removed": removed})
        if as_json
        else (f"removed {len(removed)}: {' '.join(removed)}" if removed else "nothing to remove")
    )


def _spec(
    settings: dict, backend: str, out: Path | None, check_plots: bool, export_compose: bool = False
):
    """The FleetSpec of the options, each checked (one line and exit 2 or 4 if not)."""
    from edgegossip.data import mnist, own
    from edgegossip.emulate.fleet import FleetSpec
    from edgegossip.errors import UsageError
    from edgegossip.report import plot

    try:
        _check_closing(settings, export_compose)
        _limits(settings, click.get_current_context(silent=True))
        network = options.network_of(settings, settings["nodes"], backend)
        settings.update(model=_model(settings["model"]))
        settings["hostile"] = _hostile(settings["hostile"], settings["nodes"], settings)
        if check_plots:
            plot.require()  # refused now, not after the run
        if own.named(settings["data"]):
            mnist.load(name=settings["data"])
        else:
            own.files_of(settings["data"], settings["nodes"])
            own.check_partition(settings["data"], settings["partition"])
    except (ValueError, UsageError) as e:
        fail(str(e), exit_codes.USAGE)
    except mnist.DataError as e:
        fail(str(e), exit_codes.MISSING_DATA)
    if export_compose and not own.named(settings["data"]):
        fail("--export compose takes a named data set (mnist, fashion-mnist)", exit_codes.USAGE)
    out = out or Path("runs") / time.strftime("emulate-%Y%m%d-%H%M%S")
    trains_with = {"backend": settings.pop("train_backend")}  # the agents' setting
    return FleetSpec.of(trains_with, backend=backend, out=out, network=network, **settings)


def _hostile(given: tuple[str, ...], nodes: int, settings: dict) -> tuple[tuple[int, str], ...]:
    """--hostile NODES:ATTACK, each checked: (node, attack) pairs."""
    from edgegossip.errors import UsageError

    out: dict[int, str] = {}
    for g in given:
        ids, _, name = g.rpartition(":")
        if name not in attack.ATTACKS or not ids:
            names = ", ".join(attack.ATTACKS)
            raise UsageError(f"--hostile {g}: NODES:ATTACK, ATTACK one of {names}")
        try:
            nums = [int(n) for n in ids.split(",")]
        except ValueError:
            raise UsageError(f"--hostile {g}: NODES is node ids, e.g. 7 or 6,7") from None
        if any(not 0 <= n < nodes for n in nums):
            raise UsageError(f"--hostile {g}: a node id is 0 .. {nodes - 1}")
        out.update(dict.fromkeys(nums, name))
    if out and settings["algorithm"] not in attack.ALGORITHMS:
        raise UsageError(f"--hostile: {settings['algorithm']} has no attack here; gossip only")
    if len(out) >= nodes:
        raise UsageError("--hostile: at least one device must be honest")
    return tuple(sorted(out.items()))


def _limits(settings: dict, ctx: click.Context | None) -> None:
    """--devices and --cpu as the fleet's boards, node count, CPU shares and memory limits (a
    --cpu share wins over a board's); --devices refused beside a --nodes given that differs
    (without a command line, ctx None, the boards set the count)."""
    from edgegossip.emulate import profiles
    from edgegossip.run import Device, cpu_shares

    spec, scale = settings.pop("devices"), settings.pop("device_scale")
    boards: tuple[Device, ...] = ()
    if spec is not None:
        names = profiles.devices(spec)
        default = click.core.ParameterSource.DEFAULT
        nodes_given = ctx is not None and ctx.get_parameter_source("nodes") is not default
        if nodes_given and settings["nodes"] != len(names):
            raise ValueError(f"--devices {spec} is {len(names)} nodes, --nodes {settings['nodes']}")
        if not 2 <= len(names) <= 64:
            raise ValueError(f"--devices {spec}: a fleet is 2 to 64 devices, not {len(names)}")
        boards = profiles.limits(names, profiles.DEFAULT_SCALE if scale is None else scale)
        settings["nodes"] = len(names)
    elif scale is not None:
        raise ValueError("--device-scale scales --devices: name them")
    given = dict(cpu_shares(settings.pop("cpu"), settings["nodes"]))
    if boards or given:
        boards = boards or (Device(),) * settings["nodes"]
        settings["devices"] = tuple(
            dataclasses.replace(d, cpu=given.get(i, d.cpu)) for i, d in enumerate(boards)
        )


def _check_closing(settings: dict, export_compose: bool) -> None:
    """--closing as the agents' config takes it (config.validate), refused before any start;
    and not exported, for the emulator starts it (EmulatedFleet.close_when_due)."""
    from edgegossip.config import closing_problem
    from edgegossip.errors import UsageError

    closing = settings["closing_s"]
    if closing and export_compose:
        raise UsageError(
            "--closing is started by the emulator, on every device at once: "
            "an exported fleet has none"
        )
    if closing and closing > settings["duration_s"]:
        raise UsageError("--closing is the end of --duration: at most --duration")
    problem = closing_problem(settings["algorithm"], bool(closing))
    if problem:
        raise UsageError(f"--closing: {problem}")


def _run(spec, as_json: bool, curve_every_s: float | None) -> dict:
    """Run the fleet to its end with progress every 5 s (not with --json), sampling its average
    model every curve_every_s (None: not); its summary, written to OUT/summary.json beside
    OUT/report.html."""
    from edgegossip.emulate import cgroups, netns
    from edgegossip.emulate.fleet import LIMITS, EmulatedFleet
    from edgegossip.report.summary import summarize

    loss_kind = "kernel (nftables)" if spec.backend == "netns" else "injected"
    fleet = EmulatedFleet(spec)
    t0 = time.monotonic()
    # a SIGTERM (a job runner's, `timeout`'s) tears the fleet down as Ctrl-C does: by default
    # it would end this process with the agents, namespaces and device groups left running
    previous = signal.signal(signal.SIGTERM, _interrupt)
    try:
        fleet.up()
        if not as_json:
            click.echo(_headline(spec, loss_kind))
        _watch(fleet, spec.out, as_json, t0, curve_every_s)
        kernel, air, limits = fleet.kernel_dropped(), fleet.air(), fleet.limits()
    except KeyboardInterrupt:
        fleet.down()
        fail("interrupted; agents stopped and namespaces removed", exit_codes.INTERRUPTED)
    except (RuntimeError, OSError, netns.EmulationError, cgroups.CgroupError) as e:
        fleet.down()
        fail(str(e), exit_codes.FAILURE)
    finally:
        fleet.down()
        signal.signal(signal.SIGTERM, previous)
    elapsed = time.monotonic() - t0
    summary = summarize(
        spec.out,
        spec.nodes,
        spec.model,
        spec.network.loss,
        loss_kind,
        elapsed,
        kernel,
        fleet.test_set(),
        dict(spec.hostile),
    )
    if air is not None:
        _on_air(summary, air, spec.network.loss)
    unlimited = dict.fromkeys(LIMITS)
    for a in summary["agents"]:  # a device's board, its limits and what its quota held back
        a.update(limits.get(a["agent"], unlimited))
        a["device"] = spec.device(a["agent"]).board
    return _written(spec, summary, loss_kind)


def _interrupt(signum, frame) -> None:
    raise KeyboardInterrupt


def _headline(spec, loss_kind: str) -> str:
    from edgegossip.emulate import profiles

    net = spec.network
    links = (
        f"one Wi-Fi channel of {net.rate}"
        if net.medium == "wifi"
        else f"links {net.rate or 'uncapped'}"
    )
    boards = Counter(profiles.PROFILES[d.board].board for d in spec.devices if d.board)
    mix = f" ({', '.join(f'{n} {b}' for b, n in boards.items())})" if boards else ""
    return (
        f"{spec.nodes} agents{mix}, {spec.algorithm} over {spec.setting('transport')}, "
        f"{net.loss:.0%} loss "
        f"({loss_kind}), {links}; output in {spec.out}"
    )


def _written(spec, summary: dict, loss_kind: str) -> dict:
    """The summary with the run's events and settings, and its report, both written to OUT."""
    from edgegossip.emulate import churn
    from edgegossip.report import page

    summary["events"] = churn.measure(spec.out, spec.nodes)
    summary.update(
        algorithm=spec.algorithm,
        transport=spec.setting("transport"),
        nodes=spec.nodes,
        rate=spec.network.rate,
        backend=spec.backend,
    )
    agents = {("train_backend" if k == "backend" else k): v for k, v in spec.settings.items()}
    described = {**dataclasses.asdict(spec), **agents, **dataclasses.asdict(spec.network)}
    settings = {
        k: v
        for k, v in described.items()
        if k not in ("out", "backend", "network", "settings") and v not in ((), None)
    }
    summary["report"] = str(
        page.write(spec.out, "emulate", summary, {**settings, "network": loss_kind}, None)
    )
    (spec.out / "summary.json").write_text(json.dumps(summary, indent=1))
    return summary


def _on_air(summary: dict, air: dict, configured: float) -> None:
    """A Wi-Fi run's channel in its summary: what the air carried and dropped. Frames the
    channel dropped, its queues full, are the medium's loss, not something else's: the loss
    alarm looks only at what lies beyond them."""
    from edgegossip.report.summary import loss_alarm

    expected = sum(a["link_expected"] for a in summary["agents"])
    congestion = air["dropped"] / expected if expected else 0.0
    summary["air"] = {**air, "congestion_loss": round(congestion, 4)}
    observed = summary["observed_loss"]
    beyond = None if observed is None else observed - congestion
    summary["loss_alarm"] = loss_alarm(configured, beyond, expected)


def _watch(fleet, out: Path, as_json: bool, t0: float, curve_every_s: float | None) -> None:
    """Until every agent has stopped, or the fleet is overdue (then stopped); an agent that
    crashed or exited with an error ends the run. The schedule's events, as they come due; the
    average model's samples (report/average.py) every curve_every_s."""
    from edgegossip.emulate.schedule import Timeline
    from edgegossip.report.average import CurveSampler

    timeline = Timeline(list(fleet.spec.network.schedule), out)
    sampler = CurveSampler(out, fleet.spec.nodes) if curve_every_s else None
    last_print = last_sample = 0.0
    closed = False
    while any(fleet.running()) or timeline.pending:
        now = time.monotonic() - t0
        if sampler and curve_every_s and now - last_sample >= curve_every_s:
            last_sample = now
            sampler.sample(now)
        for e in timeline.due(fleet, time.monotonic() - t0):
            if not as_json:
                click.echo(f"[{time.monotonic() - t0:6.0f} s] node {e.node}: {e.action} {e.value}")
        if failed := fleet.failed():
            raise RuntimeError(f"agent {failed[0]} stopped: {fleet.why(failed[0])}")
        time.sleep(0.5)
        if not as_json and time.monotonic() - last_print > 5:
            last_print = time.monotonic()
            click.echo(f"[{time.monotonic() - t0:6.0f} s]")
            for i, (r, alive) in enumerate(zip(fleet.latest(), fleet.running())):
                click.echo(_progress_line(i, r, alive))
        if fleet.close_when_due() and not as_json and not closed:
            closed = True
            click.echo(f"[{time.monotonic() - t0:6.0f} s] every device: phase closing")
        if fleet.overdue():
            break
    fleet.stop()
    if failed := fleet.failed():
        raise RuntimeError(f"agent {failed[0]} exited with an error: {fleet.why(failed[0])}")


def _show(summary: dict, loss: float) -> None:
    # an mse model's rows carry its test error where a classifier's carry accuracy
    mse = summary.get("average_model_mse") is not None
    columns = [("mse" if k == "accuracy" and mse else k) for k in COLUMNS]
    rows = [{k: a.get(k) for k in columns} for a in summary["agents"]]
    rows.append({"agent": "average", columns[1]: summary[f"average_model_{columns[1]}"]})
    average = score(summary["average_model_accuracy"], summary.get("average_model_mse"))
    click.echo(table(rows, columns))
    obs, burst = summary["observed_loss"], summary["observed_burst_mean"]
    seen = "n/a (TCP)" if obs is None else f"{obs:.1%}, in bursts of {burst or 0:g} on average"
    click.echo(
        f"loss configured {loss:.1%} ({summary['loss_kind']}), observed by receivers {seen}; "
        f"the average model's test {average}"
    )
    air = summary.get("air")
    if air:
        click.echo(
            f"the Wi-Fi channel carried {air['bytes'] / 1e6:.1f} MB in {air['packets']} frames "
            f"(each relayed frame twice) and dropped {air['dropped']}, its queues full: "
            f"{air['congestion_loss']:.1%} of the datagrams"
        )
    for a in summary["agents"]:
        if a["alarms"] or a["silent_peers"]:
            click.echo(
                f"agent {a['agent']}: alarms {', '.join(a['alarms']) or 'none'}; "
                f"silent peers {a['silent_peers'] or 'none'} at the end"
            )
    click.echo(f"report: {summary['report']}")


def _model(name: str) -> str:
    """A model name, or a compiled model's folder made absolute (the agents run elsewhere)."""
    from edgegossip.models import resolved

    try:
        return resolved(name)
    except ValueError as e:
        raise ValueError(f"--{e}") from None


def _export(spec, base, as_json) -> None:
    """--export compose: {"out", "compose", "services", "image", "base", "release"} with --json."""
    from edgegossip.emulate.compose import DEFAULT_BASE, export
    from edgegossip.fleet.bundle import BundleError

    out = spec.out
    try:
        result = export(spec, out, base or DEFAULT_BASE, progress=lambda m: click.echo(m, err=True))
    except ValueError as e:
        fail(str(e), exit_codes.USAGE)
    except BundleError as e:
        fail(str(e), exit_codes.FAILURE)
    if as_json:
        click.echo(json.dumps(result))
    else:
        click.echo(
            f"wrote {result['compose']} ({spec.nodes} services); run it with: cd {out} && "
            "podman-compose up   (or docker compose up)"
        )
