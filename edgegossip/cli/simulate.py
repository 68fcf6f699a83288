"""`edgegossip simulate`: W workers in one process with datagram loss."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from edgegossip import exit_codes
from edgegossip.algorithms import NAMES as ALGORITHMS
from edgegossip.cli import options
from edgegossip.cli.render import fail, table
from edgegossip.errors import UsageError
from edgegossip.run import SIMULATED


def _steps(flag: str, help: str):
    """A count of simulated steps or rounds, 0 for none."""
    return click.option(flag, type=click.IntRange(min=0), default=0, show_default=True, help=help)


@click.command()
@click.option("--algorithm", type=click.Choice(ALGORITHMS), required=True)
@options.own_dataset(
    "What the workers train on: a data set `edgegossip data fetch` knows, the user's FILE.npz "
    "(cut by --partition) or a DIR of one .npz per worker."
)
@options.nodes(256)
@options.run_settings(SIMULATED, p="Exchange probability per worker per step.")
@options.network(
    offer=("loss", "loss_model", "burst", "trace"),
    loss="0",
    loss_help="Probability that a datagram is lost (fraction).",
)
@click.option(
    "--epochs", type=click.FloatRange(min=0, min_open=True), default=1.0, show_default=True
)
@options.setting("--batch", "batch", default=128, help="Examples per step, summed over workers.")
@_steps(
    "--merge-delay",
    "Gossip: apply each exchange this many steps after its snapshots, as an agent's lands "
    "while it trains on (0: in the step it starts).",
)
@_steps(
    "--closing",
    "Rounds of a closing phase after training: nobody trains, every worker exchanges with a "
    "peer each round (Elastic Gossip's rule at alpha 0.5), so each worker's own model comes to "
    "the average.",
)
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
    help="With --eval-every: draw test accuracy (or mse) against epochs and bytes to PLOT.png "
    "and .svg.",
)
@click.option("--json", "as_json", is_flag=True)
def simulate(eval_every, history, plot, as_json, **settings) -> None:
    """Train W workers in one process; every datagram is lost with probability LOSS.

    --json prints one object: the settings (algorithm, model, data, workers, p, alpha, seed,
    partition [, beta | classes_per_worker], payload, loss [, loss_model, burst]), then epochs,
    steps, acc_worker0, acc_average (the average of all workers' parameters), val_acc_worker0
    (for a model trained with mse these are null, and mse_worker0, mse_average and
    val_mse_worker0 give the mean squared error per element), bytes_sent_per_worker
    (datagrams as they go on the wire, framing included; a float32 ring for allreduce),
    datagrams_sent, datagrams_lost, elapsed_s [, push_weight_sum,
    push_weight_in_flight (gossip-push: the weights held, and those on their way)]
    [, merge_delay, exchanges_lapsed (--merge-delay: picks that found an end with both its
    snapshots in flight)]."""
    from edgegossip.simulate import Simulation

    try:
        network = options.network_of(settings, settings["nodes"], "simulate")
        cfg = Simulation.of(network=network, **settings)
    except ValueError as e:
        fail(str(e), exit_codes.USAGE)
    if eval_every is None and (history is not None or plot is not None):
        fail("--history and --plot need --eval-every", exit_codes.USAGE)
    if eval_every is not None and history is None and plot is None:
        fail("--eval-every needs --history or --plot", exit_codes.USAGE)
    data = _checked(cfg, plot)
    rows: list[dict] = []
    result = _run(cfg, data, eval_every, history, rows, keep_last=bool(history or plot))
    if plot is not None:
        result["plots"] = _plot(plot, rows, cfg.algorithm)
    if as_json:
        click.echo(json.dumps(result))
        return
    score = _score(result)
    rows = [
        {
            "algorithm": cfg.algorithm,
            "workers": cfg.nodes,
            "p": cfg.setting("p"),
            "loss": cfg.network.loss,
            "epochs": cfg.epochs,
            f"{score} worker 0": result[f"{score}_worker0"],
            f"{score} average": result[f"{score}_average"],
            "MB sent/worker": result["bytes_sent_per_worker"] / 1e6,
            "datagrams lost": result["datagrams_lost"],
        }
    ]
    click.echo(table(rows, list(rows[0])))


def _score(row: dict) -> str:
    """What the rows score: acc (a classifier's accuracy) or mse (an mse model's error)."""
    return "acc" if row["acc_average"] is not None else "mse"


def _checked(cfg, plot):
    """The data, once the settings and the plotting library are known good."""
    from edgegossip.data import mnist
    from edgegossip.simulate import load

    try:
        if plot is not None:
            from edgegossip.report import plot as plots

            plots.require()
        cfg.check()
        return load(cfg)
    except (ValueError, UsageError) as e:
        fail(str(e), exit_codes.USAGE)
    except mnist.DataError as e:
        fail(str(e), exit_codes.MISSING_DATA)


def _run(cfg, data, eval_every, history, rows: list[dict], keep_last: bool) -> dict:
    """The simulation under a progress bar; each evaluation row into rows (and history), and
    the last one too if keep_last."""
    from edgegossip.simulate import simulate as run

    name = f"{cfg.algorithm} W={cfg.nodes}"
    with click.progressbar(length=1, label=name, show_pos=True, file=sys.stderr) as bar:

        def progress(step, total, info):
            bar.length = total
            bar.label = f"{name} epoch {info['epoch']:.2f} loss {info['loss']:.3f}"
            bar.update(1)

        def record(row):
            rows.append(row)
            if history:
                with open(history, "a") as f:
                    f.write(json.dumps(row) + "\n")

        try:
            result = run(cfg, data, progress, eval_every, record)
            if keep_last:
                record(result)
        except OSError as e:
            fail(f"cannot write history: {e}", exit_codes.USAGE)
    return result


def _plot(stem: Path, rows: list[dict], algorithm: str) -> list[str]:
    """Worker 0's and the average model's test accuracy (an mse model's error), against
    epochs and against bytes."""
    from edgegossip.report import plot

    k = _score(rows[-1])
    what = "accuracy" if k == "acc" else "mse"
    stem.parent.mkdir(parents=True, exist_ok=True)
    paths = plot.lines(
        stem.with_name(stem.name + "_vs_epochs"),
        {
            "worker 0": [(r["epochs"], r[f"{k}_worker0"]) for r in rows],
            "average model": [(r["epochs"], r[f"{k}_average"]) for r in rows],
        },
        "epochs",
        f"test {what}",
        f"{algorithm}: {what} against epochs",
    )
    paths += plot.lines(
        stem.with_name(stem.name + "_vs_bytes"),
        {
            "worker 0": [(r["bytes_sent_per_worker"] / 1e6, r[f"{k}_worker0"]) for r in rows],
            "average model": [(r["bytes_sent_per_worker"] / 1e6, r[f"{k}_average"]) for r in rows],
        },
        "MB sent per worker",
        f"test {what}",
        f"{algorithm}: {what} against bytes sent",
    )
    return paths
