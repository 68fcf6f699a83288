"""`edgegossip simulate`: W workers in one process with datagram loss."""

from __future__ import annotations

import json
import sys
from fractions import Fraction
from pathlib import Path

import click

from edgegossip import exit_codes
from edgegossip.algorithms import NAMES as ALGORITHMS
from edgegossip.cli import options
from edgegossip.cli.render import fail, table
from edgegossip.errors import UsageError


class Probability(click.ParamType):
    """A probability written as 0.03125 or 1/32."""

    name = "probability"

    def convert(self, value, param, ctx):
        try:
            v = float(Fraction(str(value)))
        except (ValueError, ZeroDivisionError):
            self.fail(f"{value!r} is not a number or a fraction like 1/32", param, ctx)
        if not 0 <= v <= 1:
            self.fail(f"{value} is outside [0, 1]", param, ctx)
        return v


@click.command()
@click.option("--algorithm", type=click.Choice(ALGORITHMS), required=True)
@options.setting("--model", "model", help="The model.")
@click.option("--workers", type=click.IntRange(1, 256), default=4, show_default=True)
@click.option(
    "--p",
    "p",
    type=Probability(),
    default="1/32",
    show_default=True,
    help="Exchange probability per worker per step.",
)
@click.option("--alpha", type=click.FloatRange(0, 1), default=0.5, show_default=True)
@click.option(
    "--loss",
    type=Probability(),
    default="0",
    show_default=True,
    help="Probability that a datagram is lost (fraction).",
)
@click.option(
    "--epochs", type=click.FloatRange(min=0, min_open=True), default=1.0, show_default=True
)
@click.option(
    "--batch",
    type=click.IntRange(1),
    default=128,
    show_default=True,
    help="Examples per step, summed over workers.",
)
@click.option("--lr", type=float, default=0.001, show_default=True)
@click.option("--momentum", type=float, default=0.99, show_default=True)
@click.option(
    "--partition",
    type=options.choice("partition"),
    default=options.default("partition"),
    show_default=True,
)
@click.option(
    "--beta",
    type=click.FloatRange(min=0, min_open=True),
    default=0.5,
    show_default=True,
    help="Dirichlet concentration (--partition dirichlet): small gives few classes a worker.",
)
@click.option(
    "--classes-per-worker",
    type=click.IntRange(1, 10),
    default=2,
    show_default=True,
    help="Classes each worker holds (--partition classes).",
)
@options.setting(
    "--payload",
    "payload",
    help="How parameters travel: int8 has a float32 scale per datagram.",
)
@options.setting("--chunk-bytes", "chunk_bytes", type=int)
@click.option("--seed", type=int, default=0, show_default=True)
@click.option(
    "--eval-every",
    type=click.FloatRange(min=0, min_open=True),
    default=None,
    help="Also evaluate every this many epochs and append the row to --history.",
)
@click.option(
    "--history",
    type=click.Path(dir_okay=False, writable=True),
    default=None,
    help="JSON-lines file receiving one result row per --eval-every.",
)
@click.option(
    "--plot",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="With --eval-every: draw test accuracy against epochs and bytes to PLOT.png and .svg.",
)
@click.option("--json", "as_json", is_flag=True)
def simulate(
    algorithm,
    model,
    workers,
    p,
    alpha,
    loss,
    epochs,
    batch,
    lr,
    momentum,
    partition,
    beta,
    classes_per_worker,
    payload,
    chunk_bytes,
    seed,
    eval_every,
    history,
    plot,
    as_json,
) -> None:
    """Train W workers in one process; every datagram is lost with probability LOSS.

    --json prints one object: the settings (algorithm, model, workers, p, alpha, loss, seed,
    partition [, beta | classes_per_worker], payload), then epochs, steps, acc_worker0,
    acc_average (the average of all workers' parameters), val_acc_worker0,
    bytes_sent_per_worker (datagrams as they go on the wire, framing included; a float32 ring
    for allreduce), datagrams_sent, datagrams_lost, elapsed_s [, push_weight_sum,
    push_weight_in_flight (gossip-push: the weights held, and those on their way)]."""
    from edgegossip.data import mnist
    from edgegossip.simulate import SimConfig
    from edgegossip.simulate import simulate as run

    cfg = SimConfig(
        algorithm=algorithm,
        model=model,
        workers=workers,
        p=p,
        alpha=alpha,
        loss=loss,
        epochs=epochs,
        batch=batch,
        lr=lr,
        momentum=momentum,
        seed=seed,
        partition=partition,
        beta=beta,
        classes_per_worker=classes_per_worker,
        payload=payload,
        chunk_bytes=chunk_bytes,
    )
    if eval_every is None and (history is not None or plot is not None):
        fail("--history and --plot need --eval-every", exit_codes.USAGE)
    if eval_every is not None and history is None and plot is None:
        fail("--eval-every needs --history or --plot", exit_codes.USAGE)
    rows: list[dict] = []
    try:
        if plot is not None:
            from edgegossip.report import plot as plots

            plots.require()
        cfg.check()
        data = mnist.load()
    except (ValueError, UsageError) as e:
        fail(str(e), exit_codes.USAGE)
    except mnist.DataError as e:
        fail(str(e), exit_codes.MISSING_DATA)
    with click.progressbar(
        length=1, label=f"{algorithm} W={workers}", show_pos=True, file=sys.stderr
    ) as bar:

        def progress(step, total, info):
            bar.length = total
            bar.label = f"{algorithm} W={workers} epoch {info['epoch']:.2f} loss {info['loss']:.3f}"
            bar.update(1)

        def record(row):
            rows.append(row)
            if history:
                with open(history, "a") as f:
                    f.write(json.dumps(row) + "\n")

        try:
            result = run(cfg, data, progress, eval_every, record)
        except OSError as e:
            fail(f"cannot write history: {e}", exit_codes.USAGE)
        if history or plot:
            record(result)
    if plot is not None:
        result["plots"] = _plot(plot, rows, algorithm)
    if as_json:
        click.echo(json.dumps(result))
        return
    rows = [
        {
            "algorithm": algorithm,
            "workers": workers,
            "p": p,
            "loss": loss,
            "epochs": epochs,
            "acc worker 0": result["acc_worker0"],
            "acc average": result["acc_average"],
            "MB sent/worker": result["bytes_sent_per_worker"] / 1e6,
            "datagrams lost": result["datagrams_lost"],
        }
    ]
    click.echo(table(rows, list(rows[0])))


def _plot(stem: Path, rows: list[dict], algorithm: str) -> list[str]:
    """Worker 0's and the average model's test accuracy, against epochs and against bytes."""
    from edgegossip.report import plot

    stem.parent.mkdir(parents=True, exist_ok=True)
    paths = plot.lines(
        stem.with_name(stem.name + "_vs_epochs"),
        {
            "worker 0": [(r["epochs"], r["acc_worker0"]) for r in rows],
            "average model": [(r["epochs"], r["acc_average"]) for r in rows],
        },
        "epochs",
        "test accuracy",
        f"{algorithm}: accuracy against epochs",
    )
    paths += plot.lines(
        stem.with_name(stem.name + "_vs_bytes"),
        {
            "worker 0": [(r["bytes_sent_per_worker"] / 1e6, r["acc_worker0"]) for r in rows],
            "average model": [(r["bytes_sent_per_worker"] / 1e6, r["acc_average"]) for r in rows],
        },
        "MB sent per worker",
        "test accuracy",
        f"{algorithm}: accuracy against bytes sent",
    )
    return paths
