"""One local-only agent in a process of its own, as the disk and metrics benchmarks run it: no
network in the way, its output in a folder of its own, one BLAS thread."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from edgegossip import config
from edgegossip.algorithms.local import Local


def start(model: str, out: Path, seconds: float, **settings) -> subprocess.Popen:
    cfg = config.AgentConfig(
        id=0,
        listen="127.0.0.1:1",
        algorithm=Local.name,
        workers=1,
        model=model,
        duration_s=seconds,
        output=str(out),
        **settings,
    )
    path = out.parent / f"{out.name}.toml"
    path.write_text(config.to_toml(cfg))
    return subprocess.Popen(
        [sys.executable, "-m", "edgegossip.cli.app", "agent", "--config", str(path)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "OPENBLAS_NUM_THREADS": "1"},
    )


def finish(p: subprocess.Popen, model: str, timeout_s: float) -> None:
    """Wait for the agent; a failed one is an error naming its last line."""
    try:
        _, err = p.communicate(timeout=timeout_s)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    if p.returncode != 0:
        raise RuntimeError(f"agent ({model}): {err.strip().splitlines()[-1:]}")
