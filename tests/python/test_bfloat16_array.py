"""ampc.BFloat16Array: bf16 out of a session. Without ml_dtypes it holds bf16's raw bits as
uint16, on which numpy would compute as integers (-w of -0.00093 would be 4448): ufuncs,
astype and numpy's functions that read values refuse it with a TypeError that points to
to_float32(); those that only move elements keep it bf16. With ml_dtypes numpy computes on the
values, and a result that is not bf16 is a plain array. to_float32() and __dlpack__ refuse an
array that is not bf16.
"""
import os

import numpy as np
import pytest

import ampc

SOURCE = os.environ.get("AMPC_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
MLP = os.path.join(SOURCE, "models", "mlp.onnx")

# bf16 is the upper half of an f32: these bits are 1, -2, 2**-7 and -0.5.
BITS = np.array([[0x3f80, 0xc000], [0x3c00, 0xbf00]], dtype=np.uint16)
VALUES = np.array([[1, -2], [2.0**-7, -0.5]], dtype=np.float32)


def raw():
    return BITS.copy().view(ampc.BFloat16Array)


REFUSED = [
    ("a + a", lambda a: a + a),
    ("-a", lambda a: -a),
    ("a * 0.5", lambda a: a * 0.5),
    ("np.abs", np.abs),
    ("a.sum()", lambda a: a.sum()),
    ("a.max()", lambda a: a.max()),
    ("a < 0", lambda a: a < 0),
    ("np.dot", lambda a: np.dot(a, a)),
    ("np.sort", np.sort),
    ("np.mean", np.mean),
    ("np.linalg.norm", np.linalg.norm),
    ("astype(float32)", lambda a: a.astype(np.float32)),
    ("astype(float64)", lambda a: a.astype(np.float64)),
]


@pytest.mark.parametrize("operation", [f for _, f in REFUSED], ids=[n for n, _ in REFUSED])
def test_numpy_refuses_to_compute_on_raw_bf16_bits(operation):
    with pytest.raises(TypeError, match=r"raw bits.*call \.to_float32\(\)"):
        operation(raw())


def test_moving_raw_bf16_bits_keeps_them_bf16():
    a = raw()
    moved = [
        (a.T, VALUES.T), (a.reshape(4), VALUES.reshape(4)), (a[:, ::-1], VALUES[:, ::-1]),
        (a.copy(), VALUES), (np.concatenate([a, a]), np.concatenate([VALUES, VALUES])),
        (np.stack([a, a]), np.stack([VALUES, VALUES])), (np.transpose(a), VALUES.T),
        (a.astype(np.uint16), VALUES), (np.flip(a, 0), np.flip(VALUES, 0)),
    ]
    for got, want in moved:
        assert isinstance(got, ampc.BFloat16Array)
        assert got.to_float32().dtype == np.float32
        assert np.array_equal(got.to_float32(), want)
    plain = np.asarray(a)  # the bits, as a plain uint16 array
    assert type(plain) is np.ndarray and np.array_equal(plain, BITS)
    assert str(a) and repr(a)


def test_to_float32_and_dlpack_refuse_an_array_that_is_not_bf16():
    for dtype in (np.float32, np.float16, np.int16):
        array = np.zeros((2, 2), dtype).view(ampc.BFloat16Array)
        with pytest.raises(TypeError, match=f"holds {np.dtype(dtype).name}, not bf16"):
            array.to_float32()
        with pytest.raises(TypeError, match=f"holds {np.dtype(dtype).name}, not bf16"):
            array.__dlpack__()


def test_numpy_on_a_bf16_state_computes_on_values_or_refuses(tmp_path):
    """A bf16 state of an O3 model: with ml_dtypes, -w and w + w are bf16 values (exact here:
    negation and doubling round nothing) and astype(float32) a plain array of the values;
    without it both refuse, and set_state takes back only bf16."""
    path = str(tmp_path / "mlp.bf16.onnx")
    ampc.compile(MLP, path, precision="bf16", opt_level="O3", optimizer="sgd", lr=0.05)
    session = ampc.TrainingSession(path)
    name = next(n for n in session.state_names
                if isinstance(session.state(n), ampc.BFloat16Array))
    w = session.state(name)
    values = w.to_float32()
    if w.dtype == np.uint16:  # no ml_dtypes
        with pytest.raises(TypeError, match=r"call \.to_float32\(\)"):
            -w
        with pytest.raises(TypeError, match=r"call \.to_float32\(\)"):
            w.astype(np.float32)
    else:
        assert isinstance(-w, ampc.BFloat16Array)
        assert np.array_equal((-w).to_float32(), -values)
        assert np.array_equal((w + w).to_float32(), 2 * values)
        as_f32 = w.astype(np.float32)
        assert type(as_f32) is np.ndarray and np.array_equal(as_f32, values)
        session.set_state(name, -w)
        assert np.array_equal(session.state(name).to_float32(), -values)
    with pytest.raises(ValueError, match=f"state '{name}': expected dtype"):
        session.set_state(name, values.view(ampc.BFloat16Array))
