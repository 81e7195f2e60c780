"""ampc.torch.export_training: a small model with BatchNorm exported with its loss by each of
PyTorch's exporters, compiled by ampc and trained 10 steps, against PyTorch training the same
model on the same batches (SGD, momentum 0.9): losses within 1e-4 relative. Skipped where torch
(or onnx) is not importable, as in CI, which uses Debian's Python."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("onnx")

import ampc  # noqa: E402
import ampc.torch  # noqa: E402


class Net(torch.nn.Module):
    def __init__(self, batch_norm=True):
        super().__init__()
        self.fc1 = torch.nn.Linear(12, 16)
        self.bn = torch.nn.BatchNorm1d(16) if batch_norm else torch.nn.Identity()
        self.fc2 = torch.nn.Linear(16, 3)

    def forward(self, x):
        return self.fc2(torch.relu(self.bn(self.fc1(x))))


# The dynamo exporter writes BatchNorm in inference mode, which the bridge refuses (below), so
# it is tried on the model without BatchNorm.
@pytest.mark.parametrize("exporter,batch_norm",
                         [("dynamo", False), ("torchscript", True), ("auto", True)])
def test_exported_model_trains_on_pytorchs_trajectory(tmp_path, exporter, batch_norm):
    torch.manual_seed(0)
    model = Net(batch_norm)
    generator = torch.Generator().manual_seed(1)
    batches = [(torch.randn(8, 12, generator=generator),
                torch.randint(0, 3, (8,), generator=generator)) for _ in range(4)]
    before = {k: v.clone() for k, v in model.state_dict().items()}
    used = ampc.torch.export_training(model, batches[0], torch.nn.functional.cross_entropy,
                                      str(tmp_path / "net.onnx"), exporter=exporter)
    assert used == (exporter if exporter != "auto" else "torchscript")
    for k, v in model.state_dict().items():  # the model passed in is unchanged
        assert torch.equal(v, before[k]), k
    ampc.compile(str(tmp_path / "net.onnx"), str(tmp_path / "net.train.onnx"), optimizer="sgd",
                 momentum=0.9, lr=0.1)
    session = ampc.TrainingSession(str(tmp_path / "net.train.onnx"))

    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    model.train()
    for step in range(10):
        x, label = batches[step % 4]
        optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), label)
        loss.backward()
        optimizer.step()
        got = session.step({"x": x.numpy(), "label": label.numpy()})["loss"]
        assert abs(got - loss.item()) <= 1e-4 * abs(loss.item()), (step, got, loss.item())
    for name in ("fc1.weight", "fc2.bias") + (("bn.running_mean",) if batch_norm else ()):
        want = model.state_dict()[name].numpy()
        assert np.allclose(session.state(name), want, rtol=1e-4, atol=1e-5), name


def test_an_inference_mode_batch_norm_is_refused(tmp_path):
    with pytest.raises(RuntimeError, match="BatchNormalization .* inference mode"):
        ampc.torch.export_training(Net(), (torch.zeros(4, 12), torch.zeros(4, dtype=torch.long)),
                                   torch.nn.functional.cross_entropy, str(tmp_path / "m.onnx"),
                                   exporter="dynamo")
    assert not (tmp_path / "m.onnx").exists()


def test_bad_arguments_are_refused(tmp_path):
    with pytest.raises(ValueError, match="targets=3"):
        ampc.torch.export_training(Net(), (torch.zeros(2, 12),), torch.nn.functional.mse_loss,
                                   str(tmp_path / "m.onnx"), targets=3)
    with pytest.raises(ValueError, match="exporter='tf'"):
        ampc.torch.export_training(Net(), (torch.zeros(2, 12), torch.zeros(2, 3)),
                                   torch.nn.functional.mse_loss, str(tmp_path / "m.onnx"),
                                   exporter="tf")
