#!/usr/bin/env python3
"""Writes mlp_batch.onnx: models/mlp.onnx with dim 0 of every graph input the symbolic `batch`,
as PyTorch's exporters write `dynamic_axes` (tests/python/test_python_api.py loads it; the
Python module's tests cannot import onnx, which Debian does not package).

  venv/bin/python tests/data/dynamic/make_models.py
"""
import os

import onnx

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    model = onnx.load(os.path.join(HERE, "..", "..", "..", "models", "mlp.onnx"))
    for graph_input in model.graph.input:
        graph_input.type.tensor_type.shape.dim[0].dim_param = "batch"
    onnx.checker.check_model(model)
    onnx.save(model, os.path.join(HERE, "mlp_batch.onnx"))


if __name__ == "__main__":
    main()
