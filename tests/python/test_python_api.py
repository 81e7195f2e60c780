"""The Python module (python/ampc) against the command line it wraps: the same losses bit for bit,
the same inspect document, errors as exceptions with the CLI's and the runtime's messages,
f16 and bf16 round trips (bf16 out through DLPack), inputs read in place (numpy arrays and DLPack
tensors), and sessions that step in parallel threads (the GIL is released).

Run by CTest (`python_api`) with PYTHONPATH=build/python and AMPC_BINARY, AMPC_SOURCE_DIR set.
"""
import json
import os
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

import ampc

SOURCE = os.environ.get("AMPC_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
MLP = os.path.join(SOURCE, "models", "mlp.onnx")
MLP_DATA = os.path.join(SOURCE, "models", "mlp.train.npz")


def batches():
    data = np.load(MLP_DATA)
    return [{name: data[name][i] for name in data.files} for i in range(data["x"].shape[0])]


def test_fifty_steps_give_the_clis_losses_bit_for_bit(compiled, tmp_path):
    log = tmp_path / "log.jsonl"
    subprocess.run([ampc.cli_path(), "train", compiled, "--data", MLP_DATA, "--steps", "50",
                    "--log", str(log)], check=True, capture_output=True)
    cli = [json.loads(line)["loss"] for line in log.read_text().splitlines()
           if '"loss"' in line]
    assert len(cli) == 50
    session = ampc.TrainingSession(compiled)
    assert session.default_lr == pytest.approx(0.05)
    data = batches()
    losses = []
    for i in range(50):
        stats = session.step(data[i % len(data)])
        assert stats["step"] == i + 1 and not stats["skipped"]
        losses.append(stats["loss"])
    # Bit for bit: the loss is an f32, which the CLI logs as its shortest round-tripping decimal.
    assert [np.float32(x) for x in losses] == [np.float32(x) for x in cli]
    assert session.steps_done == 50


def test_an_accumulating_model_steps_on_a_list_of_micro_batches(tmp_path):
    # A list of K = 2 batches is one step (K runs, one update); a single dict, or a list of another
    # length, is refused before anything runs.
    accumulating = str(tmp_path / "accumulating.onnx")
    ampc.compile(MLP, accumulating, optimizer="sgd", lr=0.05, accumulate=2)
    session = ampc.TrainingSession(accumulating)
    data = batches()
    stats = session.step([data[0], data[1]])
    assert stats["step"] == 1
    # The logged loss is the mean of the micro-batches' losses.
    evaluation = ampc.TrainingSession(accumulating)
    first, second = (evaluation.evaluate(data[i])["loss"] for i in (0, 1))
    assert stats["loss"] == pytest.approx((float(first) + float(second)) / 2, rel=1e-6)
    with pytest.raises(ValueError, match="give step\\(\\) a list of 2 dicts"):
        session.step(data[0])
    with pytest.raises(ValueError, match="takes 2 micro-batch"):
        session.step([data[0]])
    with pytest.raises(TypeError, match="micro-batch 1 is not a dict"):
        session.step([data[0], 3])
    assert session.steps_done == 1


def test_outputs_are_numpy_views_that_outlive_the_session(compiled):
    session = ampc.TrainingSession(compiled)
    batch = batches()[0]
    outputs = session.evaluate({name: batch[name] for name, _, _ in session.eval_inputs})
    del session
    for name, array in outputs.items():
        assert isinstance(array, np.ndarray)
        assert array.base is not None  # a view of the tensor the runtime returned
        assert np.all(np.isfinite(array)), name


class DlpackOnly:
    """Offers an array only through the DLPack protocol, as a torch tensor does."""

    def __init__(self, array):
        self.array = array

    def __dlpack__(self, stream=None):
        return self.array.__dlpack__()

    def __dlpack_device__(self):
        return self.array.__dlpack_device__()


def test_a_numpy_batch_is_read_in_place(compiled):
    """On the CPU the kernels read a C-contiguous batch where it lies: each step copies only the
    learning rate (one f32) to the device, the batch not at all."""
    session = ampc.TrainingSession(compiled)
    data = batches()
    for i in range(3):
        before = session.transfers()
        session.step(data[i])
        after = session.transfers()
        assert after["copies_to_device"] - before["copies_to_device"] == 1
        assert after["bytes_to_device"] - before["bytes_to_device"] == 4
    # The same through DLPack.
    before = session.transfers()
    session.step({name: DlpackOnly(array) for name, array in data[3].items()})
    assert session.transfers()["bytes_to_device"] - before["bytes_to_device"] == 4


@pytest.mark.parametrize("layout", ["fortran", "dlpack", "dlpack-fortran"])
def test_every_input_layout_trains_as_a_contiguous_array(compiled, layout):
    """A Fortran-order array (numpy copies it), a tensor lent through __dlpack__ (read in place)
    and a strided one (gathered into a copy): the same losses, bit for bit, as C-order arrays."""
    reference = ampc.TrainingSession(compiled)
    session = ampc.TrainingSession(compiled)

    def lent(array):
        if layout == "fortran":
            return np.asfortranarray(array)
        if layout == "dlpack":
            return DlpackOnly(array)
        return DlpackOnly(np.asfortranarray(array))

    for batch in batches()[:4]:
        if layout.endswith("fortran"):
            assert not np.asfortranarray(batch["x"]).flags["C_CONTIGUOUS"]
        want = reference.step(batch)
        got = session.step({name: lent(array) for name, array in batch.items()})
        assert (got["loss"], got["grad_norm"]) == (want["loss"], want["grad_norm"])


def test_bad_dlpack_inputs_name_the_input(compiled):
    session = ampc.TrainingSession(compiled)
    batch = batches()[0]
    with pytest.raises(ValueError, match="input 'x': expected dtype f32, got f64"):
        session.step({**batch, "x": DlpackOnly(batch["x"].astype(np.float64))})
    with pytest.raises(ValueError, match=r"input 'x': expected shape \[8,64\], got \[2,64\]"):
        session.step({**batch, "x": DlpackOnly(batch["x"][:2])})
    assert session.steps_done == 0


def test_state_round_trip_and_checkpoints(compiled, tmp_path):
    session = ampc.TrainingSession(compiled)
    data = batches()
    session.step(data[0])
    name = session.state_names[0]
    before = session.state(name)
    session.set_state(name, np.zeros_like(before))
    assert not session.state(name).any()
    session.set_state(name, before)
    assert np.array_equal(session.state(name), before)
    session.save_checkpoint(str(tmp_path / "ckpt.safetensors"))
    first = [session.step(data[i])["loss"] for i in range(1, 4)]
    resumed = ampc.TrainingSession(compiled)
    resumed.load_checkpoint(str(tmp_path / "ckpt.safetensors"))
    assert [resumed.step(data[i])["loss"] for i in range(1, 4)] == first


def test_weights_move_a_model_between_sessions(compiled):
    """weights() holds what the eval graph reads (parameters, running statistics) and no
    optimizer moment; set_weights of an untrained session's weights makes a trained session
    evaluate exactly as the untrained one does. A bad array changes nothing."""
    fresh, trained = ampc.TrainingSession(compiled), ampc.TrainingSession(compiled)
    data = batches()
    for i in range(3):
        trained.step(data[i])
    weights = fresh.weights()
    assert weights and set(weights) < set(fresh.state_names)
    assert not any("momentum" in name for name in weights), list(weights)
    batch = {name: data[0][name] for name, _, _ in fresh.eval_inputs}
    before = trained.evaluate(batch)
    assert any(not np.array_equal(before[k], v) for k, v in fresh.evaluate(batch).items())

    first, second = sorted(weights)[:2]
    with pytest.raises(ValueError, match=f"weight '{second}': expected shape"):
        trained.set_weights({first: weights[first], second: np.zeros((1, 2, 3), np.float32)})
    with pytest.raises(ValueError, match="'nope' is not a weight"):
        trained.set_weights({"nope": weights[first]})
    assert all(np.array_equal(trained.evaluate(batch)[k], v) for k, v in before.items())

    trained.set_weights(weights)
    for name, value in fresh.evaluate(batch).items():
        assert np.array_equal(trained.evaluate(batch)[name], value), name


def test_exported_model_runs_in_an_inference_session(compiled, tmp_path):
    session = ampc.TrainingSession(compiled)
    batch = batches()[0]
    session.step(batch)
    path = str(tmp_path / "trained.onnx")
    session.export(path, keep_loss=True)
    inference = ampc.InferenceSession(path)
    inputs = {name: batch[name] for name, _, _ in inference.inputs}
    got = inference.run(inputs)
    want = session.evaluate({name: batch[name] for name, _, _ in session.eval_inputs})
    assert sorted(got) == sorted(want)
    for name in got:
        assert np.array_equal(got[name], want[name]), name


def test_dynamic_dims_are_fixed_by_shapes_or_dims():
    """An export with a dynamic batch loads once the batch is given, by dim name or by an input's
    shape (which fixes the other inputs' dims of that name), and runs as the static file does."""
    path = os.path.join(SOURCE, "tests", "data", "dynamic", "mlp_batch.onnx")
    batch = batches()[0]
    want = ampc.InferenceSession(MLP).run(batch)
    with pytest.raises(ValueError, match="fix it with --dim batch=N"):
        ampc.InferenceSession(path)
    for session in (ampc.InferenceSession(path, dims={"batch": 8}),
                    ampc.InferenceSession(path, shapes={"x": [8, 64]})):
        assert [shape for _, _, shape in session.inputs] == [(8, 64), (8,)]
        got = session.run(batch)
        for name in want:
            assert np.array_equal(got[name], want[name]), name
    with pytest.raises(ValueError, match="dim 'batch' is 4 by --dim batch=4 but 8 by --shape x"):
        ampc.InferenceSession(path, dims={"batch": 4}, shapes={"x": [8, 64]})


def test_errors_raise_with_the_message(compiled, tmp_path):
    with pytest.raises(ampc.AmpcError, match="no_such.onnx"):
        ampc.compile(str(tmp_path / "no_such.onnx"), str(tmp_path / "out.onnx"))
    with pytest.raises(ampc.AmpcError, match="--optimizer"):
        ampc.compile(MLP, str(tmp_path / "out.onnx"), optimizer="lion")
    with pytest.raises(ValueError, match="no_such.onnx"):
        ampc.TrainingSession(str(tmp_path / "no_such.onnx"))
    with pytest.raises(ValueError, match="unknown device 'tpu'"):
        ampc.TrainingSession(compiled, device="tpu")
    session = ampc.TrainingSession(compiled)
    batch = batches()[0]
    with pytest.raises(ValueError, match="input 'x': expected dtype float32"):
        session.step({"x": batch["x"].astype(np.float64), "label": batch["label"]})
    with pytest.raises(ValueError, match=r"input 'x': expected shape \[8,64\]"):
        session.step({"x": batch["x"][:4], "label": batch["label"]})
    with pytest.raises(ValueError, match="'y' is not an input"):
        session.step({"y": batch["x"], "label": batch["label"]})
    with pytest.raises(ValueError, match="x"):
        session.step({"label": batch["label"]})
    bad = dict(batch, label=np.full_like(batch["label"], 99))
    with pytest.raises(ValueError, match="label 99"):
        session.step(bad)
    with pytest.raises(ValueError, match=r"float32 \(f32\), got float32 \(big-endian, '>f4'\)"):
        session.step({"x": batch["x"].astype(">f4"), "label": batch["label"]})
    assert session.steps_done == 0
    with pytest.raises(ValueError, match=r"the keys are input names \(str\), not 0"):
        session.step({0: batch["x"], "label": batch["label"]})
    with pytest.raises(ValueError, match="lr 1e[+]?300 is beyond float32's range"):
        session.step(batch, lr=1e300)
    assert session.steps_done == 0
    with pytest.raises(ValueError, match="lr 1e-50 rounds to 0 in float32"):
        session.step(batch, lr=1e-50)
    assert session.steps_done == 0
    with pytest.raises(ValueError, match=r"input 'label' is missing \(the inputs: x, label\)"):
        ampc.InferenceSession(MLP).run({"x": batch["x"]})


@pytest.mark.parametrize("precision,dtype", [("fp16", np.float16), ("bf16", None)])
def test_low_precision_arrays_round_trip(tmp_path, precision, dtype):
    """O3 keeps the weights themselves in f16 / bf16 (no f32 master copy), so the state holds
    low-precision tensors: f16 as numpy's float16, bf16 as ml_dtypes.bfloat16 or its raw bits."""
    path = str(tmp_path / f"mlp.{precision}.onnx")
    ampc.compile(MLP, path, precision=precision, opt_level="O3", optimizer="sgd", lr=0.05)
    session = ampc.TrainingSession(path)
    if dtype is None:
        try:
            import ml_dtypes
            dtype = ml_dtypes.bfloat16
        except ImportError:
            dtype = np.uint16
    low = [n for n in session.state_names if session.state(n).dtype == dtype]
    assert low, [(n, session.state(n).dtype) for n in session.state_names]
    name = low[0]
    value = session.state(name)
    bits = np.arange(value.size, dtype=np.uint16).reshape(value.shape) + 0x3c00
    values = bits.view(dtype)
    session.set_state(name, values)
    assert session.state(name).dtype == dtype
    assert session.state(name).tobytes() == values.tobytes()
    batch = batches()[0]
    assert np.isfinite(session.step(batch)["loss"])


def test_bf16_arrays_go_out_as_dlpack_bfloat16(tmp_path):
    """A bf16 state comes out as ampc.BFloat16Array, whose __dlpack__ capsule says bfloat16 (DLPack
    type code 4): the session's own DLPack reader takes it back as bf16 and nothing else, dense or
    strided. The capsule keeps the array alive until it is consumed or dropped."""
    path = str(tmp_path / "mlp.bf16.onnx")
    ampc.compile(MLP, path, precision="bf16", opt_level="O3", optimizer="sgd", lr=0.05)
    session = ampc.TrainingSession(path)
    name = next(n for n in session.state_names
                if isinstance(session.state(n), ampc.BFloat16Array))
    value = session.state(name)
    assert value.__dlpack_device__() == (1, 0)
    capsule = value.__dlpack__()
    assert type(capsule).__name__ == "PyCapsule"

    # Every other column of a wider array: the capsule carries the strides.
    rows, cols = value.shape
    wide = (np.arange(rows * 2 * cols, dtype=np.uint16).reshape(rows, 2 * cols) + 0x3c00)
    strided = wide.view(ampc.BFloat16Array)[:, ::2]
    session.set_state(name, DlpackOnly(strided))
    assert session.state(name).view(np.uint16).tolist() == wide[:, ::2].tolist()
    # A float16 array of the same bits is not bf16.
    with pytest.raises(ValueError, match="expected dtype bf16, got f16"):
        session.set_state(name, DlpackOnly(wide[:, ::2].view(np.float16).copy()))

    bits = np.array([0x3f80, 0xc000, 0x3c00, 0x7f80], dtype=np.uint16)
    assert bits.view(ampc.BFloat16Array).to_float32().tolist() == [1.0, -2.0, 2.0**-7, np.inf]

    base = np.zeros(4, dtype=np.uint16)
    before = sys.getrefcount(base)
    capsule = ampc._ampc._bfloat16_dlpack(base)
    assert sys.getrefcount(base) == before + 1
    del capsule  # never consumed: the capsule deletes its tensor
    assert sys.getrefcount(base) == before
    with pytest.raises(TypeError, match="2-byte"):
        ampc._ampc._bfloat16_dlpack(np.zeros(4, dtype=np.float32))


def test_inspect_matches_the_clis_json(compiled):
    cli = json.loads(subprocess.run([ampc.cli_path(), "inspect", compiled, "--format", "json",
                                     "--precision"], check=True, capture_output=True,
                                    text=True).stdout)
    assert ampc.inspect(compiled, precision=True) == cli


def test_a_step_releases_the_gil(compiled):
    """With a switch interval too long to expire, another Python thread runs only when this one
    gives the GIL up itself: the spinning thread counts only if step() releases it."""
    session = ampc.TrainingSession(compiled)
    batch = batches()[0]
    count = 0
    stop = False

    def spin():
        nonlocal count
        while not stop:
            count += 1
            time.sleep(0)  # hands the GIL back after each count

    # Steps until the spinner has counted. On a loaded machine the spinner may not be scheduled
    # within one short step, so the test allows many; with the GIL held it never counts.
    old = sys.getswitchinterval()
    spinner = threading.Thread(target=spin)
    sys.setswitchinterval(1000)
    steps = 0
    try:
        spinner.start()
        before = count
        while count == before and steps < 2000:
            session.step(batch)
            steps += 1
        after = count
    finally:
        stop = True
        sys.setswitchinterval(old)
        spinner.join()
    assert after > before, f"no other thread ran while the session took {steps} steps"


def test_two_sessions_stepping_in_two_threads_train_as_alone(compiled):
    data = batches()
    alone = ampc.TrainingSession(compiled)
    want = [alone.step(data[i % len(data)])["loss"] for i in range(20)]
    sessions = [ampc.TrainingSession(compiled) for _ in range(2)]
    got = [[], []]

    def train(k):
        for i in range(20):
            got[k].append(sessions[k].step(data[i % len(data)])["loss"])

    threads = [threading.Thread(target=train, args=(k,)) for k in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert got[0] == want and got[1] == want


def test_two_threads_sharing_a_session_take_turns(compiled):
    session = ampc.TrainingSession(compiled)
    data = batches()
    threads = [threading.Thread(target=lambda: [session.step(data[i]) for i in range(20)])
               for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert session.steps_done == 40
    assert all(np.all(np.isfinite(session.state(n))) for n in session.state_names)


def test_python_dash_m_runs_the_cli():
    done = subprocess.run(["python3", "-m", "ampc", "--version"], capture_output=True, text=True,
                          env=dict(os.environ))
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ampc " + ampc.__version__
