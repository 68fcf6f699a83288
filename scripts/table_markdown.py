"""Render runs/table/*.json (scripts/reproduce_table.sh) as the results page's markdown table (docs/results.md), beside
the published figures of ALGORITHMS.md section 5; with EPOCH, the rows each run recorded at that
epoch in DIR/ROW.history.jsonl. Usage: python scripts/table_markdown.py [DIR] [EPOCH]"""

import json
import sys
from pathlib import Path

PUBLISHED = {  # name: (label, worker 0, average)
    "allreduce": ("all-reduce", 0.9861, None),
    "local": ("local only", 0.9723, None),
    "eg-p8": ("Elastic Gossip p=1/8", 0.9862, 0.9861),
    "eg-p32": ("Elastic Gossip p=1/32", 0.9861, 0.9862),
    "pull-p8": ("Gossiping SGD (pull) p=1/8", 0.9855, 0.985),
    "pull-p32": ("Gossiping SGD (pull) p=1/32", 0.9849, 0.985),
    "eg-p32-loss10": ("Elastic Gossip p=1/32, 10% datagram loss", None, None),
    "eg-p32-loss30": ("Elastic Gossip p=1/32, 30% datagram loss", None, None),
}
LOSSLESS = "eg-p32"  # the published reference for the loss rows (none was published with loss)


def rows(d: Path, epoch: str | None) -> dict[str, dict]:
    out = {}
    for name in PUBLISHED:
        if epoch is None:
            f = d / f"{name}.json"
            if f.is_file():
                out[name] = json.loads(f.read_text())
            continue
        f = d / f"{name}.history.jsonl"
        if f.is_file():
            for line in f.read_text().splitlines():
                r = json.loads(line)
                if abs(r["epochs"] - float(epoch)) < 1e-6:
                    out[name] = r
    return out


def main(folder: str = "runs/table", epoch: str | None = None) -> None:
    found = rows(Path(folder), epoch)
    ar = found["allreduce"]["bytes_sent_per_worker"]
    print(
        "| row | ours: worker 0 / average | published (100 epochs) | points below | "
        "GB sent per worker | all-reduce traffic / ours | datagrams lost |"
    )
    print("|---|---|---|---|---|---|---|")
    for name, (label, p0, pa) in PUBLISHED.items():
        if name not in found:
            continue
        r = found[name]
        if p0 is None:
            _, q0, qa = PUBLISHED[LOSSLESS]
            pub = f"({q0:.4f} / {qa:.4f} without loss)"
        else:
            q0, qa = p0, pa
            pub = f"{p0:.4f}" + ("" if pa is None else f" / {pa:.4f}")
        # one published figure (all-reduce, local): worker 0 against it; the local models'
        # average is not a model anyone trains
        gap = (
            q0 - r["acc_worker0"]
            if qa is None
            else max(q0 - r["acc_worker0"], qa - r["acc_average"])
        )
        ratio = ar / r["bytes_sent_per_worker"] if r["bytes_sent_per_worker"] else float("inf")
        ours = f"{r['acc_worker0']:.4f} / {r['acc_average']:.4f}"
        print(
            f"| {label} | {ours} | {pub} | {100 * gap:.2f} | {r['bytes_sent_per_worker'] / 1e9:.2f} | "
            f"{'-' if name in ('allreduce', 'local') else f'{ratio:.1f}x'} | {r['datagrams_lost']:,} |"
        )


if __name__ == "__main__":
    main(*sys.argv[1:])
