#!/usr/bin/env python3
"""Writes the models the masked-selection tests read (`x[mask]`, whose row count depends on the
data), and PyTorch's figures for them:

  * depth.<exporter>.onnx: a per-pixel depth head (a linear layer over 4 features per pixel,
    softplus) trained with a scale-invariant log loss on the pixels whose target is positive,
    as depth estimators mask missing depth (a mask of rank 2 over [batch, pixels]);
  * mlm.<exporter>.onnx: token embeddings, a linear layer and GELU, then a classification head
    on the tokens whose label is not -1 only, and cross-entropy on them (a masked-LM head: a
    mask of rank 2 selecting rows of [batch, tokens, features]);
  * rows.<exporter>.onnx: a linear regression scored only on the examples whose weight is
    positive (a mask of rank 1, which the dynamo exporter writes as an index chain);
  * masked_refs.npz: per model and exporter, two batches (`<model>.<exporter>.<a|b>.<input>`)
    that select other counts of rows than the export's batch, and `<model>.<exporter>.loss`,
    the losses of 4 steps of torch.optim.SGD (lr 0.1) in f32 from the exported weights on
    batches a, b, a, b.

The exporters: TorchScript (opset 17) and dynamo (opset 18); the dynamo exporter cannot export
`F.cross_entropy` on selected rows (torch 2.15), so the mlm model is exported by TorchScript
only.

Needs torch, onnx and onnxscript from PyPI:

  venv/bin/python tests/data/masked/make_models.py
"""
import copy
import os
import warnings

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
B, P, FEATURES, T, D, VOCAB, CLASSES = 2, 12, 4, 6, 8, 20, 5


class Depth(nn.Module):
    def __init__(self):
        super().__init__()
        self.head = nn.Linear(FEATURES, 1)

    def forward(self, x, depth):
        predicted = F.softplus(self.head(x)).squeeze(-1)  # [B, P]
        valid = depth > 0
        d = torch.log(predicted[valid]) - torch.log(depth[valid])
        return (d ** 2).mean() - 0.5 * d.mean() ** 2


class Mlm(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, D)
        self.hidden = nn.Linear(D, D)
        self.head = nn.Linear(D, CLASSES)

    def forward(self, tokens, labels):
        h = F.gelu(self.hidden(self.embed(tokens)))  # [B, T, D]
        masked = labels >= 0
        return F.cross_entropy(self.head(h[masked]), labels[masked])


class Rows(nn.Module):
    def __init__(self):
        super().__init__()
        self.fit = nn.Linear(FEATURES, 1)

    def forward(self, x, target):  # target: [B * 3, 2] = (value, weight)
        keep = target[:, 1] > 0
        return ((self.fit(x).squeeze(-1)[keep] - target[:, 0][keep]) ** 2).mean()


def depth_batch(g, holes):
    depth = torch.rand(B, P, generator=g) + 0.5
    depth.view(-1)[holes] = 0
    return [torch.randn(B, P, FEATURES, generator=g), depth]


def mlm_batch(g, masked):
    labels = torch.full((B, T), -1)
    labels.view(-1)[masked] = torch.randint(0, CLASSES, (len(masked),), generator=g)
    return [torch.randint(0, VOCAB, (B, T), generator=g), labels]


def rows_batch(g, dropped):
    target = torch.stack([torch.randn(B * 3, generator=g), torch.ones(B * 3)], 1)
    target[dropped, 1] = 0
    return [torch.randn(B * 3, FEATURES, generator=g), target]


# Per model: the module, its input names, and the export batch and batches a and b (each
# selecting another number of rows).
MODELS = {
    "depth": (Depth, ["x", "depth"], depth_batch, ([1, 5], [0, 3, 7, 8, 20], [11])),
    "mlm": (Mlm, ["tokens", "labels"], mlm_batch, ([0, 4, 9], [1, 2, 3, 7, 11], [5])),
    "rows": (Rows, ["x", "target"], rows_batch, ([2], [0, 1, 4], [])),
}


def torch_losses(model, batches, steps=4):
    model = copy.deepcopy(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    losses = []
    for step in range(steps):
        optimizer.zero_grad()
        loss = model(*batches[step % len(batches)])
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


def main():
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    refs = {}
    for name, (module, names, make_batch, (export_rows, rows_a, rows_b)) in MODELS.items():
        model = module().train()
        example = make_batch(g, export_rows)
        batches = [make_batch(g, rows_a), make_batch(g, rows_b)]
        for exporter in ("torchscript", "dynamo"):
            if name == "mlm" and exporter == "dynamo":
                continue
            path = os.path.join(HERE, f"{name}.{exporter}.onnx")
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                kwargs = dict(input_names=names, output_names=["loss"],
                              training=torch.onnx.TrainingMode.TRAINING)
                if exporter == "dynamo":
                    torch.onnx.export(model, tuple(example), path, dynamo=True,
                                      opset_version=18, external_data=False, **kwargs)
                else:
                    torch.onnx.export(model, tuple(example), path, dynamo=False,
                                      opset_version=17, do_constant_folding=False, **kwargs)
            key = f"{name}.{exporter}"
            for tag, tensors in zip("ab", batches):
                for input_name, tensor in zip(names, tensors):
                    refs[f"{key}.{tag}.{input_name}"] = tensor.numpy()
            refs[f"{key}.loss"] = np.array(torch_losses(model, batches), dtype=np.float32)
    np.savez(os.path.join(HERE, "masked_refs.npz"), **refs)


if __name__ == "__main__":
    main()
