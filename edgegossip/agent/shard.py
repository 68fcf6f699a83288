"""This device's examples: its data as its [data] table says, and the order it visits them in."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from edgegossip.config import AgentConfig
from edgegossip.data import device, mnist
from edgegossip.models import footprint


class Shard:
    """This device's training examples, visited in a fresh permutation each epoch; the order is
    a function of (seed, worker, epoch), so a resumed agent continues where it stopped."""

    def __init__(self, cfg: AgentConfig, data: device.DeviceData):
        self.data = data
        self.batch = cfg.batch
        self.seed, self.worker = cfg.seed, cfg.id
        self.steps_per_epoch = max(1, data.rows // self.batch)
        self._epoch, self._order = -1, np.arange(data.rows)

    def batch_at(self, step: int) -> tuple[np.ndarray, np.ndarray]:
        epoch, pos = divmod(step, self.steps_per_epoch)
        if epoch != self._epoch:
            self._order = np.random.default_rng([self.seed, self.worker, epoch]).permutation(
                self.data.rows
            )
            self._epoch = epoch
        return self.data.batch(self._order[pos * self.batch : (pos + 1) * self.batch])


def load_data(cfg: AgentConfig, model) -> device.DeviceData:
    """This device's data as its [data] table says, checked against the model's shapes; the
    shard of MNIST or Fashion-MNIST (cached as the source's name), pixel rows held deflated
    (data/packed.py) unless the model's step is too light for that. A model trained with mse
    gets targets from a file's y, or its input as its own target (an autoencoder; a data
    set's labels are dropped)."""
    packed, mse = not model.light_step, model.loss == "mse"
    if cfg.source == "file":
        data = device.from_file(
            cfg.path, cfg.eval_fraction, cfg.label_column, cfg.seed, packed, targets=mse
        )
    else:
        data = device.from_mnist(
            cfg.id,
            cfg.workers,
            cfg.partition,
            cfg.seed,
            cfg.eval_examples,
            mnist.cache_path(cfg.source),
            packed,
            cfg.beta,
            cfg.classes_per_worker,
        )
        if mse:
            data.y = data.y_eval = None
    ids = np.dtype(model.input_dtype).kind == "i"
    device.check(data, cfg.inputs, cfg.classes, model.input_shape, model.loss, ids)
    if cfg.attack == "flip-labels" and data.y is not None:  # emulate --hostile: its own eval
        data.y = (cfg.classes - 1 - data.y).astype(data.y.dtype)  # stays true
    return data


PREFIX_BUDGET_MB = 64  # the most a device holds of a frozen prefix's outputs


def after_prefix(model, data: device.DeviceData) -> device.DeviceData:
    """The training rows as the model's frozen prefix computes them, once (compiler/prefix.py),
    the model then trained on them, where it has such a prefix, the rows have labels or
    targets of their own and their outputs fit in PREFIX_BUDGET_MB; else data as it was. The
    held-out rows stay as they are: evaluation runs the whole model."""
    if not _caches_prefix(model, data):
        return data
    parts = [model.features(device.ready(data.x[i : i + 256])) for i in range(0, data.rows, 256)]
    model.use_prefix()
    return replace(data, x=np.concatenate(parts), row_shape=tuple(model.prefix_shape))


def _prefix_bytes(model, data: device.DeviceData) -> int | None:
    """What the prefix's outputs of data's rows take, where after_prefix caches them; else None."""
    shape = getattr(model, "prefix_shape", None)
    if shape is None or data.y is None:
        return None
    size = data.rows * 4 * int(np.prod(shape))
    return size if size <= PREFIX_BUDGET_MB * 2**20 else None


def _caches_prefix(model, data: device.DeviceData) -> bool:
    return _prefix_bytes(model, data) is not None


def held(model, data: device.DeviceData) -> tuple[str, float]:
    """How the agent will train (footprint.WHOLE or CACHED, as after_prefix decides) and the MB
    it holds beside a step: its data, and the prefix's outputs where it caches them."""
    arrays = (data.x, data.y, data.x_eval, data.y_eval)
    mb = sum(a.nbytes for a in arrays if a is not None) / 2**20
    cached = _prefix_bytes(model, data)
    if cached is None:
        return footprint.WHOLE, mb
    return footprint.CACHED, mb + cached / 2**20
