#!/usr/bin/env python3
"""Checks that every model ampc's tests compile is valid ONNX, with the current onnx from PyPI.

The test suite checks compiled files with the ONNX library the build links (Debian's libonnx
1.12, which knows ai.onnx up to opset 17; tests/onnx_validity_test.cc). This script covers every
opset: it compiles each model of models/ and models/zoo/ at fp32, fp16 and bf16, for inference
and with an AdamW training step, with `ampc compile`, and runs onnx.checker.check_model with
full_check=True (strict shape inference with type checks) on each file. With onnxruntime
installed it also loads each inference file and says which it refuses (onnxruntime's CPU
kernels do not cover every dtype ONNX allows, bf16 Conv among them).

    python -m venv venv && venv/bin/pip install onnx onnxruntime
    venv/bin/python tools/check_onnx.py [--ampc build/ampc]

Exits 1 when a file fails the checker.
"""

import argparse
import glob
import os
import subprocess
import sys
import tempfile

import onnx

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ampc", default=os.path.join(ROOT, "build", "ampc"))
    args = parser.parse_args()
    try:
        import onnxruntime
    except ImportError:
        onnxruntime = None
    models = sorted(glob.glob(os.path.join(ROOT, "models", "*.onnx")) +
                    glob.glob(os.path.join(ROOT, "models", "zoo", "*.onnx")))
    failures, checked, refused, skipped = [], 0, [], []
    with tempfile.TemporaryDirectory() as out:
        for model in models:
            name = os.path.basename(model)
            for precision in ("fp32", "fp16", "bf16"):
                for training in (False, True):
                    what = f"{name} {precision}{' adamw' if training else ''}"
                    path = os.path.join(out, f"{name}.{precision}.{int(training)}.onnx")
                    command = [args.ampc, "compile", model, "-o", path, "--precision", precision]
                    if training:
                        command += ["--optimizer", "adamw"]
                    run = subprocess.run(command, capture_output=True, text=True)
                    if run.returncode != 0:
                        skipped.append(f"{what}: {run.stderr.strip().splitlines()[-1]}")
                        continue
                    compiled = onnx.load(path)
                    opset = next(o.version for o in compiled.opset_import if o.domain in ("", "ai.onnx"))
                    try:
                        onnx.checker.check_model(compiled, full_check=True)
                        checked += 1
                    except Exception as e:  # the checker's errors are of several types
                        failures.append(f"{what} (opset {opset}): {str(e).splitlines()[0]}")
                    if onnxruntime is not None and not training:
                        try:
                            onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])
                        except Exception as e:
                            refused.append(f"{what} (opset {opset}): {str(e).splitlines()[0][:160]}")
    print(f"onnx {onnx.__version__}: {checked} compiled files pass check_model(full_check=True), "
          f"{len(failures)} fail")
    for line in failures:
        print("  FAIL", line)
    for line in skipped:
        print("  not compiled:", line)
    if onnxruntime is not None:
        print(f"onnxruntime {onnxruntime.__version__} refuses {len(refused)} inference files:")
        for line in refused:
            print("  ", line)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
