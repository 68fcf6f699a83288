"""Writes tests/fixtures/onnx/: small models defined in PyTorch and exported to ONNX, each with
the reference gradients PyTorch computes on a fixed batch (train mode: BatchNorm on the batch's
statistics, no dropout), so the tests check `model compile` against a framework without
installing one. Run once, by hand, in a throwaway venv with torch and onnx:

    python3 -m venv /tmp/torchenv
    /tmp/torchenv/bin/pip install torch==2.13.0 onnx onnxscript numpy
    /tmp/torchenv/bin/python scripts/make-onnx-fixtures.py tests/fixtures/onnx

Each NAME.onnx comes with NAME.npz: x, y, the loss, and for every parameter (by its ONNX
initializer name) its value and its gradient; `versions` names the exporter. Beside it,
readme/net.onnx and net.onnx.data: the README's `Net` exported by its one-liner."""

import json
import sys
from pathlib import Path

import numpy as np
import onnx
import torch
from torch import nn


class FashionCNN(nn.Module):
    """Conv-BN-ReLU-Pool twice, then a linear head: the CNN of issue 43's second task."""

    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, 16, 3, padding=1),
            nn.BatchNorm2d(16),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(16, 32, 3, padding=1),
            nn.BatchNorm2d(32),
            nn.ReLU(),
            nn.MaxPool2d(2),
        )
        self.head = nn.Linear(32 * 7 * 7, 10)

    def forward(self, x):
        return self.head(torch.flatten(self.features(x), 1))


class VibrationCNN(nn.Module):
    """A 1-D CNN over a window of sensor features [T=32, F=3] (channels first), average pooled."""

    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(
            nn.Conv1d(3, 8, 5, padding=2),
            nn.Tanh(),
            nn.AvgPool1d(2),
            nn.Conv1d(8, 8, 3, groups=2),
            nn.LeakyReLU(0.1),
            nn.AdaptiveAvgPool1d(1),
        )
        self.head = nn.Linear(8, 4)

    def forward(self, x):
        return self.head(torch.flatten(self.net(x), 1))


class Head(nn.Module):
    """A classifier head on frozen features: MLP with sigmoid, softmax output."""

    def __init__(self):
        super().__init__()
        self.a = nn.Linear(24, 16)
        self.b = nn.Linear(16, 5)

    def forward(self, x):
        return torch.softmax(self.b(torch.sigmoid(self.a(x))), dim=1)


CASES = {
    "fashion_cnn": (FashionCNN, (8, 1, 28, 28), 10),
    "vibration_cnn": (VibrationCNN, (8, 3, 32), 4),
    "head": (Head, (8, 24), 5),
}


class Net(nn.Module):
    """The README's `Net`: a small convolutional classifier for 28x28 digits."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 8, 5, stride=2)
        self.head = nn.Linear(8 * 12 * 12, 10)

    def forward(self, x):
        return self.head(torch.flatten(torch.relu(self.conv(x)), 1))


class Regularised(nn.Module):
    """Conv-BatchNorm-ReLU, Dropout and a linear head: what an exporter may change."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 4, 3)
        self.bn = nn.BatchNorm2d(4)
        self.drop = nn.Dropout(0.25)
        self.head = nn.Linear(4 * 6 * 6, 3)

    def forward(self, x):
        return self.head(self.drop(torch.flatten(torch.relu(self.bn(self.conv(x))), 1)))


def exports(out: Path) -> None:
    """out/EXPORT.onnx: one model as four exports change it or keep it: eval mode (dynamo:
    Dropout left as an Identity), dynamo's optimize=True (BatchNorm folded into the Conv),
    TorchScript's constant folding (BatchNorm folded, weights renamed onnx::...), and train
    mode with optimize=False (both kept)."""
    out.mkdir(parents=True, exist_ok=True)
    x = torch.randn(2, 1, 8, 8)
    dynamic = {"x": {0: torch.export.Dim("batch")}}
    for name, train, kw in (
        ("eval-dynamo", False, {"dynamic_shapes": dynamic, "optimize": False}),
        ("optimized-dynamo", False, {"dynamic_shapes": dynamic, "optimize": True}),
        ("folded-torchscript", False, {"dynamo": False, "dynamic_axes": {"x": {0: "batch"}}}),
        ("train-dynamo", True, {"dynamic_shapes": dynamic, "optimize": False}),
        # torch.onnx.export's default: the example's batch of 2 fixed in the graph
        ("static-dynamo", True, {"optimize": False}),
        ("static-torchscript", True, {"dynamo": False, "do_constant_folding": False}),
    ):
        torch.manual_seed(0)
        model = Regularised().train(train)
        if kw.get("dynamo", True):  # dynamo: the weights inside the file, as fixtures are
            kw["external_data"] = False
        torch.onnx.export(model, (x,), str(out / f"{name}.onnx"), input_names=["x"], **kw)


class BatchCentred(nn.Module):
    """Subtracts the batch's mean: its examples are not independent of each other."""

    def __init__(self):
        super().__init__()
        self.head = nn.Linear(8, 3)

    def forward(self, x):
        return self.head(x - x.mean(0))


def mixing(out: Path) -> None:
    """out/mixing-static-dynamo.onnx: a model that mixes its batch, exported with the batch
    fixed (torch.onnx.export's default)."""
    torch.manual_seed(0)
    torch.onnx.export(
        BatchCentred(),
        (torch.randn(2, 8),),
        str(out / "mixing-static-dynamo.onnx"),
        input_names=["x"],
        external_data=False,
    )


def readme_net(out: Path) -> None:
    """out/net.onnx and out/net.onnx.data, written by the README's own export one-liner word
    for word (the default exporter keeps the weights in net.onnx.data beside the graph)."""
    import os

    out.mkdir(parents=True, exist_ok=True)
    here = os.getcwd()
    os.chdir(out)
    try:
        torch.manual_seed(0)
        torch.onnx.export(
            Net().train(),
            (torch.randn(1, 1, 28, 28),),
            "net.onnx",
            input_names=["x"],
            dynamic_shapes={"x": {0: torch.export.Dim("batch")}},
            optimize=False,
        )
    finally:
        os.chdir(here)


def main(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    versions = {"torch": torch.__version__, "onnx": onnx.__version__}
    for name, (cls, shape, classes) in CASES.items():  # each with cross-entropy
        torch.manual_seed(0)
        model = cls()
        x = torch.randn(*shape)
        y = torch.randint(0, classes, (shape[0],))
        model.eval()
        # the default exporter (torch.export-based); batch as a dynamic axis
        torch.onnx.export(
            model,
            (x,),
            str(out / f"{name}.onnx"),
            input_names=["x"],
            output_names=["out"],
            opset_version=18,
            dynamic_shapes={"x": {0: torch.export.Dim("batch")}},
            external_data=False,
            optimize=False,  # the optimiser would fold BatchNorm into Conv
        )
        model.train()
        logits = model(x)
        if name == "head":  # its output is a softmax: the loss is on what precedes it
            logits = model.b(torch.sigmoid(model.a(x)))
        value = nn.functional.cross_entropy(logits, y)
        model.zero_grad()
        value.backward()
        onnx_model = onnx.load(str(out / f"{name}.onnx"))
        inits = {i.name: onnx.numpy_helper.to_array(i) for i in onnx_model.graph.initializer}
        arrays = {"x": x.numpy(), "y": y.numpy(), "loss": np.array(value.item())}
        named = dict(model.named_parameters())
        for key, p in named.items():
            match = [k for k in inits if k == key] or [
                k
                for k, v in inits.items()
                if v.shape == tuple(p.shape) and np.array_equal(v, p.detach().numpy())
            ]
            if len(match) != 1:
                raise SystemExit(
                    f"{name}: cannot match parameter {key} to one initializer: {match}"
                )
            arrays[f"value/{match[0]}"] = p.detach().numpy()
            arrays[f"grad/{match[0]}"] = p.grad.numpy()
        np.savez(out / f"{name}.npz", **arrays, versions=np.array(json.dumps(versions)))
        print(name, sum(p.numel() for p in named.values()), "parameters,", versions)


if __name__ == "__main__":
    main(Path(sys.argv[1]))
    readme_net(Path(sys.argv[1]).parent / "readme")
    exports(Path(sys.argv[1]).parent / "exports")
    mixing(Path(sys.argv[1]).parent / "exports")
