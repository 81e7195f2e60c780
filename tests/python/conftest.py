"""What the Python tests share: the paths of the example model and the `compiled` fixture (the
MLP compiled for SGD with momentum, once per test module)."""
import os

import pytest

import ampc

SOURCE = os.environ.get("AMPC_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
MLP = os.path.join(SOURCE, "models", "mlp.onnx")


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("models") / "mlp.train.onnx")
    ampc.compile(MLP, path, optimizer="sgd", momentum=0.9, lr=0.05)
    return path
