"""ampc.torch.export_training: a small model with BatchNorm, and one with a frozen layer, a
buffer and a scalar parameter, exported with its loss by each of PyTorch's exporters, compiled by
ampc and trained 10 steps, against PyTorch training the same model on the same batches (SGD,
momentum 0.9): losses within 1e-4 relative. And torch tensors in
and out of sessions through DLPack. Skipped where torch (or onnx) is not importable, as in CI,
which uses Debian's Python."""
import os
import warnings

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


def train_beside_pytorch(model, session, batches, steps=10):
    """`steps` steps of SGD (lr 0.1, momentum 0.9) on the batches in turn, by PyTorch on `model`
    and by the session compiled from its export: the losses within 1e-4 relative."""
    optimizer = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.1,
                                momentum=0.9)
    for step in range(steps):
        x, label = batches[step % len(batches)]
        optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), label)
        loss.backward()
        optimizer.step()
        got = session.step({"x": x.numpy(), "label": label.numpy()})["loss"]
        assert abs(got - loss.item()) <= 1e-4 * abs(loss.item()), (step, got, loss.item())


# PyTorch 2.15's dynamo exporter writes BatchNorm with training_mode=0 and records the training
# call in the node's metadata, which ampc reads: the bridge takes it (it asks ampc how it imports
# the file), and "auto" uses dynamo.
@pytest.mark.parametrize("exporter,batch_norm", [("dynamo", False), ("dynamo", True),
                                                 ("torchscript", True), ("auto", True)])
def test_exported_model_trains_on_pytorchs_trajectory(tmp_path, exporter, batch_norm):
    torch.manual_seed(0)
    model = Net(batch_norm)
    generator = torch.Generator().manual_seed(1)
    batches = [(torch.randn(8, 12, generator=generator),
                torch.randint(0, 3, (8,), generator=generator)) for _ in range(4)]
    before = {k: v.clone() for k, v in model.state_dict().items()}
    used = ampc.torch.export_training(model, batches[0], torch.nn.functional.cross_entropy,
                                      str(tmp_path / "net.onnx"), exporter=exporter)
    assert used == (exporter if exporter != "auto" else "dynamo")
    for k, v in model.state_dict().items():  # the model passed in is unchanged
        assert torch.equal(v, before[k]), k
    ampc.compile(str(tmp_path / "net.onnx"), str(tmp_path / "net.train.onnx"), optimizer="sgd",
                 momentum=0.9, lr=0.1)
    session = ampc.TrainingSession(str(tmp_path / "net.train.onnx"))

    model.train()
    train_beside_pytorch(model, session, batches)
    for name in ("fc1.weight", "fc2.bias") + (("bn.running_mean",) if batch_norm else ()):
        want = model.state_dict()[name].numpy()
        assert np.allclose(session.state(name), want, rtol=1e-4, atol=1e-5), name


class Parts(torch.nn.Module):
    """What no exporter records as PyTorch trains it: a frozen layer (requires_grad=False), a
    float buffer, and a scalar parameter (CLIP's logit scale), which is also how exporters write
    the constants they lift."""

    def __init__(self):
        super().__init__()
        self.backbone = torch.nn.Linear(12, 16)
        self.backbone.requires_grad_(False)
        self.register_buffer("shift", torch.linspace(-1, 1, 16))
        self.head = torch.nn.Linear(16, 3)
        self.temperature = torch.nn.Parameter(torch.tensor(0.5))

    def forward(self, x):
        return self.head(torch.tanh(self.backbone(x) + self.shift)) / self.temperature


# Without the declarations the bridge writes, a TorchScript file would train backbone.* and
# shift and not temperature, and a dynamo one would train backbone.*.
@pytest.mark.parametrize("exporter", ["dynamo", "torchscript"])
def test_frozen_parameters_and_buffers_stay_and_a_scalar_parameter_trains(tmp_path, exporter):
    torch.manual_seed(0)
    model = Parts()
    generator = torch.Generator().manual_seed(1)
    batches = [(torch.randn(8, 12, generator=generator),
                torch.randint(0, 3, (8,), generator=generator)) for _ in range(4)]
    before = {k: v.clone().numpy() for k, v in model.state_dict().items()}
    ampc.torch.export_training(model, batches[0], torch.nn.functional.cross_entropy,
                               str(tmp_path / "parts.onnx"), exporter=exporter)
    ampc.compile(str(tmp_path / "parts.onnx"), str(tmp_path / "parts.train.onnx"),
                 optimizer="sgd", momentum=0.9, lr=0.1)
    session = ampc.TrainingSession(str(tmp_path / "parts.train.onnx"))

    train_beside_pytorch(model, session, batches)
    for name in ("backbone.weight", "backbone.bias", "shift"):
        assert np.array_equal(session.state(name), before[name]), name
    assert session.state("temperature") != before["temperature"]
    assert np.allclose(session.state("temperature"), model.temperature.detach().numpy(),
                       rtol=1e-4)


def test_an_inference_mode_batch_norm_is_refused(tmp_path):
    # What the bridge checks after each export: a file whose BatchNorm normalizes by the running
    # statistics (exported in eval mode) for a model that trains its BatchNorm on the batch.
    path = str(tmp_path / "m.onnx")
    model = Net().eval()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the TorchScript exporter's deprecation
        torch.onnx.export(model, (torch.zeros(4, 12),), path, dynamo=False,
                          training=torch.onnx.TrainingMode.EVAL, do_constant_folding=False)
    with pytest.raises(RuntimeError, match="BatchNormalization .* inference mode"):
        ampc.torch._check_export(path, model.train())


def test_an_export_the_check_refuses_leaves_no_file(tmp_path, monkeypatch):
    def refuse(path, model):
        raise RuntimeError("the exporter wrote BatchNormalization 'bn' in inference mode")

    monkeypatch.setattr(ampc.torch, "_check_export", refuse)
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
    # Checked before any export: cross_entropy needs its target, the model an input, and
    # targets is a count.
    xy = (torch.zeros(2, 12), torch.zeros(2, dtype=torch.long))
    for targets, message in [
            (0, r"targets=0: loss_fn\(input.*\) cannot be called with the model's output and 0 "
                r"target tensor\(s\)"),
            (2, r"targets=2, but example_inputs holds 2 tensors: the model takes the first, the "
                r"loss the last `targets` \(0 to 1\)"),
            (1.0, r"targets=1.0: expected the number \(an int\)"),
            (True, r"targets=True: expected the number \(an int\)")]:
        with pytest.raises(ValueError, match=message):
            ampc.torch.export_training(Net(False), xy, torch.nn.functional.cross_entropy,
                                       tmp_path / "m.onnx", targets=targets)
    with pytest.raises(ValueError, match="export_training: path '.*' holds a NUL character"):
        ampc.torch.export_training(Net(False), xy, torch.nn.functional.cross_entropy,
                                   str(tmp_path / "m.onnx") + "\0x")
    assert not (tmp_path / "m.onnx").exists()


SOURCE = os.environ.get("AMPC_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))


def test_torch_tensors_are_lent_through_dlpack(tmp_path):
    """CPU torch tensors go in through DLPack: read in place (a step copies only the learning
    rate to the device), the losses numpy arrays give, bit for bit; bf16 keeps its bits, in and
    out. An output array becomes a torch tensor over the same memory (torch.from_dlpack)."""
    mlp = os.path.join(SOURCE, "models", "mlp.onnx")
    data = np.load(os.path.join(SOURCE, "models", "mlp.train.npz"))
    path = str(tmp_path / "mlp.train.onnx")
    ampc.compile(mlp, path, optimizer="sgd", momentum=0.9, lr=0.05)
    arrays, tensors = ampc.TrainingSession(path), ampc.TrainingSession(path)
    for i in range(4):
        batch = {name: data[name][i] for name in data.files}
        want = arrays.step(batch)
        before = tensors.transfers()["bytes_to_device"]
        got = tensors.step({name: torch.from_numpy(array.copy()) for name, array in batch.items()})
        assert tensors.transfers()["bytes_to_device"] - before == 4
        assert (got["loss"], got["grad_norm"]) == (want["loss"], want["grad_norm"])
    with pytest.raises(BufferError, match="detach"):  # torch's own refusal, unchanged
        tensors.step({"x": torch.zeros(8, 64, requires_grad=True),
                      "label": torch.zeros(8, dtype=torch.int64)})

    outputs = tensors.evaluate({name: data[name][0] for name, _, _ in tensors.eval_inputs})
    array = next(iter(outputs.values()))
    tensor = torch.from_dlpack(array)
    assert tensor.data_ptr() == array.ctypes.data
    assert np.array_equal(tensor.numpy(), array)

    low = str(tmp_path / "mlp.bf16.onnx")
    ampc.compile(mlp, low, precision="bf16", opt_level="O3", optimizer="sgd", lr=0.05)
    session = ampc.TrainingSession(low)
    name = next(n for n in session.state_names if session.state(n).dtype.itemsize == 2)
    shape = session.state(name).shape
    values = (torch.arange(np.prod(shape), dtype=torch.float32) / 64).to(torch.bfloat16)
    session.set_state(name, values.reshape(shape))
    assert session.state(name).tobytes() == values.view(torch.int16).numpy().tobytes()
    # And out: a bf16 state is a torch.bfloat16 tensor over the array's memory.
    state = session.state(name)
    tensor = torch.from_dlpack(state)
    assert tensor.dtype == torch.bfloat16
    assert tensor.data_ptr() == state.ctypes.data
    assert torch.equal(tensor, values.reshape(shape))
    assert torch.equal(torch.from_dlpack(state[:, 1::3]), values.reshape(shape)[:, 1::3])
