#!/usr/bin/env python3
"""Write models/digits.npz: scikit-learn's copy of the UCI hand-written digits test set.

Needs scikit-learn (`pip install scikit-learn`); nothing else in models/ does, because
export_models.py reads the committed digits.npz instead of scikit-learn.

    python models/make_digits.py              # writes models/digits.npz
    python models/make_digits.py --out DIR    # writes DIR/digits.npz

Keys: `images` uint8 [1797, 8, 8] (pixel values 0..16, exact: scikit-learn stores them as
float64 integers) and `labels` int64 [1797] (0..9), in scikit-learn's order. Written with
np.savez (uncompressed, fixed zip timestamps), so the same data gives the same bytes.
See models/README.md for where the data comes from and its license (CC BY 4.0).
"""

import argparse
import os
import sys

import numpy as np
import sklearn
from sklearn.datasets import load_digits

N_IMAGES = 1797


def fail(msg):
    print("ERROR: " + msg, file=sys.stderr)
    sys.exit(1)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.dirname(os.path.abspath(__file__)),
                    help="output folder (default: the models/ folder of this script)")
    a = ap.parse_args()
    digits = load_digits()
    images, labels = digits.images, digits.target
    if images.shape != (N_IMAGES, 8, 8) or labels.shape != (N_IMAGES,):
        fail(f"load_digits() gave images {images.shape}, labels {labels.shape}")
    # The pixels are block counts 0..16 stored as float64: uint8 must hold them exactly.
    if not (np.array_equal(images, np.round(images)) and images.min() >= 0
            and images.max() <= 16):
        fail("load_digits() images are not integers in 0..16")
    if set(np.unique(labels)) != set(range(10)):
        fail(f"load_digits() labels are {np.unique(labels)}, want 0..9")
    arrays = {"images": images.astype(np.uint8), "labels": labels.astype(np.int64)}
    os.makedirs(a.out, exist_ok=True)
    path = os.path.join(a.out, "digits.npz")
    np.savez(path, **arrays)
    with np.load(path) as back:
        if any(not np.array_equal(back[k], v) or back[k].dtype != v.dtype
               for k, v in arrays.items()):
            fail(f"{path}: does not read back as written")
    print(f"{path}: images uint8{list(images.shape)}, labels int64{list(labels.shape)} "
          f"(per class {np.bincount(labels).tolist()}) | {os.path.getsize(path)} bytes | "
          f"scikit-learn {sklearn.__version__}, numpy {np.__version__}")


if __name__ == "__main__":
    main()
