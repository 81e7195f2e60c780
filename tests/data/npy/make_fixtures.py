"""Writes the .npy/.npz fixtures that tests/runtime/npy_test.cc reads, using numpy itself.

    python tests/data/npy/make_fixtures.py   # needs numpy and ml_dtypes (pip install numpy ml_dtypes)

The committed files were made with numpy 2.4.6 and ml_dtypes 0.6.0. The test checks their values
against literals written in the test, so a change here needs the test changed too.
"""
import io
import os
import zipfile

import ml_dtypes
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))


def save(name, array, version=None):
    with open(os.path.join(HERE, name), "wb") as f:
        np.lib.format.write_array(f, array, version=version, allow_pickle=False)


class Unseekable(io.RawIOBase):
    """A write-only stream that cannot seek, so zipfile writes data descriptors."""

    def __init__(self, sink):
        self.sink = sink

    def writable(self):
        return True

    def write(self, data):
        return self.sink.write(data)


def main():
    save("f4.npy", np.array([[1.5, -2.0, 3.25], [0.0, 1e-3, -np.inf]], dtype=np.float32))
    save("f8.npy", np.array([0.1, -1e300, 2.5], dtype=np.float64))
    save("f2.npy", np.array([1.0, -0.5, 65504.0, 2.0**-24], dtype=np.float16))
    save("i8.npy", np.array([-(2**63), 0, 2**63 - 1], dtype=np.int64))
    save("i4.npy", np.array([[-7], [123456]], dtype=np.int32))
    save("i1.npy", np.array([-128, 127, 0], dtype=np.int8))
    save("u1.npy", np.array([0, 200, 255], dtype=np.uint8))
    save("b1.npy", np.array([True, False, True]))
    save("bf16.npy", np.array([1.0, -3.140625, 256.0], dtype=ml_dtypes.bfloat16))  # '<V2'
    save("f4_big_endian.npy", np.array([1.5, -2.0], dtype=">f4"))
    save("i8_big_endian.npy", np.array([1, -2, 258], dtype=">i8"))
    save("f2_big_endian.npy", np.array([1.0, -0.5], dtype=">f2"))
    save("f4_fortran.npy", np.asfortranarray(np.arange(6, dtype=np.float32).reshape(2, 3)))
    save("i4_fortran_3d.npy", np.asfortranarray(np.arange(24, dtype=np.int32).reshape(2, 3, 4)))
    save("scalar.npy", np.array(2.5))
    save("empty.npy", np.zeros((0, 3), dtype=np.float32))
    save("version2.npy", np.array([7, 8], dtype=np.int32), version=(2, 0))
    save("version3.npy", np.array([7, 8], dtype=np.int32), version=(3, 0))

    arrays = {
        "x": np.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], dtype=np.float32),
        "label": np.array([1, 2, 3], dtype=np.int64),
        "ramp": np.arange(100, dtype=np.float64),  # compresses well
    }
    np.savez(os.path.join(HERE, "savez.npz"), **arrays)
    np.savez_compressed(os.path.join(HERE, "savez_compressed.npz"), **arrays)
    # 800 KB of zeros deflate to about 1 KB: the reader grows its buffer as it inflates.
    np.savez_compressed(os.path.join(HERE, "zeros_compressed.npz"), zeros=np.zeros(100000))
    streamed = io.BytesIO()
    np.savez(Unseekable(streamed), **arrays)
    with open(os.path.join(HERE, "savez_streamed.npz"), "wb") as f:
        f.write(streamed.getvalue())
    # Sanity: zipfile agrees the streamed archive uses data descriptors (flag bit 3).
    with zipfile.ZipFile(os.path.join(HERE, "savez_streamed.npz")) as z:
        assert all(info.flag_bits & 0x08 for info in z.infolist())


if __name__ == "__main__":
    main()
