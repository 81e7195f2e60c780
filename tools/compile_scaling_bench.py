"""How `ampc compile` scales with the size of the model: generated GPTs of growing depth.

    venv/bin/python tools/compile_scaling_bench.py [--ampc build/ampc] [--layers 12 48 192 768]

Each GPT is models/export_models.py's TinyGPT (the nanoGPT idiom, d_model 32, 2 heads, block 32)
with N layers, exported by PyTorch the way the example model is (training mode, the shape
arithmetic kept), so a layer is about 110 imported ONNX nodes. Each is compiled the way a
mixed-precision training run is (`--precision fp16 --optimizer adamw`) in its own process;
the table gives its wall time, the time per 10k forward (imported) nodes, and the process's
peak resident memory (GNU time's %M, from the Debian package `time`). `--passes` adds each
compile's `--time-passes` table.
"""
import argparse
import os
import subprocess
import sys
import tempfile
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "models"))
import export_models  # noqa: E402


def export_gpt(layers, path):
    torch.manual_seed(0)
    model = export_models.TinyGPT(n_layer=layers)
    g = torch.Generator().manual_seed(1)
    tokens = torch.randint(0, 64, (4, 32), generator=g)
    targets = torch.randint(0, 64, (4, 32), generator=g)
    export_models.export(model, (tokens, targets), ["tokens", "targets"], path,
                         keep_shape_ops=True)


def compile_once(ampc, model, output):
    """(seconds, peak RSS in bytes, stderr) of one `ampc compile --time-passes`.

    The peak comes from GNU time, which runs ampc as its own child: a child of this process
    would start as a fork of it (with PyTorch loaded) and count that memory as its own."""
    rss_file = output + ".rss"
    cmd = ["/usr/bin/time", "-f", "%M", "-o", rss_file, ampc, "compile", model, "-o", output,
           "--precision", "fp16", "--optimizer", "adamw", "--loss", "loss", "--time-passes"]
    start = time.perf_counter()
    proc = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    seconds = time.perf_counter() - start
    if proc.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stderr}")
    with open(rss_file) as f:
        return seconds, int(f.read().split()[-1]) * 1024, proc.stderr


def row_of(stderr, step):
    """The `nodes` and `step nodes` columns of `--time-passes`'s row for `step`."""
    for line in stderr.splitlines():
        fields = line.split()
        if fields and fields[0] == step:
            return fields
    sys.exit(f"no '{step}' row in --time-passes output:\n{stderr}")


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ampc", default="build/ampc")
    p.add_argument("--layers", type=int, nargs="+", default=[12, 48, 192, 768])
    p.add_argument("--passes", action="store_true", help="print each compile's --time-passes")
    a = p.parse_args()
    print("| layers | forward nodes | training-step nodes | compile s | s per 10k forward nodes "
          "| peak RSS MiB |")
    print("|---:|---:|---:|---:|---:|---:|")
    with tempfile.TemporaryDirectory() as tmp:
        for layers in a.layers:
            model = os.path.join(tmp, f"gpt{layers}.onnx")
            export_gpt(layers, model)
            seconds, rss, stderr = compile_once(a.ampc, model, os.path.join(tmp, "out.onnx"))
            forward = int(row_of(stderr, "import")[3])
            step = int(row_of(stderr, "export")[4])
            print(f"| {layers} | {forward} | {step} | {seconds:.2f} | "
                  f"{seconds / forward * 1e4:.2f} | {rss / 2**20:.0f} |", flush=True)
            if a.passes:
                print(stderr)


if __name__ == "__main__":
    main()
