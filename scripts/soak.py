"""A soak: a 4-agent seed-MLP fleet emulated for an hour (not part of `make test`), each agent's
resident memory, open descriptors, threads and disk writes sampled every minute from /proc.
After the warm-up every one of them must stay flat: RSS growing under 2 MB per hour, the
descriptors and threads within two of where they started, the writes at a steady rate.

    .venv/bin/python scripts/soak.py [--minutes 60] [--every 60] [--warmup 5] [--out DIR] [--json]

Runs `edgegossip emulate --backend loopback` (each agent's config path names it, so its process
is found by that), writes every sample to OUT/soak.jsonl and prints one row per agent; exits 1
when something did not stay flat."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

RSS_MB_PER_H = 2.0


def _agents(out: Path, nodes: int) -> dict[int, int]:
    """{agent id: pid} of the agents whose config lives in out."""
    found = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        for i in range(nodes):
            if str(out / f"agent{i}.toml").encode() in argv:
                found[i] = int(pid)
    return found


def _sample(pid: int) -> dict | None:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
        io = Path(f"/proc/{pid}/io").read_text()
        fds = len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return None
    field = {ln.split(":")[0]: ln.split(":")[1].split() for ln in status.splitlines() if ":" in ln}
    writes = {ln.split(":")[0]: int(ln.split(":")[1]) for ln in io.splitlines() if ":" in ln}
    return {
        "rss_mb": int(field["VmRSS"][0]) / 1024,
        "threads": int(field["Threads"][0]),
        "fds": fds,
        "written_mb": writes["write_bytes"] / 1e6,
    }


def _verdict(samples: list[dict], warmup_s: float) -> dict:
    steady = [s for s in samples if s["t"] >= warmup_s]
    if len(steady) < 2:
        return {"samples": len(steady), "flat": False, "why": "too few samples after warm-up"}
    first, last = steady[0], steady[-1]
    hours = (last["t"] - first["t"]) / 3600
    rss_growth = (last["rss_mb"] - first["rss_mb"]) / hours
    fds = sorted({s["fds"] for s in steady})
    threads = sorted({s["threads"] for s in steady})
    why = []
    if rss_growth >= RSS_MB_PER_H:
        why.append(f"RSS grows {rss_growth:.2f} MB/h")
    # a checkpoint being written holds a descriptor for a moment: a spread of two is no trend
    if fds[-1] - fds[0] > 2:
        why.append(f"descriptors {fds[0]}..{fds[-1]}")
    if threads[-1] - threads[0] > 2:
        why.append(f"threads {threads[0]}..{threads[-1]}")
    return {
        "samples": len(steady),
        "rss_mb_first": round(first["rss_mb"], 1),
        "rss_mb_last": round(last["rss_mb"], 1),
        "rss_mb_per_h": round(rss_growth, 2),
        "fds": fds,
        "threads": threads,
        "written_mb_per_h": round((last["written_mb"] - first["written_mb"]) / hours, 1),
        "flat": not why,
        "why": "; ".join(why) or None,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--minutes", type=float, default=60)
    ap.add_argument("--every", type=float, default=60, help="seconds between samples")
    ap.add_argument("--warmup", type=float, default=5, help="minutes left out of the verdict")
    ap.add_argument("--nodes", type=int, default=4)
    ap.add_argument("--out", type=Path, default=Path(f"runs/soak-{time.strftime('%Y%m%d-%H%M%S')}"))
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    out = a.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    cmd = [
        sys.executable, "-m", "edgegossip.cli.app", "emulate", "--nodes", str(a.nodes),
        "--model", "mlp", "--backend", "loopback", "--loss", "0.1",
        "--duration", str(a.minutes * 60), "--out", str(out / "fleet"),
    ]  # fmt: skip
    log = open(out / "emulate.log", "w")
    fleet = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    samples: dict[int, list[dict]] = {i: [] for i in range(a.nodes)}
    t0 = time.monotonic()
    with open(out / "soak.jsonl", "w") as f:
        try:
            while fleet.poll() is None:
                now = time.monotonic() - t0
                for i, pid in _agents(out / "fleet", a.nodes).items():
                    s = _sample(pid)
                    if s is not None:
                        rec = {"t": round(now, 1), "agent": i, "pid": pid, **s}
                        samples[i].append(rec)
                        f.write(json.dumps(rec) + "\n")
                        f.flush()
                print(f"soak: {now / 60:5.1f} min, {sum(map(len, samples.values()))} samples",
                      file=sys.stderr, flush=True)  # fmt: skip
                time.sleep(a.every)
        finally:
            if fleet.poll() is None:
                fleet.terminate()
            fleet.wait()
    verdicts = {i: _verdict(s, a.warmup * 60) for i, s in samples.items()}
    result = {"minutes": a.minutes, "every_s": a.every, "warmup_min": a.warmup, "agents": verdicts}
    (out / "soak.json").write_text(json.dumps(result, indent=1) + "\n")
    if a.json:
        print(json.dumps(result))
    else:
        for i, v in verdicts.items():
            print(f"agent {i}: " + ", ".join(f"{k} {v[k]}" for k in v))
    return 0 if fleet.returncode == 0 and all(v["flat"] for v in verdicts.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
