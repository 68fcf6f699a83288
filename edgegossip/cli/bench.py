"""`edgegossip bench kernels|transport|mac|train|shard|disk|metrics|overhead`."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from edgegossip import exit_codes
from edgegossip.bench import transport as transport_bench
from edgegossip.cli import options
from edgegossip.cli.render import emit, fail, table
from edgegossip.errors import UsageError
from edgegossip.models import MODELS
from edgegossip.run import RUN_SETTINGS

# the options of the benchmarks that run whole agents
_seconds = click.option(
    "--seconds",
    default=30.0,
    show_default=True,
    type=click.FloatRange(10, 3600),
    help="How long each agent trains.",
)


def _models(help: str):
    return click.option("--model", "models", multiple=True, type=click.Choice(MODELS), help=help)


@click.group()
def bench() -> None:
    """Measure kernels and transports against references run alongside."""


@bench.command()
@click.option("--json", "as_json", is_flag=True, help="One JSON object instead of a table.")
@click.option("--repeat", default=5, show_default=True, help="Timing batches per measurement.")
@click.option(
    "--size",
    "sizes",
    multiple=True,
    type=click.IntRange(1),
    help="Vector lengths (default 2,913,290 and 25,000,000).",
)
def kernels(as_json: bool, repeat: int, sizes: tuple[int, ...]) -> None:
    """Kernel GB/s on 2.9 M and 25 M float32 beside NumPy and np.copyto."""
    from edgegossip.bench import kernels as k

    emit(
        k.run(sizes=sizes or k.SIZES, repeat=repeat),
        as_json,
        [
            "kernel",
            "n",
            "native_gbps",
            "numpy_gbps",
            "copy_gbps",
            "ratio_to_copy",
            "speedup_vs_numpy",
        ],
        title="kernels (GB/s of memory touched)",
    )


@bench.command()
@click.option("--json", "as_json", is_flag=True, help="One JSON object instead of a table.")
@click.option(
    "--transport",
    "transports",
    multiple=True,
    type=click.Choice(transport_bench.KINDS),
    help="Limit to these (default: raw, udp, udp-enc, zmq; udp-enc encrypts the "
    "payloads, udp-f16/bf16/int8/d4 compress them).",
)
@click.option("--datagrams", default=40_000, show_default=True, help="Datagrams per measurement.")
@click.option(
    "--repeats",
    type=click.IntRange(1, 20),
    default=3,
    show_default=True,
    help="Trials per row (every row, raw included, reports its best).",
)
def transport(as_json: bool, transports: tuple[str, ...], datagrams: int, repeats: int) -> None:
    """Loopback goodput of a 2.9 M-parameter model per transport beside a raw sendto loop."""
    emit(
        transport_bench.run(
            transports or transport_bench.DEFAULT_KINDS, datagrams=datagrams, repeats=repeats
        ),
        as_json,
        [
            "transport",
            "chunk_bytes",
            "goodput_mbps",
            "datagrams_per_s",
            "params_per_s",
            "delivered",
            "pace_mbps",
        ],
        title="transport (one process to another on loopback, ChaCha20-Poly1305 on)",
    )


@bench.command()
@click.option("--json", "as_json", is_flag=True, help="One JSON object instead of a table.")
@click.option(
    "--seconds",
    default=0.5,
    show_default=True,
    type=click.FloatRange(0.05, 10),
    help="Time per row and datagram size.",
)
def mac(as_json: bool, seconds: float) -> None:
    """GB/s of datagram authentication per candidate, beside HMAC-SHA256 (the v1 MAC).

    JSON: {"benchmark": "mac", "results": [{"mac", "impl", "datagram_bytes", "gbps",
    "us_per_datagram", "vs_hmac_sha256"}, ...]}; a candidate whose library is missing is left
    out."""
    from edgegossip.bench import mac as m

    emit(
        m.run(seconds=seconds),
        as_json,
        ["mac", "impl", "datagram_bytes", "gbps", "us_per_datagram", "vs_hmac_sha256"],
        title="datagram authentication, one core (the tag over the whole datagram)",
    )


@bench.command()
@click.option("--json", "as_json", is_flag=True, help="One JSON object instead of a table.")
@options.nodes(64, dest="workers")
def shard(as_json: bool, workers: int) -> None:
    """A device's MNIST shard held deflated against plain rows: MB, a batch, an evaluation.

    JSON: {"benchmark": "shard", "workers", "results": [{"rows": "plain"|"packed",
    "examples", "mb", "batch_us", "eval_ms", "mlp_step_ms", "batch_share_of_step"}]}"""
    from edgegossip.bench import shard as s
    from edgegossip.data.mnist import DataError

    try:
        result = s.run(workers=workers)
    except DataError as e:
        fail(str(e), exit_codes.MISSING_DATA)
    emit(
        result,
        as_json,
        list(result["results"][0]),
        title=f"shard (agent 0 of {workers}; the seed MLP's step beside it)",
    )


@bench.command()
@click.option("--json", "as_json", is_flag=True, help="One JSON object instead of a table.")
@click.option(
    "--steps", default=60, show_default=True, help="Timed steps per batch (x10 for logreg)."
)
@click.option(
    "--model",
    "folder",
    type=click.Path(file_okay=False, exists=True),
    default=None,
    help="A compiled model's folder (edgegossip model compile): measure it instead.",
)
@click.option(
    "--reference",
    default=None,
    metavar="FILE.py:CLASS",
    help="With --model: the model's own PyTorch class (built with no arguments), timed alike "
    "in the same run; each compiled row gets vs_reference, its time over PyTorch's.",
)
@click.option(
    "--reference-python",
    default=sys.executable,
    show_default="this Python",
    help="The Python that has torch (e.g. your training venv's); it needs nothing of ours.",
)
@click.option(
    "--threads",
    type=click.IntRange(min=0),
    default=1,
    show_default=True,
    help="Threads of a compiled model's step and of --reference's (0: each runtime's default, "
    "every core). A device's agent trains on one.",
)
@click.option(
    "--profile",
    is_flag=True,
    help="With --model: where each step's time goes, by kind of op (onnxruntime's profiler, "
    "run after the timing); depthwise convolutions named apart.",
)
def train(
    as_json: bool,
    steps: int,
    folder: str | None,
    reference: str | None,
    reference_python: str,
    threads: int,
    profile: bool,
) -> None:
    """ms per training step and peak RSS per model and backend, at batch 32 and 128.

    JSON: {"benchmark": "train", "threads", "results": [{"model", "backend", "batch", "params",
    "ms_per_step", "peak_rss_mb"}]}; with --reference, rows of backend "pytorch" too, and
    compiled rows carry "vs_reference"; with --profile, compiled rows carry "profile":
    {"run_ms", "kernels_ms", "ops": [{"op", "calls", "ms", "share"}]} per step (share: of
    kernels_ms), largest first."""
    from edgegossip.bench import train as t

    compiled = _reference_file(reference, folder) if reference is not None else None
    cases = t.CASES
    if folder:  # with a frozen prefix, also as a device trains it: on the prefix's outputs
        from edgegossip import artifact
        from edgegossip.models.footprint import CACHED, WHOLE

        prefix = artifact.read(folder).has_prefix
        cases = [(folder, WHOLE)] + ([(folder, CACHED)] if prefix else [])
    if profile and not folder:
        raise UsageError("--profile times a compiled model's ops: give --model DIR")
    result = t.run(cases=cases, steps=steps, threads=threads, profile=profile)
    columns = ["model", "backend", "batch", "params", "ms_per_step", "peak_rss_mb"]
    if reference is not None and compiled is not None:
        result = t.against(result, compiled, reference, reference_python, steps, threads=threads)
        columns.append("vs_reference")
    emit(
        result,
        as_json,
        columns,
        title=f"train (forward + backward + Nesterov update, one process per row, "
        f"threads {threads or 'default'})",
    )
    for row in result["results"] if not as_json else []:
        if "profile" in row:
            prof = row["profile"]
            click.echo(
                f"\n{row['backend']} at batch {row['batch']}: a step {row['ms_per_step']} ms; "
                f"profiled, a run {prof['run_ms']} ms, its ops {prof['kernels_ms']} ms"
            )
            click.echo(table(prof["ops"], ["op", "calls", "ms", "share"]))


def _reference_file(reference: str, folder: str | None) -> str:
    """The compiled model's folder --reference is timed beside, or a one-line refusal."""
    path, _, cls = reference.rpartition(":")
    if folder is None:
        raise UsageError("--reference times the model of --model: give --model DIR")
    if not path.endswith(".py") or not cls.isidentifier() or not Path(path).is_file():
        raise UsageError(f"--reference {reference}: expected FILE.py:CLASS, FILE.py a file")
    return folder


@bench.command()
@click.option("--json", "as_json", is_flag=True, help="One JSON object instead of a table.")
@_seconds
@_models("Default: both.")
@click.option(
    "--dir",
    "where",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Where the agents write (default: the current folder; not a tmpfs).",
)
def disk(as_json: bool, seconds: float, models: tuple[str, ...], where) -> None:
    """Disk writes per day per agent by checkpoint policy, and the longest training step while a
    checkpoint is written, beside a synchronous fsynced write of the same size.

    JSON: {"benchmark": "disk", "seconds", "results": [{"model", "policy", "steps_per_s",
    "checkpoints", "checkpoint_mb", "written_mb_per_s", "per_day_gb", "step_ms_median",
    "checkpoint_stall_ms", "sync_write_ms"}, ...]}"""
    from edgegossip.bench import disk as d

    click.echo(f"two agents per model, {seconds:g} s each", err=True)
    emit(
        d.run(models or ("logreg", "mlp"), seconds, where),
        as_json,
        [
            "model",
            "policy",
            "steps_per_s",
            "checkpoints",
            "checkpoint_mb",
            "written_mb_per_s",
            "per_day_gb",
            "step_ms_median",
            "checkpoint_stall_ms",
            "sync_write_ms",
        ],
        title="disk (one local-only agent per row; per day at the policy's cadence)",
    )


@bench.command()
@click.option("--json", "as_json", is_flag=True, help="One JSON object instead of a table.")
@_seconds
@click.option(
    "--every",
    "every_s",
    default=1.0,
    show_default=True,
    type=click.FloatRange(0.1, 60),
    help="Seconds between two scrapes.",
)
@_models("Default: mlp.")
def metrics(as_json: bool, seconds: float, every_s: float, models: tuple[str, ...]) -> None:
    """What the /metrics exporter costs an agent: peak RSS and steps per second with no exporter
    and with one scraped every --every seconds, and how long a scrape takes.

    JSON: {"benchmark": "metrics", "seconds", "results": [{"model", "exporter", "steps_per_s",
    "peak_rss_mb", "scrapes", "scrape_ms_median", "scrape_ms_max", "scrape_bytes",
    "rss_added_mb" (the exporter's row: its peak RSS minus the reference's)}, ...]}"""
    from edgegossip.bench import scrape

    click.echo(f"two agents per model, {seconds:g} s each", err=True)
    emit(
        scrape.run(models or ("mlp",), seconds, every_s),
        as_json,
        [
            "model",
            "exporter",
            "steps_per_s",
            "peak_rss_mb",
            "rss_added_mb",
            "scrapes",
            "scrape_ms_median",
            "scrape_ms_max",
            "scrape_bytes",
        ],
        title="metrics (one local-only agent per row; the reference has no exporter)",
    )


# the run's settings bench overhead offers: all but the model (its own choice) and the payload
# (each variant's)
OVERHEAD_SETTINGS = frozenset(RUN_SETTINGS) - {"model", "payload"}


@bench.command()
@click.option("--json", "as_json", is_flag=True, help="One JSON object instead of tables.")
@options.nodes(32, least=2)
@click.option(
    "--seconds",
    type=click.FloatRange(10, 3600),
    default=150.0,
    show_default=True,
    help="How long each fleet trains (a short run is mostly start-up: a check, not a figure).",
)
@click.option("--model", type=click.Choice(["mlp", "logreg"]), default="mlp", show_default=True)
@options.network(offer=("loss", "loss_model", "burst", "rate", "medium"))
@options.run_settings(OVERHEAD_SETTINGS)
@click.option(
    "--variant",
    "variants",
    multiple=True,
    metavar="ALGORITHM:PAYLOAD[:RATE]",
    help="A gossip run beside the local one (repeatable), on links capped at --rate or at its "
    "own RATE ('none': uncapped). Default: elastic-gossip:float32 and elastic-gossip:int8. "
    "floor:PAYLOAD: local-only training while each node sends and receives, with bare system "
    "calls, the traffic the last gossip run of PAYLOAD on the same links sent from it (name "
    "that variant first): what those bytes cost the training in the kernel alone.",
)
@click.option("--target", type=click.FloatRange(0, 1), default=0.95, show_default=True)
@click.option(
    "--reference",
    type=click.Choice(["around", "before"]),
    default="around",
    show_default=True,
    help="Run the local reference before and after the variants (their mean is the reference, "
    "the machine's drift between them is reported), or only before.",
)
@click.option(
    "--rounds",
    type=click.IntRange(1, 10),
    default=1,
    show_default=True,
    help="Run the variants this many times, in reverse order every other round, with a local "
    "run between rounds (needs --reference around): the spread of each variant's share.",
)
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Where each fleet's output goes (default: a new temporary folder).",
)
def overhead(as_json, variants, **plan) -> None:
    """The same emulated fleet (root: namespaces) trained local-only, the reference, then with
    each gossip variant, then local-only again (--reference around): per agent steps per second
    and their share of the reference's, CPU seconds of the training, receive and send threads,
    and time to the held-out TARGET accuracy.

    JSON: {"benchmark": "overhead", "nodes", "seconds", "model", "settings" (the agents'),
    "loss", "loss_model", "burst", "rate", "target", "rounds", "output", "reference":
    {"steps_per_s" (the mean of the local runs),
    "local_steps_per_s" (each local run's, in order), "drift" (last against first, a
    fraction)}, "variants": [{"algorithm", "payload", "rate", "of_local_here" and
    "time_to_target_all_s" (one per round, in order), "median", "min", "max" (of those
    shares)}], "runs" (in the order run: local first and, with around, last and between
    rounds): [{"algorithm", "payload", "rate" (the link cap, null: uncapped), "steps_per_s",
    "of_local", "of_local_here" (against local's rate drawn on a line between the local runs
    just before and after this one, at its place: what a steady drift takes out),
    "time_to_target_first_s", "time_to_target_all_s", "average_model_accuracy",
    "observed_loss", "steal" (the share of the machine's CPU time its hypervisor took while that
    fleet ran, from /proc/stat; a noisy neighbour shows here), "agents": [{"agent", "steps",
    "steps_per_s", "of_local", "train_cpu_s", "receive_cpu_s", "send_cpu_s", "process_cpu_s",
    "mb_exchanged", "mb_sent_per_s", "datagram_bytes", "net_cpu_ms_per_mb",
    "datagrams_per_wake", "time_to_target_s"}]}]}. A floor run's algorithm is "floor"; its
    receive and send CPU seconds, megabytes and wake-ups are its floor processes', its steps and
    training CPU its local-only agents'."""
    from edgegossip.emulate import netns
    from edgegossip.emulate import overhead as o

    if plan["rounds"] > 1 and plan["reference"] != "around":
        fail("--rounds above 1 needs --reference around", exit_codes.USAGE)
    if not netns.is_root():
        fail(
            "bench overhead emulates a fleet in network namespaces: run it as root",
            exit_codes.NEEDS_ROOT,
        )
    try:
        network = options.network_of(plan, plan["nodes"])
    except ValueError as e:
        fail(str(e), exit_codes.USAGE)
    rate_cap = network.rate
    parsed = tuple(_variant(v, rate_cap) for v in variants or o.DEFAULT_VARIANTS)
    try:
        o.schedule(parsed, plan["reference"], rate_cap, plan["rounds"])
    except ValueError as e:
        fail(f"--variant: {e}", exit_codes.USAGE)
    spec = o.fleet(
        plan["out"],
        {k: plan.pop(k) for k in RUN_SETTINGS if k in OVERHEAD_SETTINGS},
        nodes=plan["nodes"],
        duration_s=plan["seconds"],
        model=plan["model"],
        network=network,
    )
    knobs = {k: plan[k] for k in ("target", "reference", "rounds")}
    result = o.run(o.Plan(spec, parsed, **knobs), lambda m: click.echo(m, err=True))
    if as_json:
        emit(result, True, [])
    else:
        _overhead_tables(result, rate_cap or "none")


def _cap(text: str, what: str) -> str | None:
    from edgegossip.run import link_cap

    try:
        return link_cap(text)
    except ValueError:
        fail(f"{what} {text!r}: write it as e.g. 20mbit, 500kbit or none", exit_codes.USAGE)


def _variant(v: str, rate_cap: str | None) -> tuple:
    """ALGORITHM:PAYLOAD[:RATE] as (algorithm, payload, link cap)."""
    from edgegossip.algorithms import DEFAULT, NAMES
    from edgegossip.algorithms.local import Local
    from edgegossip.dataplane import payload as payloads
    from edgegossip.emulate import floor

    parts = v.split(":")
    alg, pay, own = parts[0], parts[1] if len(parts) > 1 else "", parts[2:]
    known = alg == floor.NAME or (alg in NAMES and alg != Local.name)
    if not known or pay not in payloads.NAMES or len(own) > 1:
        fail(
            f"--variant {v!r}: write ALGORITHM:PAYLOAD[:RATE], e.g. {DEFAULT}:int8, "
            f"{DEFAULT}:int8:none or {floor.NAME}:int8",
            exit_codes.USAGE,
        )
    return (alg, pay, _cap(own[0], f"--variant {v!r}: rate") if own else rate_cap)


def _overhead_tables(result: dict, rate: str) -> None:
    r = result
    emit(
        {"results": r["runs"]},
        False,
        [
            "algorithm",
            "payload",
            "rate",
            "steps_per_s",
            "of_local",
            "of_local_here",
            "time_to_target_first_s",
            "time_to_target_all_s",
            "average_model_accuracy",
            "observed_loss",
            "steal",
        ],
        title=f"overhead ({r['nodes']} agents, {r['model']}, {r['loss']:.0%} loss, {rate}, "
        f"{r['seconds']:g} s each)",
    )
    ref = r["reference"]
    click.echo(
        f"reference: {ref['steps_per_s']} steps/s, the mean of local runs at "
        f"{', '.join(map(str, ref['local_steps_per_s']))} (drift {ref['drift']:+.1%})"
    )
    agents = [
        {"run": f"{run['algorithm']} {run['payload']} {run['rate'] or 'uncapped'}", **a}
        for run in r["runs"]
        for a in run["agents"]
    ]
    emit(
        {"results": agents},
        False,
        [
            "run",
            "agent",
            "steps",
            "of_local",
            "train_cpu_s",
            "receive_cpu_s",
            "send_cpu_s",
            "net_cpu_ms_per_mb",
            "datagrams_per_wake",
            "time_to_target_s",
        ],
        title="per agent",
    )
    emit(
        {"results": r["variants"]},
        False,
        ["algorithm", "payload", "rate", "of_local_here", "median", "min", "max"],
        title=f"each variant over {r['rounds']} round(s): of local's steps, where it ran",
    )
