"""Exports a DenseNet block of L layers with its loss as ONNX, for the planner's worst case.

Layer i applies a 1x1 convolution (2 output channels) and ReLU to the concatenation of every
earlier feature map; the loss is the cross-entropy of a linear classifier over the mean of all
of them. Its training step splits each Concat's gradient into i parts and sums every feature's
parts as the layers above produce them: about L^2 / 2 small buffers live at once
(docs/benchmarks.md, "Planning a DenseNet block").

  venv/bin/python tools/dense_block_model.py 400 /tmp/dense400.onnx
  build/ampc compile /tmp/dense400.onnx -o /tmp/t.onnx --precision fp16 --optimizer adamw
"""
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F


class DenseBlock(nn.Module):
    def __init__(self, layers):
        super().__init__()
        self.stem = nn.Conv2d(3, 2, 3, padding=1)
        self.convs = nn.ModuleList(nn.Conv2d(2 + 2 * i, 2, 1, bias=False) for i in range(layers))
        self.fc = nn.Linear(2 + 2 * layers, 10)

    def forward(self, x, y):
        features = [self.stem(x)]
        for conv in self.convs:
            features.append(F.relu(conv(torch.cat(features, 1))))
        return F.cross_entropy(self.fc(torch.cat(features, 1).mean((2, 3))), y)


def main():
    layers, path = int(sys.argv[1]), sys.argv[2]
    torch.manual_seed(0)
    x, y = torch.randn(2, 3, 4, 4), torch.randint(0, 10, (2,))
    torch.onnx.export(DenseBlock(layers), (x, y), path, input_names=["x", "y"],
                      output_names=["loss"], opset_version=17, dynamo=False,
                      do_constant_folding=False)
    print(path)


if __name__ == "__main__":
    main()
