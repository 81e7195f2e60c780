#!/usr/bin/env python3
"""Writes the models the dynamic-dim tests read, and PyTorch's figures for them:

  * mlp_batch.onnx: models/mlp.onnx with dim 0 of every graph input the symbolic `batch`, as
    PyTorch's exporters write `dynamic_axes` (the run, bench and Python module tests load it;
    the test suite cannot import onnx, which Debian does not package).
  * gpt2.dynamo.onnx and gpt2.torchscript.onnx: the zoo's GPT-2 (models/zoo_models.py)
    exported at batch 2 x 8 tokens with the batch and sequence dims dynamic (dynamo:
    `dynamic_shapes` with Dims `batch` and `seq`, `optimize=False` as training exports need;
    TorchScript:
    `dynamic_axes` named the same, opset 17), so their graphs compute shapes from those dims.
  * gpt2_refs.npz: for batches of other shapes than the export's (`b3t12`: 3 x 12, `b5t4`:
    5 x 4), `<batch>.idx`, `<batch>.targets` and `<batch>.loss`, the losses of 3 steps of
    torch.optim.SGD (lr 0.1) in f32 from the exported weights.

Needs torch, onnx and onnxscript from PyPI:

  venv/bin/python tests/data/dynamic/make_models.py
"""
import os
import sys
import warnings

import numpy as np
import onnx
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..", "..", "..")
sys.path.insert(0, os.path.join(ROOT, "models"))
sys.path.insert(0, os.path.join(ROOT, "tools"))
from hf_training_sweep import torch_losses  # noqa: E402  (3 steps of SGD at lr 0.1)
from zoo_models import Gpt2  # noqa: E402

BATCHES = {"b3t12": (3, 12), "b5t4": (5, 4)}


def write_mlp_batch():
    model = onnx.load(os.path.join(ROOT, "models", "mlp.onnx"))
    for graph_input in model.graph.input:
        graph_input.type.tensor_type.shape.dim[0].dim_param = "batch"
    onnx.checker.check_model(model)
    onnx.save(model, os.path.join(HERE, "mlp_batch.onnx"))


class LossOnly(torch.nn.Module):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, idx, targets):
        return self.model(idx, targets)[0]


def write_gpt2():
    torch.manual_seed(0)
    model = LossOnly(Gpt2()).train()
    g = torch.Generator().manual_seed(1)
    idx, targets = (torch.randint(0, 64, (2, 8), generator=g) for _ in range(2))
    common = dict(input_names=["idx", "targets"], output_names=["loss"],
                  training=torch.onnx.TrainingMode.TRAINING)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        batch, seq = torch.export.Dim("batch", max=64), torch.export.Dim("seq", max=16)
        torch.onnx.export(model, (idx, targets), os.path.join(HERE, "gpt2.dynamo.onnx"),
                          dynamo=True, dynamic_shapes=({0: batch, 1: seq}, {0: batch, 1: seq}),
                          optimize=False, external_data=False, **common)
        axes = {0: "batch", 1: "seq"}
        torch.onnx.export(model, (idx, targets), os.path.join(HERE, "gpt2.torchscript.onnx"),
                          dynamo=False, opset_version=17, do_constant_folding=False,
                          dynamic_axes={"idx": axes, "targets": axes}, **common)
    refs = {}
    for name, shape in BATCHES.items():
        idx, targets = (torch.randint(0, 64, shape, generator=g) for _ in range(2))
        losses = torch_losses(model, idx, targets)  # on a copy: the model stays as exported
        refs[f"{name}.idx"], refs[f"{name}.targets"] = idx.numpy(), targets.numpy()
        refs[f"{name}.loss"] = np.array(losses, dtype=np.float32)
    np.savez(os.path.join(HERE, "gpt2_refs.npz"), **refs)


if __name__ == "__main__":
    write_mlp_batch()
    write_gpt2()
