"""Render the learning curves recorded in DIR/ROW.history.jsonl (scripts/reproduce_table.sh) as a
markdown table: test accuracy of worker 0 per row every STEP epochs.
Usage: python scripts/curve_markdown.py [DIR] [STEP]"""

import json
import sys
from pathlib import Path

from table_markdown import PUBLISHED


def main(folder: str = "runs/table", step: str = "10") -> None:
    curves = {}
    for name in PUBLISHED:
        f = Path(folder) / f"{name}.history.jsonl"
        if f.is_file():
            rows = [json.loads(line) for line in f.read_text().splitlines()]
            curves[name] = {r["epochs"]: r["acc_worker0"] for r in rows}
    epochs = sorted(
        {
            e
            for c in curves.values()
            for e in c
            if abs(e / float(step) - round(e / float(step))) < 1e-9
        }
    )
    epochs = [e for e in epochs if all(e in c for c in curves.values())]
    print("| row | " + " | ".join(f"epoch {e:g}" for e in epochs) + " |")
    print("|---|" + "---|" * len(epochs))
    for name, c in curves.items():
        print(f"| {PUBLISHED[name][0]} | " + " | ".join(f"{c[e]:.4f}" for e in epochs) + " |")


if __name__ == "__main__":
    main(*sys.argv[1:])
