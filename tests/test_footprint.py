"""Issue 68, item 1: memory a user can plan with. `model compile --batch` measures a training
step's peak memory as a device's agent runs it, at batch 1 and at the batch asked, and keeps both
beside the model (memory.json, outside the digest); an agent reads its own batch off the line
through them (models/footprint.py). The emulated board that refuses such a batch is in
tests/test_emulate_endings.py."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from edgegossip import artifact
from edgegossip.models import footprint

FIXTURES = Path(__file__).parent / "fixtures"
pytestmark = pytest.mark.timeout(300)


def compile_model(source: Path, out: Path, *args: str) -> subprocess.CompletedProcess:
    p = subprocess.run(
        [sys.executable, "-m", "edgegossip.cli.app", "model", "compile", str(source)]
        + ["--loss", "cross-entropy", "--out", str(out), *args],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert p.returncode == 0, p.stderr
    return p


def test_compile_measures_a_steps_memory_at_the_batch_asked(tmp_path):
    """A torch-exported CNN: both points measured, the larger batch no smaller, the file what
    --json printed, the digest the model's alone; compiled again without --batch, the stale
    measurement is gone."""
    out = tmp_path / "cnn"
    plain = json.loads(compile_model(FIXTURES / "onnx" / "fashion_cnn.onnx", out, "--json").stdout)
    p = compile_model(FIXTURES / "onnx" / "fashion_cnn.onnx", out, "--batch", "64", "--json")
    measured = json.loads(p.stdout)
    peaks = measured["memory"][footprint.WHOLE]
    assert set(peaks) == {"1", "64"}
    assert 0 < peaks["1"] <= peaks["64"]
    assert json.loads((out / artifact.MEMORY).read_text()) == measured["memory"]
    assert measured["digest"] == plain["digest"]
    fp = footprint.read(out)
    assert fp is not None and fp.at(64) == peaks["64"] and fp.at(1) == peaks["1"]
    compile_model(FIXTURES / "onnx" / "fashion_cnn.onnx", out)
    assert not (out / artifact.MEMORY).exists()


def test_a_model_with_a_frozen_prefix_is_measured_both_ways_and_copied_with_it(tmp_path):
    """The zoo's MobileNetV2 (torch's default exporter) with only its head trained: a step on the
    prefix's outputs and one through the whole graph; artifact.copy (what emulate and deploy
    ship) carries the measurement."""
    out = tmp_path / "mnv2"
    p = compile_model(
        FIXTURES / "zoo" / "mobilenet_v2-dynamo.onnx", out, "--train", "head.*", "--batch", "8"
    )
    lines = [line for line in p.stdout.splitlines() if line.startswith("memory: ")]
    assert len(lines) == 2, p.stdout
    assert "on its prefix's outputs at batch 8" in lines[1]
    fp = footprint.read(out)
    assert fp is not None and set(fp.points) == {footprint.WHOLE, footprint.CACHED}
    artifact.copy(out, tmp_path / "shipped")
    assert footprint.read(tmp_path / "shipped") == fp


def test_the_line_through_two_points_and_a_file_that_is_not_one(tmp_path):
    fp = footprint.Footprint({footprint.WHOLE: ((1, 100.0), (9, 180.0))})
    assert fp.at(5) == pytest.approx(140.0)
    assert fp.at(33) == pytest.approx(420.0)  # beyond the points: the same line
    assert fp.at(5, footprint.CACHED) is None
    huge = '{"compiled": {' + ",".join(f'"{b}": 1' for b in range(1, 2000)) + "}}"
    for bad in ("", "[]", '{"compiled": {"x": 1}}', '{"compiled": {"8": -1}}', "{}", huge):
        (tmp_path / artifact.MEMORY).write_text(bad)
        assert footprint.read(tmp_path) is None, bad
