"""A model compiled by `edgegossip model compile` (the folder: edgegossip/artifact.py), trained in
stock onnxruntime with the Model interface of the NumPy models: one flat float32 parameter
vector, loss_grad writing the gradient into the caller's buffer.

Nothing but json, NumPy and onnxruntime runs here: the gradient graph was built on the
operator's machine, so a device needs no gradient builder and no framework.

BatchNorm: the training graph normalises with the batch's own statistics, and so does
infer.onnx (evaluation batches are thousands of examples here). No running averages are kept
on the device and none are gossiped: `fleet collect` estimates them for the averaged
parameters from training data when it writes them back into the user's own model
(models/writeback.py).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from edgegossip import artifact
from edgegossip.artifact import ArtifactError
from edgegossip.models.base import FlatLayout, Model

BATCH = 256  # examples per batch whose BatchNorm statistics are averaged (models/writeback.py)
BATCHES = 8  # batches at the most


def calibration(batch: Callable, n: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """Up to BATCHES equal batches of the first n training examples, batch(indices) giving
    each (x, y)."""
    n = min(n, BATCH * BATCHES)
    return [batch(np.arange(a, a + BATCH)) for a in range(0, n - BATCH + 1, BATCH)]


class CompiledModel(Model):
    """Train and evaluate the compiled model in `folder` in stock onnxruntime."""

    def __init__(self, folder: str | Path, threads: int = 1):
        self.folder = Path(folder)
        self.artifact = artifact.read(self.folder)
        m = self.manifest = self.artifact.manifest
        self.digest = self.artifact.digest
        self.layout = FlatLayout([(p.name, p.shape) for p in m.params])
        self.input_shape = m.input_shape
        self.inputs = int(np.prod(self.input_shape))
        self.classes = m.classes or int(np.prod(m.output_shape))
        self.loss = m.loss
        self.output_shape = m.output_shape
        self.input_name = m.input_name
        # float32 features, or token ids (int64): the data layer holds either as float32,
        # exact for ids below 2^24
        self.input_dtype = np.dtype(m.input_dtype)
        self._threads = threads
        # a frozen prefix computed once per example (compiler/prefix.py): what a step trains
        # on once the device has (use_prefix)
        self.prefix_shape = m.prefix.shape if self.artifact.has_prefix and m.prefix else None
        self._train_file, self._train_input = "train.onnx", self.input_name
        self._train_shape = self.input_shape
        self._train: Any = None  # onnxruntime sessions, opened at first use
        self._features: Any = None
        self._infer: Any = None
        self._loss_out = np.zeros((), np.float32)
        self._profile: str | None = None  # start_profiling's file prefix, while it records

    def _session(self, name: str, profile: str | None = None):
        import onnxruntime as ort

        opts = ort.SessionOptions()
        opts.log_severity_level = 3
        opts.intra_op_num_threads = self._threads
        opts.inter_op_num_threads = 1
        # no preplanned block for every intermediate tensor of the graph at once: the CNN's
        # training session held 42 MB at batch 32 with it, 31 without (110 and 66 at 128), for
        # 1-3% of step time (`bench train`, docs/own-model.md): memory is what a Pi lacks
        opts.enable_mem_pattern = False
        if profile:
            opts.enable_profiling, opts.profile_file_prefix = True, profile
        return ort.InferenceSession(
            str(self.artifact.path(name)), opts, providers=["CPUExecutionProvider"]
        )

    def _training(self) -> None:
        """The training graph's session and its IO binding, opened at first use."""
        if self._train is None:
            self._train = self._session(self._train_file, self._profile)
            self._io = self._train.io_binding()

    def start_profiling(self, prefix: str) -> None:
        """Reopen the training session with onnxruntime's profiler on (`bench train --profile`):
        every op of every step from here is timed, until end_profiling."""
        self._profile, self._train = prefix, None

    def end_profiling(self) -> str:
        """The profiler's trace (onnxruntime's JSON), the session reopened without it next."""
        assert self._train is not None and self._profile, "start_profiling, then steps"
        path = self._train.end_profiling()
        self._profile, self._train = None, None
        return path

    def shapes(self, inputs: int, classes: int) -> tuple[int, int]:
        """The manifest's, whatever the settings say."""
        return self.inputs, self.classes

    def init(self, seed: int) -> np.ndarray:
        """The exported weights: every device of a fleet starts from the same ones."""
        x = np.load(self.artifact.path("initial.npy"), allow_pickle=False)
        if x.shape != (self.n_params,) or x.dtype != np.float32:
            raise ArtifactError(f"{self.folder}/initial.npy does not hold {self.n_params} float32")
        return x.copy()

    def _batch(self, x: np.ndarray) -> np.ndarray:
        return np.ascontiguousarray(x, self.input_dtype).reshape(len(x), *self.input_shape)

    def features(self, x: np.ndarray, batch: int = 256) -> np.ndarray:
        """The frozen prefix's output for each row of x, flat float32 [n, prefix size] (its
        session kept until use_prefix)."""
        if self._features is None:
            self._features = self._session("features.onnx")
        session = self._features
        name = session.get_inputs()[0].name
        out = [
            session.run(None, {name: self._batch(x[i : i + batch])})[0].reshape(
                min(batch, len(x) - i), -1
            )
            for i in range(0, len(x), batch)
        ]
        return np.ascontiguousarray(np.concatenate(out), np.float32)

    @property
    def on_prefix(self) -> bool:
        """Trains on the frozen prefix's outputs (use_prefix)."""
        return self._train_file != "train.onnx"

    def use_prefix(self) -> None:
        """Train from here on on the prefix's output (features()) instead of the input."""
        if self.prefix_shape is None or self.manifest.prefix is None:
            raise ArtifactError(f"{self.folder}: no frozen prefix to train after")
        self._train_file = "train-cached.onnx"
        self._train_input = self.manifest.prefix.input
        self._train_shape = self.prefix_shape
        self._train = self._features = None  # the prefix's session is not needed again

    def loss_grad(self, params, grad, x, y, rng) -> float:
        """Mean loss on (x, y); writes d loss / d params into grad. Dropout, if the model has
        it, draws its masks in onnxruntime (rng is not used)."""
        self._training()
        io = self._io
        io.bind_input("params", "cpu", 0, np.float32, [self.n_params], params.ctypes.data)
        if not self.on_prefix:
            io.bind_cpu_input(self.input_name, self._batch(x))
        else:
            rows = np.ascontiguousarray(x, np.float32).reshape(len(x), *self._train_shape)
            io.bind_cpu_input(self._train_input, rows)
        io.bind_cpu_input("y", self._labels(y))
        io.bind_output("loss", "cpu", 0, np.float32, [], self._loss_out.ctypes.data)
        io.bind_output("grad", "cpu", 0, np.float32, [self.n_params], grad.ctypes.data)
        for out in self._train.get_outputs()[2:]:
            io.bind_output(out.name, "cpu")  # logits, batch statistics: not kept
        self._train.run_with_iobinding(io)
        return float(self._loss_out)

    def batch_statistics(self, params: np.ndarray, x: np.ndarray, y: np.ndarray) -> dict:
        """Each BatchNormalization's mean and variance over the batch (x, y), as the training
        step computes them: {running-statistic initializer: flat float32}."""
        state = self.manifest.state
        if not state:
            return {}
        self._training()
        whole = self._session("train.onnx") if self.on_prefix else self._train
        feed = {
            "params": np.ascontiguousarray(params, np.float32),
            self.input_name: self._batch(x),
            "y": self._labels(y),
        }
        got = whole.run([s.output for s in state], feed)
        return {s.initializer: v for s, v in zip(state, got)}

    def _labels(self, y: np.ndarray) -> np.ndarray:
        if self.loss == "cross-entropy":
            return np.ascontiguousarray(y, np.int64)
        return np.ascontiguousarray(y, np.float32).reshape(len(y), *self.output_shape)

    def logits(self, params: np.ndarray, x: np.ndarray) -> np.ndarray:
        if self._infer is None:
            self._infer = self._session("infer.onnx")
        feed = {"params": np.ascontiguousarray(params, np.float32), self.input_name: self._batch(x)}
        return self._infer.run(None, feed)[0].reshape(len(x), -1)
