"""The fine-tuning example's starting point (docs/fine-tuning.md): a small CNN pretrained in
PyTorch on MNIST from edgegossip's own cache (`edgegossip data fetch mnist`), exported as the
docs' one-liner exports a model, ready to be fine-tuned on Fashion-MNIST by a fleet. Offline:
it reads only the cache. In a PyTorch environment (torch and onnx; nothing of ours):

    python scripts/pretrain-mnist.py pretrained.onnx [--epochs 1]

Writes pretrained.onnx (and pretrained.onnx.data) and prints the test accuracy on MNIST."""

import argparse
import os
from pathlib import Path

import numpy as np
import torch
from torch import nn

MEAN, STD = 0.1307, 0.3081  # as edgegossip normalises pixels (data/mnist.py)


class Net(nn.Module):
    """Two convolutional blocks, then a third pooled to one value per channel, then a linear
    head: backbone.0 and backbone.1 can stay as pretrained, backbone.2 and head be tuned."""

    def __init__(self, classes=10):
        super().__init__()

        def block(c_in, c_out, pool):
            return nn.Sequential(
                nn.Conv2d(c_in, c_out, 3, padding=1), nn.BatchNorm2d(c_out), nn.ReLU(), pool
            )

        self.backbone = nn.Sequential(
            block(1, 16, nn.MaxPool2d(2)),
            block(16, 32, nn.MaxPool2d(2)),
            block(32, 64, nn.AdaptiveAvgPool2d(1)),
        )
        self.head = nn.Linear(64, classes)

    def forward(self, x):
        return self.head(torch.flatten(self.backbone(x), 1))


def cache() -> Path:
    base = os.environ.get("EDGEGOSSIP_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "edgegossip"
    )
    return Path(base) / "mnist.npz"


def tensors(x: np.ndarray, y: np.ndarray):
    x = (torch.from_numpy(x.reshape(-1, 1, 28, 28)).float() / 255 - MEAN) / STD
    return x, torch.from_numpy(y.astype(np.int64))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out", type=Path)
    ap.add_argument("--epochs", type=int, default=1)
    args = ap.parse_args()
    with np.load(cache()) as z:
        x, y = tensors(z["x_train"], z["y_train"])
        x_test, y_test = tensors(z["x_test"], z["y_test"])
    torch.manual_seed(0)
    net = Net()
    opt = torch.optim.Adam(net.parameters(), 1e-3)
    for _ in range(args.epochs):
        net.train()
        for idx in torch.randperm(len(y)).split(64):
            opt.zero_grad()
            nn.functional.cross_entropy(net(x[idx]), y[idx]).backward()
            opt.step()
    net.eval()
    with torch.no_grad():
        acc = (net(x_test).argmax(1) == y_test).float().mean().item()
    print(f"MNIST test accuracy {acc:.4f}")
    out = args.out.resolve()
    os.chdir(out.parent)  # the one-liner's export, as docs/own-model.md has it
    torch.onnx.export(
        net.train(),
        (torch.randn(1, 1, 28, 28),),
        out.name,
        input_names=["x"],
        dynamic_shapes={"x": {0: torch.export.Dim("batch")}},
        optimize=False,
    )


if __name__ == "__main__":
    main()
