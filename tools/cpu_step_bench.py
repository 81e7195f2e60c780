#!/usr/bin/env python3
"""CPU training-step time of ampc beside PyTorch on the same models, batches and threads.

The two models of issue 16's table and a causal self-attention layer, exported from PyTorch
with their cross-entropy loss:
  mlp: 784-1024-1024-10 with ReLU, batch 128;
  rescnn: a residual CNN at 32x32, batch 16: a stem Conv+BN+SiLU (3 -> 32 channels), a residual
          block of two Conv+BN+SiLU, global average pooling and a linear classifier;
  attention: 8 sequences of 256 positions of width 256, 4 heads: QKV projection, causal
             scaled_dot_product_attention (PyTorch's fused CPU kernel), output projection, mean
             over the positions and a linear classifier;
  bags: 2048 bags of 8 ids each summed from a table of 1000 rows of 64 (nn.EmbeddingBag, which
        the exporter writes as an ONNX Loop over the bags; ampc unrolls it and merges the bags
        back into one Gather and one sum), then a linear classifier;
  ragged_bags: the same with 16384 ids in 2048 bags of varying length given by `offsets` (the
        Loop slices the ids at run-time bounds; ampc makes the bags one segment reduction).
All train with SGD, momentum 0.9, lr 0.01, in f32. PyTorch runs with torch.set_num_threads(T);
ampc with OMP_NUM_THREADS=T and OPENBLAS_NUM_THREADS=1 (ampc's own threads call a
single-threaded BLAS). ampc's step time is (time of `ampc train --steps N+W`) - (time of
`--steps W`) over N, so process start, loading and the first steps are not counted; PyTorch's is
the median of N timed steps after W warm-up steps. Each figure is the median of --repeats runs.
Beside ampc as built: without its fusion passes, and with AMPC_CPU_CONV=im2col (its own
im2col + GEMM convolutions instead of oneDNN's).

  venv/bin/python tools/cpu_step_bench.py [--ampc build/ampc] [--threads 2] [--steps 100]
"""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
import warnings

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


class Mlp(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(784, 1024)
        self.fc2 = nn.Linear(1024, 1024)
        self.fc3 = nn.Linear(1024, 10)

    def forward(self, x, label):
        return F.cross_entropy(self.fc3(F.relu(self.fc2(F.relu(self.fc1(x))))), label)


class ConvBnSilu(nn.Module):
    def __init__(self, cin, cout):
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, 3, padding=1)
        self.bn = nn.BatchNorm2d(cout)

    def forward(self, x):
        return F.silu(self.bn(self.conv(x)))


class ResCnn(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = ConvBnSilu(3, 32)
        self.block1 = ConvBnSilu(32, 32)
        self.block2 = ConvBnSilu(32, 32)
        self.fc = nn.Linear(32, 10)

    def forward(self, x, label):
        h = self.stem(x)
        h = h + self.block2(self.block1(h))
        return F.cross_entropy(self.fc(h.mean(dim=(2, 3))), label)


class Attention(nn.Module):
    def __init__(self, width=256, heads=4):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)
        self.fc = nn.Linear(width, 10)

    def forward(self, x, label):
        batch, length, width = x.shape
        q, k, v = self.qkv(x).split(width, dim=2)
        heads = [t.view(batch, length, self.heads, width // self.heads).transpose(1, 2)
                 for t in (q, k, v)]
        y = F.scaled_dot_product_attention(*heads, is_causal=True)
        y = self.proj(y.transpose(1, 2).reshape(batch, length, width))
        return F.cross_entropy(self.fc(y.mean(dim=1)), label)


class Bags(nn.Module):
    def __init__(self, vocab=1000, width=64):
        super().__init__()
        self.bag = nn.EmbeddingBag(vocab, width, mode="sum")
        self.fc = nn.Linear(width, 10)

    def forward(self, x, label):
        return F.cross_entropy(self.fc(self.bag(x)), label)


class RaggedBags(Bags):
    def forward(self, x, offsets, label):
        return F.cross_entropy(self.fc(self.bag(x, offsets)), label)


MODELS = {
    "mlp": (Mlp, (128, 784)),
    "rescnn": (ResCnn, (16, 3, 32, 32)),
    "attention": (Attention, (8, 256, 256)),
    "bags": (Bags, (2048, 8)),
    "ragged_bags": (RaggedBags, (2048, 8)),
}
# The models whose x holds ids, and their vocabulary.
VOCAB = {"bags": 1000, "ragged_bags": 1000}


def batches(name, count, seed):
    """`count` batches of the model's inputs, by name, in its forward's order."""
    shape = MODELS[name][1]
    rng = np.random.default_rng(seed)
    arrays = {}
    if name == "ragged_bags":
        bags, ids = shape[0], shape[0] * shape[1]
        arrays["x"] = rng.integers(0, VOCAB[name], (count, ids)).astype(np.int64)
        cuts = np.sort(rng.integers(0, ids + 1, (count, bags - 1)), axis=1)
        arrays["offsets"] = np.concatenate([np.zeros((count, 1)), cuts], axis=1).astype(np.int64)
    elif name in VOCAB:
        arrays["x"] = rng.integers(0, VOCAB[name], (count,) + shape).astype(np.int64)
    else:
        arrays["x"] = rng.standard_normal((count,) + shape).astype(np.float32)
    arrays["label"] = rng.integers(0, 10, (count, shape[0])).astype(np.int64)
    return arrays


def torch_step_ms(name, threads, steps, warmup):
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    model = MODELS[name][0]().train()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    arrays = batches(name, 8, 1)
    times = []
    for step in range(warmup + steps):
        i = step % 8
        start = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        loss = model(*(torch.from_numpy(a[i]) for a in arrays.values()))
        loss.backward()
        optimizer.step()
        if step >= warmup:
            times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def export_training_model(model, arrays, path):
    """`model` (its forward's inputs named and ordered as `arrays`, its loss returned) to `path`
    by the TorchScript exporter in training mode, its inputs shaped as the first batch."""
    with warnings.catch_warnings():  # the exporter's deprecation notices
        warnings.simplefilter("ignore")
        torch.onnx.export(model, tuple(torch.from_numpy(a[0]) for a in arrays.values()), path,
                          dynamo=False, training=torch.onnx.TrainingMode.TRAINING,
                          do_constant_folding=False, input_names=list(arrays),
                          output_names=["loss"], opset_version=17)


def export(name, directory):
    torch.manual_seed(0)
    model = MODELS[name][0]().train()
    arrays = batches(name, 8, 1)
    path = os.path.join(directory, name + ".onnx")
    export_training_model(model, arrays, path)
    data = os.path.join(directory, name + ".npz")
    np.savez(data, **arrays)
    return path, data


def run_seconds(command, env):
    start = time.perf_counter()
    subprocess.run(command, check=True, env=env, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def ampc_step_ms(ampc, model, data, threads, steps, warmup, extra_flags, directory,
                 extra_env=None):
    compiled = os.path.join(directory, "step.onnx")
    subprocess.run([ampc, "compile", model, "-o", compiled, "--optimizer", "sgd", "--momentum",
                    "0.9", "--lr", "0.01"] + extra_flags, check=True, stdout=subprocess.DEVNULL)
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), OPENBLAS_NUM_THREADS="1",
               **(extra_env or {}))
    train = [ampc, "train", compiled, "--data", data, "--progress", "none"]
    short = run_seconds(train + ["--steps", str(warmup)], env)
    long = run_seconds(train + ["--steps", str(warmup + steps)], env)
    return (long - short) / steps * 1e3


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ampc", default="build/ampc")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--models", nargs="+", default=list(MODELS))
    args = parser.parse_args()
    if not os.path.exists(args.ampc):
        sys.exit(f"cpu_step_bench: {args.ampc} does not exist; build first (./setup.sh)")
    print(f"| model | PyTorch {torch.__version__} | ampc | ampc, no fusion | "
          "ampc, im2col convolutions | ampc / PyTorch |")
    print("|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as directory:
        for name in args.models:
            model, data = export(name, directory)
            figures = {}
            for label, run in (
                ("torch", lambda: torch_step_ms(name, args.threads, args.steps, args.warmup)),
                ("ampc", lambda: ampc_step_ms(args.ampc, model, data, args.threads, args.steps,
                                              args.warmup, [], directory)),
                ("plain", lambda: ampc_step_ms(args.ampc, model, data, args.threads, args.steps,
                                               args.warmup,
                                               ["--disable-pass", "fuse-elementwise",
                                                "--disable-pass", "fuse-attention"],
                                               directory)),
                ("im2col", lambda: ampc_step_ms(args.ampc, model, data, args.threads, args.steps,
                                                args.warmup, [], directory,
                                                {"AMPC_CPU_CONV": "im2col"})),
            ):
                figures[label] = statistics.median(run() for _ in range(args.repeats))
            print(f"| {name} | {figures['torch']:.2f} ms | {figures['ampc']:.2f} ms | "
                  f"{figures['plain']:.2f} ms | {figures['im2col']:.2f} ms | "
                  f"{figures['ampc'] / figures['torch']:.2f}x |",
                  flush=True)


if __name__ == "__main__":
    main()
