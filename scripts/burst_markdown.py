"""Render the runs of scripts/burst-sweep.sh as the results page's table of the claims under
bursts: per algorithm and mean burst length, the loss and burst the receivers observed, held-out
test accuracy of the average model and the range of the agents', steps per agent, and seconds
until the first and until every agent held 95% on its held-out slice.
Usage: python scripts/burst_markdown.py [DIR]"""

import json
import sys
from pathlib import Path

ALGORITHMS = ("elastic-gossip", "gossip-pull", "rps", "allreduce")
BURSTS = (1, 4, 16)


def cell(v, fmt="{:.4f}") -> str:
    return "-" if v is None else fmt.format(v)


def _failure(run: Path) -> str:
    """Why a run has no summary: the first agent's error line, or that it did not run."""
    for log in sorted(run.glob("agent*.log")):
        errors = [ln for ln in log.read_text().splitlines() if "error:" in ln]
        if errors:
            return f"failed: {errors[-1].split('error:', 1)[1].strip()} ({log.stem})"
    return "(no run)"


def main(d: Path) -> None:
    print(
        "| algorithm | mean burst configured | observed loss | observed mean burst | "
        "average model | agents | steps per agent | 95%: first / every agent (s) |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for algorithm in ALGORITHMS:
        for burst in BURSTS:
            f = d / f"{algorithm}-burst{burst}.json"
            if not f.is_file() or not f.read_text().strip():
                print(f"| {algorithm} | {burst} | {_failure(d / f.stem)} | | | | | |")
                continue
            s = json.loads(f.read_text())
            accs = [a["accuracy"] for a in s["agents"] if a["accuracy"] is not None]
            steps = [a["steps"] for a in s["agents"]]
            t = s["time_to_accuracy_s"]["0.95"]
            print(
                f"| {algorithm} | {burst} | {cell(s['observed_loss'])} | "
                f"{cell(s['observed_burst_mean'], '{:.1f}')} | "
                f"{cell(s['average_model_accuracy'])} | {min(accs):.4f}-{max(accs):.4f} | "
                f"{min(steps):,}-{max(steps):,} | "
                f"{cell(t['first_agent'], '{:.0f}')} / {cell(t['all_agents'], '{:.0f}')} |"
            )


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "runs/bursts"))
