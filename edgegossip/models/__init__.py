"""NumPy models whose parameters live in one flat float32 vector (every layer is a view)."""

from __future__ import annotations

from edgegossip.models.base import Model


def make_model(name: str, seed: int = 0) -> Model:
    if name == "mlp":
        from edgegossip.models.mlp import MLP
        return MLP.seed_mlp(seed)
    if name == "logreg":
        from edgegossip.models.mlp import MLP
        return MLP([784, 10], dropout_in=0.0, dropout_hidden=0.0, seed=seed)
    if name == "cnn":
        from edgegossip.models.cnn import CNN
        return CNN(seed=seed)
    raise ValueError(f"unknown model {name!r}; choose mlp, logreg or cnn")


MODELS = ("mlp", "logreg", "cnn")

# onnx and onnxruntime are an optional extra: PyPI has no wheels for them on 32-bit ARM, and a
# NumPy-only agent does not need them
ONNX_MISSING = ("the onnx backend and ONNX export need onnx and onnxruntime, which are not "
                "installed: pip install 'edgegossip[onnx]'")


def onnx_available() -> bool:
    from importlib.util import find_spec
    return find_spec("onnx") is not None and find_spec("onnxruntime") is not None
