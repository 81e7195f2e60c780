#!/usr/bin/env python3
"""GPU training-step time of ampc beside PyTorch on the same models, batches and optimizer.

The workloads of PyTorch's reference figures (docs/benchmarks.md), each with its loss in the
graph and trained with AdamW (lr 1e-4, weight decay 0.01):
  gpt2-124m: a GPT-2 of 12 layers, width 768, 12 heads, vocabulary 50304, 1024 positions,
             causal scaled_dot_product_attention, the output projection tied to the embedding;
             batch 8 (8192 tokens a step);
  resnet18-32px: torchvision's ResNet-18 with a 3x3 stride-1 stem and no max pool, 10 classes,
             32x32 images, batch 256;
  mlp-784: 784-1024-1024-1024-10 with ReLU, batch 128.
For each workload and precision (fp32 without TF32; bf16; fp16 with dynamic loss scaling):
  PyTorch eager: torch.autocast to the precision (GradScaler for fp16), fused AdamW; the median
    of --steps steps timed with CUDA events after --warmup steps;
  ampc: `ampc bench --device cuda` on the model exported by the TorchScript exporter in training
    mode (as models/export_models.py exports), its median step time (each step waits for the
    device), after --warmup steps.
Both run the same four batches in turn. Writes every figure to --out (JSON) and prints a table.

  python3 tools/gpu_step_bench.py --ampc build/ampc [--only gpt2] [--out gpu_steps.json]
  python3 tools/gpu_step_bench.py --ampc build/ampc --quick --device cpu   # small shapes, a check
  python3 tools/gpu_step_bench.py --export-only DIR [--only gpt2]          # the models, untimed
"""
import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from cpu_step_bench import export_training_model  # tools/, beside this script

PRECISIONS = ("fp32", "bf16", "fp16")
AUTOCAST = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}


class Block(nn.Module):
    def __init__(self, width, heads):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(width), nn.LayerNorm(width)
        self.qkv, self.proj = nn.Linear(width, 3 * width), nn.Linear(width, width)
        self.fc, self.out = nn.Linear(width, 4 * width), nn.Linear(4 * width, width)

    def forward(self, x):
        batch, length, width = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(width, dim=2)
        q, k, v = (t.view(batch, length, self.heads, width // self.heads).transpose(1, 2)
                   for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(batch, length, width))
        return x + self.out(F.gelu(self.fc(self.ln2(x))))


class Gpt(nn.Module):
    def __init__(self, vocab, length, layers, width, heads):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, width), nn.Embedding(length, width)
        self.blocks = nn.ModuleList(Block(width, heads) for _ in range(layers))
        self.lnf = nn.LayerNorm(width)

    def forward(self, tokens, targets):
        positions = torch.arange(tokens.shape[1], device=tokens.device)
        x = self.wte(tokens) + self.wpe(positions)
        for block in self.blocks:
            x = block(x)
        logits = self.lnf(x) @ self.wte.weight.t()
        return F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.view(-1))


class Classifier(nn.Module):
    def __init__(self, net):
        super().__init__()
        self.net = net

    def forward(self, x, label):
        return F.cross_entropy(self.net(x), label)


def resnet18():
    import torchvision
    net = torchvision.models.resnet18(num_classes=10)
    net.conv1, net.maxpool = nn.Conv2d(3, 64, 3, 1, 1, bias=False), nn.Identity()
    return Classifier(net)


def mlp():
    return Classifier(nn.Sequential(nn.Linear(784, 1024), nn.ReLU(), nn.Linear(1024, 1024),
                                    nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(),
                                    nn.Linear(1024, 10)))


def workloads(quick):
    """(name, model factory, {input: (shape of one batch, dtype, high)}) per workload."""
    vocab, length, layers, width, heads, batch = (
        (512, 64, 2, 64, 4, 2) if quick else (50304, 1024, 12, 768, 12, 8))
    yield ("gpt2-124m", lambda: Gpt(vocab, length, layers, width, heads),
           {"tokens": ((batch, length), np.int64, vocab),
            "targets": ((batch, length), np.int64, vocab)})
    images = 8 if quick else 256
    yield ("resnet18-32px", resnet18,
           {"x": ((images, 3, 32, 32), np.float32, None), "label": ((images,), np.int64, 10)})
    yield ("mlp-784", mlp,
           {"x": ((128, 784), np.float32, None), "label": ((128,), np.int64, 10)})


def batches(inputs, count=4, seed=1):
    rng = np.random.default_rng(seed)
    return {name: (rng.standard_normal((count,) + shape).astype(dtype) if high is None else
                   rng.integers(0, high, (count,) + shape).astype(dtype))
            for name, (shape, dtype, high) in inputs.items()}


def export(name, make, arrays, directory):
    torch.manual_seed(0)
    path = os.path.join(directory, name + ".onnx")
    export_training_model(make().train(), arrays, path)
    data = os.path.join(directory, name + ".npz")
    np.savez(data, **arrays)
    return path, data


def torch_step(make, arrays, precision, device, steps, warmup):
    torch.manual_seed(0)
    model = make().to(device).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01,
                                  fused=device == "cuda")
    count = len(next(iter(arrays.values())))
    data = [tuple(torch.from_numpy(a[i]).to(device) for a in arrays.values())
            for i in range(count)]
    scaler = torch.amp.GradScaler(device) if precision == "fp16" else None
    dtype = AUTOCAST[precision]

    def step(i):
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast(device, dtype=dtype or torch.float32, enabled=dtype is not None):
            loss = model(*data[i % count])
        if scaler:
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
        else:
            loss.backward()
            optimizer.step()
        return loss

    for i in range(warmup):
        step(i)
    if device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    times = []
    for i in range(steps):
        if device == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            loss = step(warmup + i)
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end))
        else:
            start = time.perf_counter()
            loss = step(warmup + i)
            times.append((time.perf_counter() - start) * 1e3)
    return {"step_ms": statistics.median(times), "final_loss": float(loss.detach()),
            "peak_mib": torch.cuda.max_memory_allocated() / 2**20 if device == "cuda" else None}


def ampc_step(ampc, model, data, precision, device, steps, warmup, timeout, extra):
    command = shlex.split(ampc) + [
        "bench", model, "--data", data, "--device", device, "--precision", precision,
        "--optimizer", "adamw", "--lr", "1e-4", "--steps", str(steps), "--warmup", str(warmup),
        "--format", "json"] + extra
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"no result in {timeout} s"}
    if done.returncode != 0:
        return {"error": done.stderr.strip()[-400:] or f"exit {done.returncode}"}
    figures = json.loads(done.stdout[done.stdout.find("{"):])  # after any banner
    return {"step_ms": figures["step_ms"]["median"], "final_loss": figures["final_loss"],
            "mfu": figures["mfu"], "compile_s": figures["compile_seconds"],
            "measured_mib": (figures["measured_bytes"] or 0) / 2**20,
            "fused_nodes": figures["fused_nodes"]}


def cell(figures):
    return f"{figures['step_ms']:.2f} ms" if "step_ms" in figures else "error"


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ampc", default="build/ampc",
                        help="the ampc command (split as a shell would: a wrapper and its "
                        "arguments too)")
    parser.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    parser.add_argument("--quick", action="store_true", help="small shapes (a check, CPU ok)")
    parser.add_argument("--only", default="", help="only the workloads whose name holds this")
    parser.add_argument("--precisions", nargs="+", default=list(PRECISIONS), choices=PRECISIONS)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--timeout", type=int, default=180, help="seconds per ampc bench")
    parser.add_argument("--no-fuse", action="store_true", help="ampc without fusion as well")
    parser.add_argument("--out", default="gpu_steps.json")
    parser.add_argument("--export-only", metavar="DIR",
                        help="write each workload's ONNX model and batches (.npz) into DIR, and "
                        "time nothing")
    args = parser.parse_args()
    if args.export_only:
        os.makedirs(args.export_only, exist_ok=True)
        for name, make, inputs in workloads(args.quick):
            if not args.only or args.only in name:
                print(*export(name, make, batches(inputs), args.export_only))
        return
    if not os.path.exists(shlex.split(args.ampc)[0]):
        sys.exit(f"gpu_step_bench: {args.ampc} does not exist; build first")
    if args.device == "cuda":
        if not torch.cuda.is_available():
            sys.exit("gpu_step_bench: PyTorch sees no GPU (--device cpu checks the script)")
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    results = []
    columns = ["ampc"] + (["ampc, no fusion"] if args.no_fuse else [])
    print(f"| workload | precision | PyTorch {torch.__version__} eager | "
          + " | ".join(columns) + " | ampc / PyTorch |", flush=True)
    print("|---|---|---|" + "---|" * len(columns) + "---|", flush=True)
    with tempfile.TemporaryDirectory() as directory:
        for name, make, inputs in workloads(args.quick):
            if args.only and args.only not in name:
                continue
            arrays = batches(inputs)
            start = time.perf_counter()
            model, data = export(name, make, arrays, directory)
            export_s = time.perf_counter() - start
            for precision in args.precisions:
                row = {"workload": name, "precision": precision, "export_s": export_s}
                try:
                    row["torch"] = torch_step(make, arrays, precision, args.device, args.steps,
                                              args.warmup)
                except Exception as error:  # record it, keep going
                    row["torch"] = {"error": repr(error)[:400]}
                if args.device == "cuda":
                    torch.cuda.empty_cache()
                row["ampc"] = ampc_step(args.ampc, model, data, precision, args.device, args.steps,
                                        args.warmup, args.timeout, [])
                if args.no_fuse:
                    row["ampc, no fusion"] = ampc_step(args.ampc, model, data, precision,
                                                       args.device, args.steps, args.warmup,
                                                       args.timeout, ["--no-fuse"])
                results.append(row)
                ratio = (f"{row['ampc']['step_ms'] / row['torch']['step_ms']:.2f}x"
                         if "step_ms" in row["ampc"] and "step_ms" in row["torch"] else "-")
                print(f"| {name} | {precision} | {cell(row['torch'])} | "
                      + " | ".join(cell(row[c]) for c in columns) + f" | {ratio} |", flush=True)
                with open(args.out, "w") as out:
                    json.dump({"torch": torch.__version__,
                               "device": (torch.cuda.get_device_name() if args.device == "cuda"
                                          else "cpu"),
                               "results": results}, out, indent=1)
    for row in results:  # the errors in full, after the table
        for key in ["torch"] + columns:
            if "error" in row[key]:
                print(f"{row['workload']} {row['precision']} {key}: {row[key]['error']}")


if __name__ == "__main__":
    main()
