"""Run one task per device at once, bounded in number and time; every device ends as one row.

A task returns a dict (merged into the row, which has name and ok) or raises; an exception becomes
ok false and error with one line, never a traceback, and never stops the other devices."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, as_completed

from edgegossip.fleet.ssh import SshError


def each(
    devices: list,
    task: Callable,
    concurrency: int = 8,
    timeout_s: float = 300,
    progress: bool = True,
    verb: str = "done",
) -> list[dict]:
    """task(device, deadline) for every device; rows in inventory order."""
    rows: dict[str, dict] = {}
    t0 = time.monotonic()
    with ThreadPoolExecutor(max_workers=max(1, min(concurrency, len(devices) or 1))) as pool:
        futures = {pool.submit(_one, task, d, t0 + timeout_s): d for d in devices}
        for n, fut in enumerate(as_completed(futures), 1):
            d = futures[fut]
            row = rows[d.name] = fut.result()
            if progress:
                status = verb if row["ok"] else f"FAILED: {row['error']}"
                print(
                    f"[{n}/{len(devices)}] {d.name}: {status} ({row['seconds']:.1f} s)",
                    file=sys.stderr,
                    flush=True,
                )
    return [rows[d.name] for d in devices]


def _one(task: Callable, device, deadline: float) -> dict:
    t = time.monotonic()
    row = {"name": device.name, "ok": True, "error": None}
    try:
        row.update(task(device, deadline) or {})
    except (SshError, OSError, ValueError, RuntimeError) as e:
        row.update(ok=False, error=str(e).splitlines()[0] if str(e) else type(e).__name__)
    except Exception as e:  # whatever one device sent back, it fails that device's row alone
        row.update(
            ok=False, error=f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:300]
        )
    row["seconds"] = round(time.monotonic() - t, 1)
    return row
