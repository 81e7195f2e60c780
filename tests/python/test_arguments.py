"""The arguments the Python API checks before anything runs: paths (str, bytes or os.PathLike,
and never one holding a NUL, which C would take as the path's end), session options that do
nothing on the CPU (refused, as the CLI refuses --allow-tf32 there), check_numerics, inspect's
format, $AMPC_BINARY, and arrays checked before numpy copies them.

Run by CTest (`python_api`) with PYTHONPATH=build/python and AMPC_BINARY, AMPC_SOURCE_DIR set.
"""
import os
import pathlib
import re
import subprocess
import sys

import numpy as np
import pytest

import ampc

SOURCE = os.environ.get("AMPC_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
MLP = os.path.join(SOURCE, "models", "mlp.onnx")
MLP_DATA = os.path.join(SOURCE, "models", "mlp.train.npz")


def batch(i=0):
    data = np.load(MLP_DATA)
    return {name: data[name][i] for name in data.files}


def test_every_path_argument_takes_an_os_pathlike(tmp_path):
    root = pathlib.Path(tmp_path)
    ampc.compile(pathlib.Path(MLP), root / "mlp.train.onnx", optimizer="sgd", lr=0.05)
    session = ampc.TrainingSession(root / "mlp.train.onnx")
    session.step(batch())
    session.save_checkpoint(root / "checkpoint.safetensors")
    resumed = ampc.TrainingSession(os.fsencode(root / "mlp.train.onnx"))  # bytes, as open() takes
    resumed.load_checkpoint(root / "checkpoint.safetensors")
    assert resumed.steps_done == 1
    session.export(root / "trained.onnx", keep_loss=True)
    assert [name for name, _, _ in ampc.InferenceSession(root / "trained.onnx").outputs]
    assert ampc.inspect(root / "trained.onnx")["summary"]["node_count"] > 0
    with pytest.raises(TypeError, match=r"save_checkpoint: path is a path \(str or os.PathLike\)"
                                        r", not int"):
        session.save_checkpoint(3)


def calls_taking_a_path(compiled, directory):
    """(call, argument, function of a path) for every call that takes a path."""
    session = ampc.TrainingSession(compiled)
    return [
        ("InferenceSession", "path", lambda p: ampc.InferenceSession(p)),
        ("TrainingSession", "path", lambda p: ampc.TrainingSession(p)),
        ("load_checkpoint", "path", session.load_checkpoint),
        ("save_checkpoint", "path", session.save_checkpoint),
        ("export", "path", session.export),
        ("compile", "model", lambda p: ampc.compile(p, os.path.join(directory, "out.onnx"))),
        ("compile", "output", lambda p: ampc.compile(MLP, p)),
        ("inspect", "path", lambda p: ampc.inspect(p)),
    ]


def test_a_path_holding_a_nul_is_refused_naming_the_argument(compiled, tmp_path):
    """C ends a string at its first NUL: "good.ckpt\\0junk" would load good.ckpt. Each call
    refuses such a path, as open() does, naming itself and the argument; nothing is written."""
    session = ampc.TrainingSession(compiled)
    session.step(batch())
    good = tmp_path / "good.ckpt"
    session.save_checkpoint(str(good))
    for call, argument, fn in calls_taking_a_path(compiled, str(tmp_path)):
        # A path whose part before the NUL names a file that exists (or could be written).
        target = {"InferenceSession": MLP, "TrainingSession": compiled, "load_checkpoint": good,
                  "inspect": compiled}.get(call, tmp_path / "written")
        if call == "compile" and argument == "model":
            target = MLP
        path = str(target) + "\0junk"
        with pytest.raises(ValueError, match=f"^{call}: {argument} " + re.escape(repr(path))
                                              + " holds a NUL character"):
            fn(path)
        with pytest.raises(ValueError, match=f"^{call}: {argument} .* holds a NUL character"):
            fn(pathlib.PurePosixPath(str(target) + "\0"))  # an os.PathLike is checked too
    assert not (tmp_path / "written").exists()
    with pytest.raises(ValueError, match="^compile: fp32_nodes 'a\\\\x00b' holds a NUL"):
        ampc.compile(MLP, str(tmp_path / "out.onnx"), fp32_nodes="a\0b")


def test_options_that_do_nothing_on_the_cpu_are_refused(compiled):
    """The CLI refuses --allow-tf32 on the cpu ("has no effect on the cpu device"); so do the
    sessions, and a device_index, which only picks a GPU. A negative index is no GPU's."""
    for load in (ampc.TrainingSession, ampc.InferenceSession):
        path = compiled if load is ampc.TrainingSession else MLP
        with pytest.raises(ValueError, match=re.escape(
                "allow_tf32=True has no effect on the cpu device (use it with device='cuda')")):
            load(path, allow_tf32=True)
        with pytest.raises(ValueError, match=re.escape(
                "device_index=1 has no effect on the cpu device (use it with device='cuda')")):
            load(path, device_index=1)
        for device in ("cpu", "cuda"):
            with pytest.raises(ValueError, match=re.escape(
                    "device_index=-1 is not a GPU index (0 is the first GPU)")):
                load(path, device=device, device_index=-1)


def with_inf(data):
    """The batch with one inf pixel: the first Gemm spreads it, the second makes NaN of it."""
    x = data["x"].copy()
    x[0, 0] = np.inf
    return dict(data, x=x)


def test_check_numerics_refuses_a_step_that_makes_a_non_finite_value(compiled):
    """check_numerics (C++ SessionOptions::check_numerics): the first node that writes an inf or
    a NaN its inputs did not hold fails the step, named, and the step changes no state; the
    session then steps on as one that never saw the batch. Without it the same step is taken
    and its NaN reaches the weights."""
    checked, plain = (ampc.TrainingSession(compiled, check_numerics=c) for c in (True, False))
    for session in (checked, plain):
        session.step(batch(0))
    before = {name: checked.state(name).copy() for name in checked.state_names}
    with pytest.raises(ValueError, match=r"--check-numerics: node '.*' \(Gemm\) wrote NaN"):
        checked.step(with_inf(batch(1)))
    assert checked.steps_done == 1
    for name, value in before.items():
        assert np.array_equal(checked.state(name), value), name
    reference = ampc.TrainingSession(compiled)
    reference.step(batch(0))
    want = reference.step(batch(2))
    got = checked.step(batch(2))
    assert (got["loss"], got["grad_norm"]) == (want["loss"], want["grad_norm"])

    assert not np.isfinite(plain.step(with_inf(batch(1)))["loss"])
    assert not all(np.isfinite(w).all() for w in plain.weights().values())

    inference = ampc.InferenceSession(MLP, check_numerics=True)
    with pytest.raises(ValueError, match=r"--check-numerics: node '.*' \(Gemm\) wrote NaN"):
        inference.run(with_inf(batch(1)))
    assert all(np.isfinite(v).all() for v in inference.run(batch(1)).values())


def test_inspect_takes_only_the_json_format(compiled):
    with pytest.raises(ValueError, match=re.escape(
            "inspect: format='text' is not one inspect() takes: it returns the JSON document "
            "(format='json', the default)")):
        ampc.inspect(compiled, format="text")
    assert ampc.inspect(compiled, format="json") == ampc.inspect(compiled)


def test_an_ampc_binary_that_is_not_there_is_named(tmp_path, monkeypatch):
    missing = str(tmp_path / "no_such" / "ampc")
    message = re.escape(f"AMPC_BINARY={missing!r} is not an executable file")
    for value in (missing, str(tmp_path)):  # nothing there; a folder
        monkeypatch.setenv("AMPC_BINARY", value)
        with pytest.raises(RuntimeError, match=message.replace(re.escape(repr(missing)),
                                                               re.escape(repr(value)))):
            ampc.cli_path()
    monkeypatch.setenv("AMPC_BINARY", missing)
    with pytest.raises(RuntimeError, match=message):
        ampc.inspect(MLP)
    done = subprocess.run([sys.executable, "-m", "ampc", "--version"], capture_output=True,
                          text=True, env=dict(os.environ))
    assert done.returncode == 1
    assert done.stderr.startswith(f"ampc: error: AMPC_BINARY={missing!r} is not an executable "
                                  "file"), done.stderr
    assert "Traceback" not in done.stderr


def test_a_wrong_view_is_refused_before_it_is_copied(compiled):
    """An array that is not C-contiguous is checked as it lies, before numpy's contiguous copy: a
    broadcast view of 2**40 rows (a 256 TiB copy) gets the shape or dtype error at once, not a
    MemoryError or "expected an array". A view of the right shape is copied and trains as its
    contiguous copy does."""
    session = ampc.TrainingSession(compiled)
    data = batch()
    huge = np.broadcast_to(np.float32(1), (1 << 40, 64))
    with pytest.raises(ValueError, match=re.escape(
            "input 'x': expected shape [8,64], got [1099511627776,64]")):
        session.step(dict(data, x=huge))
    with pytest.raises(ValueError, match=re.escape(
            "input 'x': expected dtype float32 (f32), got float64")):
        session.step(dict(data, x=np.broadcast_to(np.float64(1), (1 << 40, 64))))
    name = session.state_names[0]
    with pytest.raises(ValueError, match=f"state '{name}': expected shape"):
        session.set_state(name, np.broadcast_to(np.float32(0), (1 << 40, 3)))
    assert session.steps_done == 0

    row = np.broadcast_to(data["x"][0], (8, 64))
    assert not row.flags["C_CONTIGUOUS"]
    reference = ampc.TrainingSession(compiled)
    want = reference.step(dict(data, x=np.ascontiguousarray(row)))
    got = session.step(dict(data, x=row))
    assert (got["loss"], got["grad_norm"]) == (want["loss"], want["grad_norm"])
