"""Checkpoints: what np.load reads back is what was saved (the file is an ordinary .npz), saving
does not copy the model, and a save cut short leaves the previous checkpoint."""

import tracemalloc

import numpy as np

from edgegossip import checkpoint
from edgegossip.agent.checkpoints import Checkpoints
from edgegossip.config import AgentConfig
from edgegossip.dataplane.sender import Snapshots
from edgegossip.storage import Storage


def test_round_trip_is_an_ordinary_npz(tmp_path):
    arrays = {
        "params": np.random.default_rng(0).standard_normal(1000, dtype=np.float32),
        "step": 12345,
        "replay": np.zeros((0, 3), np.int64),
        "fortran": np.arange(12.0).reshape(3, 4).T,
        "mask": np.array([1, 0, 1], np.uint8),
    }
    checkpoint.save(tmp_path, **arrays)
    with np.load(tmp_path / checkpoint.NAME) as z:  # numpy's own reader
        assert sorted(z.files) == sorted(arrays)
        for k, v in arrays.items():
            np.testing.assert_array_equal(z[k], np.asarray(v))
            assert z[k].dtype == np.asarray(v).dtype and z[k].shape == np.asarray(v).shape
    assert int(checkpoint.load(tmp_path)["step"]) == 12345


def test_save_does_not_copy_the_model(tmp_path):
    x = np.ones(3_000_000, np.float32)  # 12 MB, the size of the MLP
    tracemalloc.start()
    try:
        checkpoint.save(tmp_path, params=x, momentum=x, step=1)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < x.nbytes / 10, peak  # np.savez would hold a whole copy at once


def test_failed_save_keeps_the_previous_checkpoint(tmp_path):
    checkpoint.save(tmp_path, params=np.zeros(4, np.float32))

    class Unsaveable:
        def __array__(self, dtype=None, copy=None):
            raise RuntimeError("power lost")

    try:
        checkpoint.save(tmp_path, params=np.ones(4, np.float32), broken=Unsaveable())
    except RuntimeError:
        pass
    np.testing.assert_array_equal(checkpoint.load(tmp_path)["params"], np.zeros(4, np.float32))
    assert not list(tmp_path.glob(".ckpt-*"))


def test_a_checkpoint_skipped_for_want_of_a_copy_is_due_at_the_next_step(tmp_path):
    """Every parameter copy in an exchange at step 100: the checkpoint is written at the first
    step a copy is free, not a whole interval later (counting step % every missed it, and a
    killed agent then had nothing to resume from)."""
    cfg = AgentConfig(
        id=0,
        listen="127.0.0.1:1",
        algorithm="local",
        output=str(tmp_path),
        checkpoint_every=100,
        checkpoint_every_s=0,
    )
    c = Checkpoints(cfg, None)
    c.storage = Storage(tmp_path, budget_bytes=10 << 20, checkpoint_bytes=1 << 12)
    c.pool = Snapshots(16, 1)
    x = np.arange(16, dtype=np.float32)
    try:
        assert not c.due(99) and c.due(100)
        held = c.pool.take(x)  # the only copy is in an exchange
        c.in_background(x, 100)
        assert c.due(101)  # still due
        held.release()
        c.in_background(x, 101)
        c.storage.close()
        assert int(checkpoint.load(tmp_path)["step"]) == 101
        assert not c.due(200) and c.due(201)  # the interval counts from the one written
        resumed = Checkpoints(cfg, None)
        assert resumed.resume(np.empty_like(x), np.empty_like(x)) == 101
        assert not resumed.due(102) and resumed.due(201)
    finally:
        c.storage.close()
