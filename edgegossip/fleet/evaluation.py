"""What `fleet collect` scores the collected models on, and the training batches it estimates a
compiled model's BatchNorm statistics from: the fleet's data set (mnist, fashion-mnist) from
this machine's cache, its test split and the start of its training split; or, where each device
trains on its own file, those files as the fleet folder holds them, their held-out rows (each
file's x_eval, or the share its agent holds out) and their training rows."""

from __future__ import annotations

import numpy as np

from edgegossip.data import device as device_data
from edgegossip.data import mnist
from edgegossip.fleet import agentconf
from edgegossip.models.compiled import BATCHES, calibration

TESTS = ("held-out", *mnist.DATASETS)


def load(
    fleet, devices: list, test: str | None = None, targets: bool = False
) -> tuple[mnist.Mnist, list[tuple[np.ndarray, np.ndarray]]]:
    """(the test set, as an Mnist whose x_test/y_test are filled; the calibration batches).
    test: a data set's name, "held-out" (the devices' files' held-out rows), or None: held-out
    where the devices train on files of their own, else the fleet's data set. targets: the
    model is trained with mse (its files' y are targets, or absent: the input itself)."""
    own = [d for d in devices if d.data]
    if test is None:
        test = "held-out" if own else _source(fleet, devices)
    if test == "held-out" and not own:
        raise mnist.DataError("--test held-out: no device of the fleet has a data file")
    if not own:
        data = mnist.load(name=test)
        return data, calibration(data.batch, len(data.y_train))
    files = [_file(fleet, d, targets) for d in own]
    batches = []
    for f in files:
        batches += calibration(f.batch, f.rows)
    batches = batches[:BATCHES]
    if test != "held-out":
        return mnist.load(name=test), batches
    xs = [device_data.ready(f.x_eval) for f in files]
    x_test = np.concatenate(xs)
    y_test = np.concatenate([x if f.y_eval is None else f.y_eval for x, f in zip(xs, files)])
    empty = np.zeros((0, x_test.shape[1]), np.float32)
    none = np.zeros(0, np.int64)
    return mnist.Mnist(empty, none, empty, none, x_test, y_test), batches


def _source(fleet, devices: list) -> str:
    return agentconf.render(fleet, devices[0]).source if devices else "mnist"


def _file(fleet, d, targets: bool = False) -> device_data.DeviceData:
    cfg = agentconf.render(fleet, d)
    return device_data.from_file(
        fleet.root / d.data, cfg.eval_fraction, cfg.label_column, cfg.seed, targets=targets
    )
