"""Requests are one JSON object {"op": OP}, OP one of OPS; replies are {"ok": true, ...} or
{"ok": false, "error": "one line"}. Anything else gets an error reply and changes nothing.

status reply: agent, version, config_hash, state (starting | training | paused | stopping),
clock (synchronised | unsynchronised | unknown: clock.py), step, epoch,
loss, accuracy, exchanges {completed, partial, timed_out, skipped}, link_loss {peer: fraction},
drops {reason: count}, datagrams_dropped, peak_rss_mb, uptime_s, and the disk (storage.py):
disk_written_mb, disk_written_mb_per_h, disk_free_mb, checkpoint_age_s, checkpoint_step,
checkpoint_failures, disk_note.
checkpoint reply: path, step.   stop / pause / resume reply: state."""

from __future__ import annotations

import json

from edgegossip.errors import UsageError

OPS = ("status", "stop", "pause", "resume", "checkpoint")
MAX_REQUEST = 4096  # bytes; a longer request is refused by the socket itself


class BadRequest(UsageError, ValueError):
    pass


def parse(raw: bytes) -> str:
    try:
        doc = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):  # 3,000 nested brackets fit 4 KB
        raise BadRequest("request is not JSON") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("op"), str):
        raise BadRequest('request must be {"op": ...}')
    if doc["op"] not in OPS:
        raise BadRequest(f"unknown op {doc['op'][:40]!r} (expected {', '.join(OPS)})")
    return doc["op"]


def encode(obj: dict) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


def error(message: str) -> bytes:
    return encode({"ok": False, "error": message})
