"""How commands print: a plain table for people, one JSON object for machines."""

from __future__ import annotations

import json
import sys
from typing import NoReturn

import click

from edgegossip import errors


def table(rows: list[dict], columns: list[str]) -> str:
    cells = [[str(c) for c in columns]] + [[_fmt(r.get(c, "")) for c in columns] for r in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(columns))]
    lines = ["  ".join(v.rjust(w) for v, w in zip(row, widths)) for row in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _fmt(v) -> str:
    if isinstance(v, float):
        return f"{v:.4g}" if abs(v) < 1e5 else f"{v:.0f}"
    return "" if v is None else str(v)


def score(accuracy, mse=None) -> str:
    """A model's held-out score as one phrase: a classifier's accuracy, an mse model's error."""
    if accuracy is not None:
        return f"accuracy {accuracy:.4f}"
    return f"mse {mse:.5g}" if mse is not None else "accuracy n/a"


def emit(obj: dict, as_json: bool, columns: list[str] | None = None, title: str = "") -> None:
    if as_json:
        click.echo(json.dumps(obj))
        return
    if title:
        click.echo(title)
    if columns is not None:
        click.echo(table(obj["results"], columns))


def fail(message: str, code: int) -> NoReturn:
    """One line on stderr and a non-zero exit: the form of every user-facing error."""
    click.echo(f"{errors.PREFIX}{message}", err=True)
    sys.exit(code)
