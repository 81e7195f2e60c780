#!/usr/bin/env python3
"""PyTorch's gradients at ties, bounds, corners and zeros beside ampc's, function by function.

Where a function has no derivative (a clamp at its bound, a hard activation at its corner, a
maximum with ties, a norm of zeros) the gradient is a convention, which central differences
cannot check and the gradient sweeps rarely reach in f32 (low precision reaches them often).
Each case here is a parameter p placed exactly on such points and a loss sum(f(p) * y) with
y = 1, 2, 3, ...; it is exported by each exporter, compiled by `ampc compile --optimizer sgd
--lr 1`, and one `ampc train` step gives ampc's gradient as the parameter's change, printed
beside PyTorch's autograd on the same points.

Needs torch, onnx, onnxscript and numpy from PyPI:

  venv/bin/python tools/tie_gradient_probe.py [--ampc build/ampc] [--only clamp,hardswish]
      [--exporters torchscript:17,dynamo:18]
"""
import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np
import onnx
import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torchvision_gradient_sweep import (  # noqa: E402
    add_sweep_arguments, export, initializers, parse_exporters)


def rows(x, n=2):
    return x.view(n, -1)


# name -> (f, the points p takes)
CASES = {
    "hardtanh": (lambda p: F.hardtanh(p, -0.5, 0.5), [-0.5, 0.5, 0.0, -1.0, 1.0]),
    "hardtanh_empty": (lambda p: F.hardtanh(p, 0.5, 0.5), [0.5, 0.0, 1.0]),
    "relu6": (F.relu6, [0.0, 6.0, 3.0, -1.0, 7.0]),
    "clamp": (lambda p: p.clamp(-0.5, 0.5), [-0.5, 0.5, 0.0, -1.0, 1.0]),
    "clamp_min": (lambda p: p.clamp(min=0.25), [0.25, 0.0, 1.0]),
    "clamp_max": (lambda p: p.clamp(max=0.25), [0.25, 0.0, 1.0]),
    "clamp_tensor_min": (lambda p: torch.clamp(p, min=torch.tensor([1.0, 0.0, 0.5])),
                         [1.0, 1.0, 1.0]),
    "hardsigmoid": (F.hardsigmoid, [-3.0, 3.0, 0.0, -4.0, 4.0]),
    "hardswish": (F.hardswish, [-3.0, 3.0, 0.0, -4.0, 4.0]),
    "softshrink": (lambda p: F.softshrink(p, 0.5), [-0.5, 0.5, 0.0, 1.0]),
    "hardshrink": (lambda p: F.hardshrink(p, 0.5), [-0.5, 0.5, 0.0, 1.0]),
    "threshold": (lambda p: F.threshold(p, 0.0, -1.0), [0.0, 1.0, -1.0]),
    "relu": (F.relu, [0.0, 1.0, -1.0]),
    "relu_squared": (lambda p: F.relu(p) ** 2, [0.0, 1.0]),
    "leaky_relu": (lambda p: F.leaky_relu(p, 0.1), [0.0, 1.0, -1.0]),
    "elu": (F.elu, [0.0, 1.0, -1.0]),
    "elu_alpha0": (lambda p: F.elu(p, 0.0), [0.0, -1.0, 1.0]),
    "celu": (lambda p: F.celu(p, 2.0), [0.0, 1.0, -1.0]),
    "selu": (F.selu, [0.0, 1.0, -1.0]),
    "silu": (F.silu, [0.0, 1.0]),
    "mish": (F.mish, [0.0, 1.0]),
    "logsigmoid": (F.logsigmoid, [0.0, 1.0]),
    "abs": (torch.abs, [0.0, 1.0, -1.0]),
    "sign": (lambda p: torch.sign(p) * p, [0.0, 1.0]),
    "sqrt": (torch.sqrt, [0.0, 1.0]),
    "pow_half": (lambda p: p ** 0.5, [0.0, 1.0]),
    "where": (lambda p: torch.where(p > 0, p, torch.zeros_like(p)), [0.0, 1.0]),
    "fmod": (lambda p: torch.fmod(p, 0.5), [0.5, 1.0, 0.25]),
    "remainder": (lambda p: torch.remainder(p, 0.5), [0.5, 1.0, 0.25]),
    "floor": (lambda p: torch.floor(p) + p, [1.0, 0.5]),
    "round": (lambda p: torch.round(p) + p, [0.5, 1.5]),
    "maximum": (lambda p: torch.maximum(p, torch.tensor(0.5)), [0.5, 0.0]),
    "maximum_pairs": (lambda p: torch.max(p[:2], p[1:]), [1.0, 1.0, 1.0]),
    "max": (lambda p: p.max().expand(3), [1.0, 1.0, 0.0]),
    "min": (lambda p: p.min().expand(3), [0.0, 0.0, 1.0]),
    "amax": (lambda p: p.amax().expand(3), [1.0, 1.0, 0.0]),
    "max_dim": (lambda p: rows(p, 1).max(dim=1)[0].expand(3), [1.0, 1.0, 0.0]),
    "min_dim": (lambda p: rows(p, 1).min(dim=1)[0].expand(3), [0.0, 0.0, 1.0]),
    "amin": (lambda p: rows(p, 1).amin(dim=1).expand(3), [0.0, 0.0, 1.0]),
    "max_pool": (lambda p: F.max_pool1d(p.view(1, 1, -1), 2).view(-1), [1.0, 1.0, 0.5, 0.0]),
    "adaptive_max_pool": (lambda p: F.adaptive_max_pool1d(p.view(1, 1, -1), 1).view(-1)
                          .expand(3), [1.0, 1.0, 0.5]),
    "sort": (lambda p: torch.sort(p)[0], [1.0, 1.0, 0.0]),
    "topk": (lambda p: torch.topk(p, 1)[0].expand(3), [1.0, 1.0, 0.0]),
    "logsumexp": (lambda p: torch.logsumexp(p, 0).expand(3), [1.0, 1.0, 1.0]),
    "softmax_masked": (lambda p: torch.softmax(
        p.masked_fill(torch.tensor([False, False, True]), float("-inf")), 0), [1.0, 2.0, 0.5]),
    "prod": (lambda p: p.prod().expand(3), [2.0, 3.0, 0.5]),
    "norm_zeros": (lambda p: torch.linalg.vector_norm(p).expand(3), [0.0, 0.0, 0.0]),
    "norm_rows": (lambda p: torch.linalg.vector_norm(rows(p), dim=1), [0.0, 0.0, 1.0, 2.0]),
    "norm_1": (lambda p: torch.linalg.vector_norm(p, 1).expand(3), [0.0, 0.0, 0.0]),
    "norm_3": (lambda p: torch.linalg.vector_norm(p, 3).expand(3), [0.0, 0.0, 0.0]),
    "norm_inf": (lambda p: torch.linalg.vector_norm(p, float("inf")).expand(3),
                 [1.0, -1.0, 0.5]),
    "dist": (lambda p: torch.dist(p, torch.zeros(3)).expand(3), [0.0, 0.0, 0.0]),
    "normalize": (lambda p: F.normalize(rows(p), dim=1).view(-1), [0.0, 0.0, 1.0, 2.0]),
    "cosine_similarity": (lambda p: F.cosine_similarity(rows(p), torch.ones(2, 2), dim=1),
                          [0.0, 0.0, 1.0, 2.0]),
    "std": (lambda p: p.std().expand(3), [1.0, 1.0, 1.0]),
    "var": (lambda p: p.var().expand(3), [1.0, 1.0, 1.0]),
}


class Probe(nn.Module):
    def __init__(self, f, points):
        super().__init__()
        self.f = f
        self.p = nn.Parameter(torch.tensor(points))

    def forward(self, x, y):
        return (self.f(self.p) * y).sum()


def ampc_gradient(ampc, module, x, y, exporter, work):
    """The parameter's gradient from one ampc SGD step at lr 1, or an error line."""
    path, train = os.path.join(work, "probe.onnx"), os.path.join(work, "train.onnx")
    trained, data = os.path.join(work, "trained.onnx"), os.path.join(work, "data.npz")
    try:
        export(module, (x, y), path, exporter)
    except Exception as e:  # an exporter that cannot export it: reported
        return f"export failed: {str(e).strip().splitlines()[0][:80]}"
    done = subprocess.run([ampc, "compile", path, "-o", train, "--optimizer", "sgd", "--lr", "1"],
                          capture_output=True, text=True)
    if done.returncode != 0:
        return f"compile failed: {done.stderr.strip().splitlines()[-1][:150]}"
    # The exporters drop x, which the loss does not read, or keep it as an input.
    inputs = {i.name for i in onnx.load(train).graph.input}
    np.savez(data, **{k: v.numpy()[None] for k, v in (("x", x), ("y", y)) if k in inputs})
    done = subprocess.run([ampc, "train", train, "--data", data, "--steps", "1", "--export",
                           trained], capture_output=True, text=True)
    if done.returncode != 0:
        return f"train failed: {done.stderr.strip().splitlines()[-1][:150]}"
    before, after = initializers(path), initializers(trained)
    name = next(n for n in before if n == "p" or n.endswith(".p"))
    return before[name] - after[name]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_sweep_arguments(parser, "case")
    args = parser.parse_args()
    names = [n for n in args.only.split(",") if n] or list(CASES)
    for name in names:
        if name not in CASES:
            sys.exit(f"unknown case {name!r} (known: {', '.join(CASES)})")
    exporters = parse_exporters(args.exporters)
    differ = 0
    with tempfile.TemporaryDirectory() as work:
        for name in names:
            f, points = CASES[name]
            module = Probe(f, points)
            x = torch.zeros(1)
            y = torch.arange(1, f(torch.tensor(points)).numel() + 1, dtype=torch.float32)
            module(x, y).backward()
            want = module.p.grad.numpy()
            for exporter in exporters:
                got = ampc_gradient(args.ampc, Probe(f, points), x, y, exporter, work)
                if isinstance(got, str):
                    print(f"{name:18s} {exporter:14s} {got}", flush=True)
                    continue
                same = np.allclose(got, want, rtol=1e-5, atol=1e-6, equal_nan=True)
                differ += not same
                print(f"{name:18s} {exporter:14s} torch {np.round(want, 4).tolist()}  ampc "
                      f"{np.round(got, 4).tolist()}{'' if same else '  <- differs'}", flush=True)
    print(f"{differ} differ")


if __name__ == "__main__":
    main()
