"""What one device sends back to `fleet collect` (issue 54, items 3 and 4): its archive and its
metrics are its word. A record no agent writes, or an archive that costs more work than an
agent's own tar could, is that device's failed row; the other devices are collected, averaged
and exported."""

import io
import json
import subprocess
import tarfile
import zlib

import numpy as np
import pytest

from edgegossip import checkpoint
from edgegossip.fleet import collect, create, remote
from edgegossip.fleet.ssh import SshError


class _Device:
    """An Ssh that answers every command with the bytes the device chose."""

    def __init__(self, reply: bytes, deadline=None):
        self.reply, self.deadline = reply, deadline

    def run(self, command, input=None, timeout=60, check=True, limit=0):
        return subprocess.CompletedProcess(command, 0, self.reply, b"")


def _archive(tmp_path, name: str, metrics: list[str]) -> bytes:
    """A device's tar of a logreg checkpoint and these metrics lines, as its agent writes."""
    src = tmp_path / name
    src.mkdir()
    checkpoint.save(src, params=np.zeros(7850, np.float32), step=40)
    (src / "metrics.jsonl").write_text("".join(line + "\n" for line in metrics))
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as t:
        for member in ("checkpoint.npz", "metrics.jsonl"):
            t.add(src / member, member)
    return buf.getvalue()


def _record(t: float, **change) -> str:
    r = {"time": t, "step": 20, "accuracy": 0.5, "exchanges": {"completed": 1}, "bytes_sent": 9}
    return json.dumps({**r, **change})


GOOD = [_record(1.0), _record(2.0)]


@pytest.mark.parametrize(
    "line,why",
    [
        ("5", "a record is int"),
        (_record(3.0, bytes_sent="many"), "bytes_sent is a string"),
        (json.dumps({"step": 3, "accuracy": 0.4, "exchanges": {}}), "no time"),
        (json.dumps({"time": 3.0, "step": 3, "accuracy": 0.4}), "no exchanges"),
        (_record(3.0, accuracy="high"), "accuracy is a string"),
    ],
    ids=["bare-number", "string-counter", "no-time", "no-exchanges", "string-accuracy"],
)
def test_one_devices_bad_metrics_line_is_its_failed_row(
    tmp_path, monkeypatch, mnist_data, line, why
):
    hosts = [{"name": f"pi{i}", "address": f"192.0.2.{i + 1}", "user": "pi"} for i in range(3)]
    fleet = create.create(
        tmp_path / "f", "t", hosts, {"train": {"model": "logreg"}}, progress=lambda m: None
    )
    replies = {
        0: _archive(tmp_path, "a0", GOOD),
        1: _archive(tmp_path, "a1", [*GOOD, line]),
        2: _archive(tmp_path, "a2", GOOD),
    }
    monkeypatch.setattr(collect, "Ssh", lambda f, d, dl: _Device(replies[d.id], dl))
    out = tmp_path / "out"
    summary = collect.collect(fleet, fleet.devices, out, False, 2, 60, test="mnist")
    rows = {r["agent"]: r for r in summary["devices"]}
    assert [rows[i]["ok"] for i in range(3)] == [True, False, True]
    assert "metrics are refused" in rows[1]["error"] and why in rows[1]["error"]
    assert summary["average_model_accuracy"] is not None
    assert (out / "summary.json").is_file() and not (out / "agent1").exists()


def _headers(n: int) -> bytes:
    return tarfile.TarInfo("empty").tobuf(format=tarfile.USTAR_FORMAT) * n


def test_a_compressed_archive_of_many_members_is_not_read(tmp_path):
    """Python's tarfile detects gzip, bz2 and xz by itself and visits every member: 200,000
    empty members in a 200 KB gzip stream, then a checkpoint, were all read and the checkpoint
    taken. An agent's tar is plain: a compressed reply is not read at all."""
    good = _archive(tmp_path, "a", GOOD)
    z = zlib.compressobj(1, zlib.DEFLATED, 31)  # gzip framing
    bomb = z.compress(_headers(200_000)) + z.compress(good) + z.flush()
    assert len(bomb) < 1 << 20
    with pytest.raises(SshError, match="no checkpoint"):
        remote.fetch_output(_Device(bomb), tmp_path / "out")
    assert not any((tmp_path / "out").iterdir())


def test_an_archive_is_read_only_as_far_as_its_member_bound(tmp_path):
    """A plain tar whose checkpoint comes after more members than an agent's tar has: the
    reader stops at MAX_MEMBERS headers, so the work a reply causes is bounded by that, not by
    the bytes it may hold."""
    good = _archive(tmp_path, "a", GOOD)
    padded = _headers(remote.MAX_MEMBERS) + good
    with pytest.raises(SshError, match="no checkpoint"):
        remote.fetch_output(_Device(padded), tmp_path / "out")
    assert remote.fetch_output(_Device(good), tmp_path / "ok") == list(remote.OUTPUT_NAMES)


def test_reading_an_archive_stops_at_the_devices_deadline(tmp_path):
    """The deadline covers the parsing, not only the SSH process: a reply read after it is
    not taken."""
    good = _archive(tmp_path, "a", GOOD)
    with pytest.raises(SshError, match="no checkpoint"):
        remote.fetch_output(_Device(good, deadline=0.0), tmp_path / "out")
