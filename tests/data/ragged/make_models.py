#!/usr/bin/env python3
"""Writes the models the ragged-bag tests read, and PyTorch's figures for them:

  * bags.dynamo.onnx (opset 18) and bags.torchscript.onnx (opset 17): a click model on three
    sparse features with bags of varying length, as DLRM-style models feed them (1-D ids and
    `offsets`): an nn.EmbeddingBag summing with per-sample weights, one averaging and one
    taking the max, their outputs concatenated, a linear layer, binary cross-entropy with
    logits. Both exporters write each bag as an ONNX Loop over the bags whose slices' bounds
    are the offsets (data).
  * bags_refs.npz: two batches per exporter (`<exporter>.<a|b>.<input>`: same shapes, other
    ids and bag lengths), and `<exporter>.loss`, the losses of 4 steps of torch.optim.SGD
    (lr 0.1) in f32 from the exported weights on batches a, b, a, b. The dynamo batches hold
    empty bags in every feature (PyTorch gives 0, and the dynamo export selects zeros for
    them); the TorchScript batches only in the summed one (its export reduces an empty bag as
    ONNX does: a mean of nothing is NaN, a max the lowest float).

Needs torch, onnx and onnxscript from PyPI:

  venv/bin/python tests/data/ragged/make_models.py
"""
import copy
import os
import warnings

import numpy as np
import torch
from torch import nn

HERE = os.path.dirname(os.path.abspath(__file__))
VOCAB, DIM, BAGS, IDS = 40, 8, 6, 20


class Bags(nn.Module):
    def __init__(self):
        super().__init__()
        self.summed = nn.EmbeddingBag(VOCAB, DIM, mode="sum")
        self.averaged = nn.EmbeddingBag(VOCAB, DIM, mode="mean")
        self.largest = nn.EmbeddingBag(VOCAB, DIM, mode="max")
        self.head = nn.Linear(3 * DIM, 1)

    def forward(self, ids_a, offsets_a, weights_a, ids_b, offsets_b, ids_c, offsets_c, labels):
        features = torch.cat([self.summed(ids_a, offsets_a, per_sample_weights=weights_a),
                              self.averaged(ids_b, offsets_b), self.largest(ids_c, offsets_c)],
                             dim=1)
        logits = self.head(features).squeeze(1)
        return nn.functional.binary_cross_entropy_with_logits(logits, labels)


NAMES = ["ids_a", "offsets_a", "weights_a", "ids_b", "offsets_b", "ids_c", "offsets_c",
         "labels"]


def offsets(lengths):
    return torch.tensor([0] + list(np.cumsum(lengths)[:-1]), dtype=torch.int64)


def batch(g, lengths):
    """`lengths`: per feature, the BAGS bag lengths (each feature's add up to IDS)."""
    tensors = {}
    for feature, sizes in zip("abc", lengths):
        assert sum(sizes) == IDS and len(sizes) == BAGS
        tensors[f"ids_{feature}"] = torch.randint(0, VOCAB, (IDS,), generator=g)
        tensors[f"offsets_{feature}"] = offsets(sizes)
    tensors["weights_a"] = torch.rand(IDS, generator=g)
    tensors["labels"] = torch.randint(0, 2, (BAGS,), generator=g).float()
    return [tensors[name] for name in NAMES]


# Bag lengths per feature (summed, averaged, largest); each adds up to IDS.
LENGTHS = {
    "dynamo": ([[3, 0, 5, 4, 8, 0], [1, 7, 0, 2, 6, 4], [0, 6, 6, 2, 1, 5]],
               [[6, 2, 0, 0, 9, 3], [4, 0, 4, 4, 4, 4], [2, 2, 8, 0, 7, 1]]),
    "torchscript": ([[3, 0, 5, 4, 8, 0], [1, 7, 1, 2, 5, 4], [1, 6, 5, 2, 1, 5]],
                    [[6, 2, 0, 0, 9, 3], [4, 1, 3, 4, 4, 4], [2, 2, 8, 1, 6, 1]]),
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
    model = Bags().train()
    g = torch.Generator().manual_seed(1)
    refs = {}
    for exporter, (lengths_a, lengths_b) in LENGTHS.items():
        batches = [batch(g, lengths_a), batch(g, lengths_b)]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            kwargs = dict(input_names=NAMES, output_names=["loss"],
                          training=torch.onnx.TrainingMode.TRAINING)
            path = os.path.join(HERE, f"bags.{exporter}.onnx")
            if exporter == "dynamo":
                torch.onnx.export(model, tuple(batches[0]), path, dynamo=True, opset_version=18,
                                  external_data=False, **kwargs)
            else:
                torch.onnx.export(model, tuple(batches[0]), path, dynamo=False, opset_version=17,
                                  do_constant_folding=False, **kwargs)
        for tag, tensors in zip("ab", batches):
            for name, tensor in zip(NAMES, tensors):
                refs[f"{exporter}.{tag}.{name}"] = tensor.numpy()
        refs[f"{exporter}.loss"] = np.array(torch_losses(model, batches), dtype=np.float32)
    np.savez(os.path.join(HERE, "bags_refs.npz"), **refs)


if __name__ == "__main__":
    main()
