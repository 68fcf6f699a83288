"""Small inference models built with onnx.helper, as any exporter would write them, for tests
that need a compiled model of MNIST's shape without a framework: a softmax regression over
784 features (the lab's fleet trains it) whose initial weights are small and seeded."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def softmax_regression(path: Path, features: int = 784, classes: int = 10, seed: int = 0) -> Path:
    rng = np.random.default_rng(seed)
    w = (rng.normal(0, 0.01, (classes, features))).astype(np.float32)
    b = np.zeros(classes, np.float32)
    graph = helper.make_graph(
        [helper.make_node("Gemm", ["x", "fc.weight", "fc.bias"], ["logits"], transB=1)],
        "softmax_regression",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", features])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", classes])],
        [numpy_helper.from_array(w, "fc.weight"), numpy_helper.from_array(b, "fc.bias")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.save(model, str(path))
    return path


def compile_to(source: Path, out: Path) -> Path:
    p = subprocess.run(
        [sys.executable, "-m", "edgegossip.cli.app", "model", "compile", str(source)]
        + ["--loss", "cross-entropy", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert p.returncode == 0, p.stderr
    return out
