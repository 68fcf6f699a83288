"""Writes tests/fixtures/zoo/: small models of the kinds people train on a Pi, defined in
PyTorch and exported by both of torch's exporters as a user would (the docs' one-liner: the
batch a dynamic axis, BatchNorm kept), each with the loss and every parameter's gradient
PyTorch computes on a fixed batch in train mode (BatchNorm on the batch's statistics, dropout
off), so the tests check `model compile` against the framework without installing it. Run
once, by hand, in a throwaway venv:

    python3 -m venv /tmp/torchenv
    /tmp/torchenv/bin/pip install torch==2.13.0 onnx onnxscript numpy
    /tmp/torchenv/bin/python scripts/make-model-zoo.py tests/fixtures/zoo [NAME ...]

(NAMEs: only those models remade, every other fixture left as it is.)

NAME-dynamo.onnx / NAME-torchscript.onnx, each with NAME-EXPORTER.npz: x, y, loss, value/P and
grad/P for each parameter (by its ONNX initializer), `versions`; and zoo.json, what was made
and what an exporter refused. Beside it, finetune/: a backbone and a head, with PyTorch's
reference for fine-tuning the head on the backbone in eval mode."""

import json
import sys
import traceback
from pathlib import Path

import numpy as np
import onnx
import torch
from torch import nn


class DSCNN(nn.Module):
    """Keyword spotting (Hello Edge, 2017): a conv, then depthwise-separable blocks, BN, ReLU,
    global average pooling, over a 1x20x10 MFCC patch."""

    def __init__(self, c=16, classes=6):
        super().__init__()

        def ds(c):
            return nn.Sequential(
                nn.Conv2d(c, c, 3, padding=1, groups=c, bias=False),
                nn.BatchNorm2d(c),
                nn.ReLU(),
                nn.Conv2d(c, c, 1, bias=False),
                nn.BatchNorm2d(c),
                nn.ReLU(),
            )

        self.stem = nn.Sequential(
            nn.Conv2d(1, c, (5, 3), stride=2, padding=(2, 1)), nn.BatchNorm2d(c), nn.ReLU()
        )
        self.blocks = nn.Sequential(ds(c), ds(c))
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.head = nn.Linear(c, classes)

    def forward(self, x):
        return self.head(torch.flatten(self.pool(self.blocks(self.stem(x))), 1))


class InvertedResidual(nn.Module):
    """MobileNetV2's block: expand 1x1, depthwise 3x3, project 1x1, ReLU6, a residual."""

    def __init__(self, c, t=4):
        super().__init__()
        h = c * t
        self.body = nn.Sequential(
            nn.Conv2d(c, h, 1, bias=False),
            nn.BatchNorm2d(h),
            nn.ReLU6(),
            nn.Conv2d(h, h, 3, padding=1, groups=h, bias=False),
            nn.BatchNorm2d(h),
            nn.ReLU6(),
            nn.Conv2d(h, c, 1, bias=False),
            nn.BatchNorm2d(c),
        )

    def forward(self, x):
        return x + self.body(x)


class MobileNetV2Tiny(nn.Module):
    def __init__(self, classes=5):
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(3, 8, 3, stride=2, padding=1, bias=False), nn.BatchNorm2d(8), nn.ReLU6()
        )
        self.blocks = nn.Sequential(InvertedResidual(8), InvertedResidual(8))
        self.head = nn.Linear(8, classes)

    def forward(self, x):
        return self.head(self.blocks(self.stem(x)).mean((2, 3)))


class SqueezeExcite(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.fc1, self.fc2 = nn.Conv2d(c, c // 2, 1), nn.Conv2d(c // 2, c, 1)

    def forward(self, x):
        s = nn.functional.adaptive_avg_pool2d(x, 1)
        return x * nn.functional.hardsigmoid(self.fc2(nn.functional.relu(self.fc1(s))))


class MobileNetV3Tiny(nn.Module):
    """MobileNetV3's pieces: HardSwish, a squeeze-and-excite with HardSigmoid."""

    def __init__(self, classes=5):
        super().__init__()
        self.net = nn.Sequential(
            nn.Conv2d(3, 8, 3, stride=2, padding=1, bias=False),
            nn.BatchNorm2d(8),
            nn.Hardswish(),
            nn.Conv2d(8, 8, 3, padding=1, groups=8, bias=False),
            nn.BatchNorm2d(8),
            nn.Hardswish(),
            SqueezeExcite(8),
            nn.Conv2d(8, 16, 1, bias=False),
            nn.BatchNorm2d(16),
            nn.Hardswish(),
        )
        self.head = nn.Linear(16, classes)

    def forward(self, x):
        return self.head(self.net(x).mean((2, 3)))


class Residual(nn.Module):
    def __init__(self, c_in, c, stride, bias):
        super().__init__()
        self.a = nn.Conv2d(c_in, c, 3, stride, 1, bias=bias)
        self.bn_a = nn.BatchNorm2d(c)
        self.b = nn.Conv2d(c, c, 3, 1, 1, bias=bias)
        self.bn_b = nn.BatchNorm2d(c)
        self.skip = nn.Conv2d(c_in, c, 1, stride, bias=bias) if stride != 1 or c_in != c else None

    def forward(self, x):
        h = nn.functional.relu(self.bn_a(self.a(x)))
        h = self.bn_b(self.b(h))
        return nn.functional.relu(h + (x if self.skip is None else self.skip(x)))


class ResNet8(nn.Module):
    """MLPerf Tiny's image classifier, narrowed: three residual stacks."""

    def __init__(self, bias: bool, classes=10):
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(3, 8, 3, padding=1, bias=bias), nn.BatchNorm2d(8), nn.ReLU()
        )
        self.stacks = nn.Sequential(
            Residual(8, 8, 1, bias), Residual(8, 16, 2, bias), Residual(16, 16, 2, bias)
        )
        self.head = nn.Linear(16, classes)

    def forward(self, x):
        return self.head(
            torch.flatten(nn.functional.adaptive_avg_pool2d(self.stacks(self.stem(x)), 1), 1)
        )


class LeNet5(nn.Module):
    def __init__(self):
        super().__init__()
        self.f = nn.Sequential(
            nn.Conv2d(1, 6, 5, padding=2),
            nn.Tanh(),
            nn.AvgPool2d(2),
            nn.Conv2d(6, 16, 5),
            nn.Tanh(),
            nn.AvgPool2d(2),
        )
        self.c = nn.Sequential(nn.Linear(16 * 5 * 5, 32), nn.Tanh(), nn.Linear(32, 10))

    def forward(self, x):
        return self.c(torch.flatten(self.f(x), 1))


class Conv1d(nn.Module):
    """Accelerometer windows [3 axes, 32 steps]: conv, BN, ReLU, max pool, conv, ELU."""

    def __init__(self, classes=4):
        super().__init__()
        self.f = nn.Sequential(
            nn.Conv1d(3, 8, 5, padding=2),
            nn.BatchNorm1d(8),
            nn.ReLU(),
            nn.MaxPool1d(2),
            nn.Conv1d(8, 8, 3, padding=1),
            nn.ELU(),
        )
        self.head = nn.Linear(8 * 16, classes)

    def forward(self, x):
        return self.head(torch.flatten(self.f(x), 1))


class Encoder(nn.Module):
    """A 2-layer transformer encoder over 6 tokens of 16 features (attention, LayerNorm,
    GELU), mean-pooled."""

    def __init__(self, d=16, classes=4):
        super().__init__()
        layer = nn.TransformerEncoderLayer(
            d, 2, 32, dropout=0.0, activation="gelu", batch_first=True
        )
        self.enc = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.head = nn.Linear(d, classes)

    def forward(self, x):
        return self.head(self.enc(x).mean(1))


class GeluMLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(12, 16), nn.LayerNorm(16), nn.GELU(), nn.Linear(16, 3))

    def forward(self, x):
        return self.net(x)


class GRUNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.rnn = nn.GRU(3, 8, batch_first=True)
        self.head = nn.Linear(8, 4)

    def forward(self, x):
        return self.head(self.rnn(x)[0][:, -1])


class LSTMNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.rnn = nn.LSTM(3, 8, batch_first=True)
        self.head = nn.Linear(8, 4)

    def forward(self, x):
        return self.head(self.rnn(x)[0][:, -1])


class Embedding(nn.Module):
    """Token ids (int64) through an embedding table, mean-pooled, to a linear head: a small
    text or event-log classifier."""

    def __init__(self, vocab=50, d=8, classes=4):
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        self.head = nn.Linear(d, classes)

    def forward(self, x):
        return self.head(self.emb(x).mean(1))


class ConvAutoencoder(nn.Module):
    """A convolutional autoencoder for anomaly detection: strided convolutions down,
    transposed convolutions back up, trained to reconstruct its input (mse)."""

    def __init__(self):
        super().__init__()
        self.enc = nn.Sequential(
            nn.Conv2d(1, 4, 3, stride=2, padding=1),
            nn.ReLU(),
            nn.Conv2d(4, 8, 3, stride=2, padding=1),
        )
        self.dec = nn.Sequential(
            nn.ConvTranspose2d(8, 4, 3, stride=2, padding=1, output_padding=1),
            nn.ReLU(),
            nn.ConvTranspose2d(4, 1, 3, stride=2, padding=1, output_padding=1),
        )

    def forward(self, x):
        return self.dec(self.enc(x))


class UpsampleAutoencoder(nn.Module):
    """An autoencoder that upsamples (nearest, then bilinear) and convolves instead of
    transposed convolutions."""

    def __init__(self):
        super().__init__()
        self.enc = nn.Sequential(
            nn.Conv2d(1, 4, 3, stride=2, padding=1), nn.ReLU(), nn.MaxPool2d(2)
        )
        self.dec = nn.Sequential(
            nn.Upsample(scale_factor=2, mode="nearest"),
            nn.Conv2d(4, 4, 3, padding=1),
            nn.ReLU(),
            nn.Upsample(scale_factor=2, mode="bilinear"),
            nn.Conv2d(4, 1, 3, padding=1),
        )

    def forward(self, x):
        return self.dec(self.enc(x))


class DenseAutoencoder(nn.Module):
    """MLPerf Tiny's anomaly detection model in miniature: dense layers down to a bottleneck
    and back, over a window of spectrogram features."""

    def __init__(self, n=40):
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(n, 16),
            nn.BatchNorm1d(16),
            nn.ReLU(),
            nn.Linear(16, 4),
            nn.ReLU(),
            nn.Linear(4, 16),
            nn.ReLU(),
            nn.Linear(16, n),
        )

    def forward(self, x):
        return self.net(x)


class PooledSequence(nn.Module):
    """Tokens projected, max-pooled over the sequence (amax: ONNX's ReduceMax) and the pooled
    features repeated (Tile) before the head."""

    def __init__(self, classes=3):
        super().__init__()
        self.proj = nn.Linear(8, 12)
        self.head = nn.Linear(24, classes)

    def forward(self, x):
        return self.head(torch.relu(self.proj(x)).amax(1).repeat(1, 2))


class Attention(nn.Module):
    """Attention written by hand, as people write it: one projection chunked into queries, keys
    and values (`chunk`: the default exporter's SplitToSequence and SequenceAt when not
    optimised, as the docs' one-liner leaves it), scaled dot products, a residual, mean-pooled."""

    def __init__(self, d=16, classes=4):
        super().__init__()
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.head = nn.Linear(d, classes)
        self.scale = d**-0.5

    def forward(self, x):
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        a = torch.softmax(q @ k.transpose(1, 2) * self.scale, dim=-1)
        return self.head((x + self.proj(a @ v)).mean(1))


# name -> (the model, a batch's shape, its targets: the number of classes for cross-entropy,
# "mse" to reconstruct the input, ("ids", vocabulary, classes) for token ids)
ZOO = {
    "ds_cnn": (DSCNN, (8, 1, 20, 10), 6),
    "mobilenet_v2": (MobileNetV2Tiny, (8, 3, 16, 16), 5),
    "mobilenet_v3": (MobileNetV3Tiny, (8, 3, 16, 16), 5),
    "resnet8": (lambda: ResNet8(bias=True), (8, 3, 16, 16), 10),
    "resnet8_nobias": (lambda: ResNet8(bias=False), (8, 3, 16, 16), 10),
    "lenet5": (LeNet5, (8, 1, 28, 28), 10),
    "conv1d": (Conv1d, (8, 3, 32), 4),
    "transformer": (Encoder, (8, 6, 16), 4),
    "gelu_mlp": (GeluMLP, (8, 12), 3),
    "gru": (GRUNet, (8, 10, 3), 4),
    "lstm": (LSTMNet, (8, 10, 3), 4),
    "embedding": (Embedding, (8, 12), ("ids", 50, 4)),
    "conv_autoencoder": (ConvAutoencoder, (8, 1, 16, 16), "mse"),
    "upsample_autoencoder": (UpsampleAutoencoder, (8, 1, 16, 16), "mse"),
    "dense_autoencoder": (DenseAutoencoder, (8, 40), "mse"),
    "pooled_sequence": (PooledSequence, (8, 6, 8), 3),
    "attention": (Attention, (8, 6, 16), 4),
}


def batch(shape, target) -> tuple:
    """(x, y) for a zoo model: y the classes, or x itself for mse."""
    if isinstance(target, tuple):
        _, vocab, classes = target
        return torch.randint(0, vocab, shape), torch.randint(0, classes, (shape[0],))
    x = torch.randn(*shape)
    return (x, x.clone()) if target == "mse" else (x, torch.randint(0, target, (shape[0],)))


def export(model, x, path: Path, exporter: str) -> None:
    model.eval()
    if exporter == "dynamo":  # the default exporter, as docs/own-model.md has it
        torch.onnx.export(
            model,
            (x,),
            str(path),
            input_names=["x"],
            dynamic_shapes={"x": {0: torch.export.Dim("batch")}},
            external_data=False,
            optimize=False,
        )
    else:  # TorchScript: BatchNorm kept with constant folding off
        torch.onnx.export(
            model,
            (x,),
            str(path),
            input_names=["x"],
            dynamo=False,
            dynamic_axes={"x": {0: "batch"}},
            do_constant_folding=False,
        )


def reference(model, x, y, path: Path) -> dict:
    model.train()
    if y.dtype.is_floating_point:  # mse: the mean over every element, as model compile's
        value = nn.functional.mse_loss(model(x), y)
    else:
        value = nn.functional.cross_entropy(model(x), y)
    model.zero_grad()
    value.backward()
    graph = onnx.load(str(path)).graph
    inits = {i.name: onnx.numpy_helper.to_array(i) for i in graph.initializer}
    for n in graph.node:  # TorchScript hands equal weights out through Identity nodes
        if n.op_type == "Identity" and n.input[0] in inits:
            inits.setdefault(n.output[0], inits[n.input[0]])
    arrays = {"x": x.numpy(), "y": y.numpy(), "loss": np.array(value.item())}
    arrays["loss_kind"] = np.array("mse" if y.dtype.is_floating_point else "cross-entropy")
    for key, p in model.named_parameters():
        match = [k for k in inits if k == key] or [
            k
            for k, v in inits.items()
            if v.shape == tuple(p.shape) and np.array_equal(v, p.detach().numpy())
        ]
        if len(match) != 1:  # an exporter that rewrote the weight (a recurrent layer's gates)
            arrays[f"unmatched/{key}"] = p.detach().numpy()
            continue
        arrays[f"value/{match[0]}"] = p.detach().numpy()
        arrays[f"grad/{match[0]}"] = p.grad.numpy()
    return arrays


class FineTune(nn.Module):
    """A pretrained backbone and a new head: what a device fine-tunes (issue 56)."""

    def __init__(self, classes=5):
        super().__init__()
        self.backbone = nn.Sequential(
            nn.Conv2d(1, 8, 3, padding=1),
            nn.BatchNorm2d(8),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(8, 16, 3, padding=1),
            nn.BatchNorm2d(16),
            nn.ReLU(),
            nn.AdaptiveAvgPool2d(1),
        )
        self.head = nn.Linear(16, classes)

    def forward(self, x):
        return self.head(torch.flatten(self.backbone(x), 1))


def finetune(out: Path) -> None:
    """FINETUNE-EXPORTER.onnx with PyTorch's reference for `--freeze 'backbone.*'`: the
    backbone in eval mode (BatchNorm on its running statistics, which are made non-trivial
    first) and not trainable, the head trained."""
    out.mkdir(parents=True, exist_ok=True)
    for exporter in ("dynamo", "torchscript"):
        torch.manual_seed(0)
        model = FineTune()
        with torch.no_grad():  # as if pretrained: running statistics of its own
            model.train()
            for _ in range(5):
                model(torch.randn(32, 1, 12, 12) * 2 + 0.5)
        x, y = torch.randn(8, 1, 12, 12), torch.randint(0, 5, (8,))
        path = out / f"finetune-{exporter}.onnx"
        export(model, x, path, exporter)
        model.backbone.eval()
        model.head.train()
        for p in model.backbone.parameters():
            p.requires_grad_(False)
        value = nn.functional.cross_entropy(model(x), y)
        value.backward()
        arrays = {"x": x.numpy(), "y": y.numpy(), "loss": np.array(value.item())}
        for key, p in model.head.named_parameters():
            arrays[f"value/head.{key}"] = p.detach().numpy()
            arrays[f"grad/head.{key}"] = p.grad.numpy()
        np.savez(out / f"finetune-{exporter}.npz", **arrays)


def main(out: Path, only: list[str]) -> None:
    """Every zoo model's exports and references into out (with only, those models alone, the
    others' entries in zoo.json kept: a fixture is remade only when its model changes)."""
    out.mkdir(parents=True, exist_ok=True)
    versions = {"torch": torch.__version__, "onnx": onnx.__version__}
    index = out / "zoo.json"
    made = json.loads(index.read_text())["models"] if only and index.exists() else {}
    for name, (cls, shape, target) in ZOO.items():
        if only and name not in only:
            continue
        for exporter in ("dynamo", "torchscript"):
            torch.manual_seed(0)
            model = cls()
            x, y = batch(shape, target)
            path = out / f"{name}-{exporter}.onnx"
            try:
                export(model, x, path, exporter)
            except Exception as e:  # what the exporter itself refused
                made[f"{name}-{exporter}"] = (
                    f"export failed: {type(e).__name__}: {str(e).splitlines()[0][:200]}"
                )
                traceback.print_exc()
                continue
            arrays = reference(model, x, y, path)
            np.savez(
                out / f"{name}-{exporter}.npz", **arrays, versions=np.array(json.dumps(versions))
            )
            n = sum(p.numel() for p in model.parameters())
            made[f"{name}-{exporter}"] = f"{n} parameters"
            print(name, exporter, n, "parameters")
    order = [f"{n}-{e}" for n in ZOO for e in ("dynamo", "torchscript")]
    made = {k: made[k] for k in order if k in made}
    index.write_text(json.dumps({"versions": versions, "models": made}, indent=1) + "\n")
    if not only:
        finetune(out.parent / "finetune")


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2:])
