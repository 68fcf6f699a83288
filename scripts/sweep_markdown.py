"""Render a sweep (scripts/sweep.sh) as the results page's markdown table (docs/results.md).

Usage: python scripts/sweep_markdown.py DIR KIND [EPOCH]
KIND: rps-claim | noniid | payload. With EPOCH, each row as its run recorded it at that epoch
(DIR/ROW.history.jsonl), so every row is compared at the same budget even while some still run.
Accuracy is the test accuracy of worker 0, and of the average of all workers' parameters."""

import json
import sys
from pathlib import Path


def load(d: Path, epoch: str | None) -> dict[str, dict]:
    rows = {}
    for f in sorted(d.glob("*.history.jsonl")) if epoch else sorted(d.glob("*.json")):
        name = f.name.split(".")[0]
        if epoch is None:
            rows[name] = json.loads(f.read_text())
            continue
        for line in f.read_text().splitlines():
            r = json.loads(line)
            if abs(r["epochs"] - float(epoch)) < 1e-6:
                rows[name] = r
    return rows


def pts(a: float, b: float) -> str:
    return f"{100 * (a - b):+.2f}"


def rps_claim(rows: dict) -> None:
    print(
        "| W | RPS, no loss | 10% | 30% | lost to 10%, points | lost to 30% | "
        "Elastic Gossip p=1/32, no loss | 10% | 30% | lost to 10% | lost to 30% |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for w in (4, 8, 16, 32):
        cells = [str(w)]
        for alg in ("rps", "eg32"):
            r = [rows.get(f"{alg}-w{w}-loss{lt}") for lt in ("0", "10", "30")]
            if None in r:
                cells += ["-"] * 5
                continue
            a = [x["acc_worker0"] for x in r]
            cells += [f"{x:.4f}" for x in a] + [pts(a[0], a[1]), pts(a[0], a[2])]
        print("| " + " | ".join(cells) + " |")


NONIID_ALGS = (
    ("allreduce", "all-reduce"),
    ("eg8", "Elastic Gossip p=1/8"),
    ("eg32", "Elastic Gossip p=1/32"),
    ("pull8", "Gossiping SGD (pull) p=1/8"),
    ("local", "local only"),
)
NONIID_PARTS = (("dir01", "Dirichlet 0.1"), ("dir05", "Dirichlet 0.5"), ("cls2", "2 classes"))


def noniid(rows: dict) -> None:
    for w in (4, 8):
        print(
            f"\nW={w}, 10% datagram loss (worker 0 / average model; in brackets, points "
            "behind all-reduce's worker 0)\n"
        )
        print("| algorithm | " + " | ".join(p for _, p in NONIID_PARTS) + " |")
        print("|---|" + "---|" * len(NONIID_PARTS))
        for key, label in NONIID_ALGS:
            cells = [label]
            for part, _ in NONIID_PARTS:
                r, ar = rows.get(f"{part}-w{w}-{key}"), rows.get(f"{part}-w{w}-allreduce")
                if r is None:
                    cells.append("-")
                    continue
                gap = (
                    ""
                    if key == "allreduce" or ar is None
                    else f" ({pts(ar['acc_worker0'], r['acc_worker0'])})"
                )
                cells.append(f"{r['acc_worker0']:.4f} / {r['acc_average']:.4f}{gap}")
            print("| " + " | ".join(cells) + " |")


def payload(rows: dict) -> None:
    print(
        "| payload | loss | worker 0 / average | points against float32 | "
        "GB sent per worker | bytes against float32 | datagrams sent |"
    )
    print("|---|---|---|---|---|---|---|")
    for lt, loss in (("0", "0"), ("10", "10%")):
        base = rows.get(f"float32-loss{lt}")
        for pl in ("float32", "float16", "bfloat16", "int8"):
            r = rows.get(f"{pl}-loss{lt}")
            if r is None:
                continue
            vs = (
                "-"
                if base is None or pl == "float32"
                else pts(r["acc_worker0"], base["acc_worker0"])
            )
            ratio = (
                "-"
                if base is None
                else f"{r['bytes_sent_per_worker'] / base['bytes_sent_per_worker']:.3f}"
            )
            print(
                f"| {pl} | {loss} | {r['acc_worker0']:.4f} / {r['acc_average']:.4f} | {vs} | "
                f"{r['bytes_sent_per_worker'] / 1e9:.2f} | {ratio} | {r['datagrams_sent']:,} |"
            )


def main(folder: str, kind: str, epoch: str | None = None) -> None:
    rows = load(Path(folder), epoch)
    {"rps-claim": rps_claim, "noniid": noniid, "payload": payload}[kind](rows)


if __name__ == "__main__":
    main(*sys.argv[1:])
