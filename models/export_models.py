#!/usr/bin/env python3
"""Export the ampc example training models (MLP, CNN, tiny GPT) to ONNX.

Needs: Python 3, PyTorch and onnx from PyPI (numpy comes with them), e.g.

    python -m venv venv && venv/bin/pip install torch onnx numpy
    venv/bin/python models/export_models.py            # writes models/*.onnx
    venv/bin/python models/export_models.py --out DIR  # writes DIR/*.onnx

The outputs (mlp.onnx, cnn.onnx, tiny_gpt.onnx) are committed, so building and
testing ampc does not need PyTorch; rerun this script only to change them.

Every model is exported in TRAINING mode with its loss inside the graph:
  * graph outputs: `loss` (float32 scalar, mean cross-entropy) first, then `logits`;
  * parameters are graph initializers named after the PyTorch parameters
    (`fc1.weight`, ...), never graph inputs;
  * static shapes (no dynamic axes), opset 17, IR version 8, so libonnx 1.12
    can check them;
  * exporter: the TorchScript exporter (`torch.onnx.export(..., dynamo=False)`)
    with `training=TrainingMode.TRAINING` and `do_constant_folding=False`.

After export the script verifies each file and fails loudly otherwise:
  * only ops from ALLOWED_OPS (the ops ampc implements) appear, default domain only;
  * onnx.checker.check_model(full_check=True) and strict shape inference pass,
    and every graph output gets a static shape (`loss` is a scalar);
  * the file is smaller than 2 MB;
  * the loss computed by onnx's reference evaluator matches PyTorch's.
It prints one summary line per model (ops used, parameter count, file size).
"""

import argparse
import collections
import copy
import math
import os
import sys
import warnings

import numpy as np
import onnx
import onnx.numpy_helper
import onnx.reference
import onnx.shape_inference
import torch
import torch.nn as nn
import torch.nn.functional as F

OPSET = 17
IR_VERSION = 8  # the IR version that goes with opset 17 (ONNX 1.12)
MAX_BYTES = 2 * 1024 * 1024

ALLOWED_OPS = {
    "MatMul", "Gemm", "Add", "Sub", "Mul", "Div", "Pow", "Sqrt", "Exp", "Log", "Neg",
    "Abs", "Reciprocal", "Relu", "LeakyRelu", "Sigmoid", "Tanh", "Erf", "Gelu",
    "Softmax", "LogSoftmax", "LayerNormalization", "BatchNormalization", "Conv",
    "MaxPool", "AveragePool", "GlobalAveragePool", "Flatten", "Reshape", "Transpose",
    "Squeeze", "Unsqueeze", "Concat", "Split", "Slice", "Gather", "Expand", "Where",
    "Equal", "Less", "Greater", "Not", "Cast", "Identity", "Constant", "ConstantOfShape",
    "Shape", "Range", "Trilu", "Clip", "Min", "Max", "ReduceMean", "ReduceSum",
    "ReduceMax", "Dropout", "SoftmaxCrossEntropyLoss", "NegativeLogLikelihoodLoss",
}


# --------------------------------------------------------------------------- models

class MLP(nn.Module):
    """8x8 digits, flattened: 64 -> 64 -> 64 -> 10."""

    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(64, 64)
        self.fc2 = nn.Linear(64, 64)
        self.fc3 = nn.Linear(64, 10)

    def forward(self, x, label):
        h = F.relu(self.fc1(x))
        h = F.relu(self.fc2(h))
        logits = self.fc3(h)
        loss = F.cross_entropy(logits, label)
        return loss, logits


class CNN(nn.Module):
    """[N,1,8,8] -> (Conv3x3/BN/ReLU/MaxPool2) x2 -> global avg pool -> Linear(16,10)."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 8, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(8)
        self.conv2 = nn.Conv2d(8, 16, 3, padding=1)
        self.bn2 = nn.BatchNorm2d(16)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(16, 10)

    def forward(self, x, label):
        h = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 2)  # [N,8,4,4]
        h = F.max_pool2d(F.relu(self.bn2(self.conv2(h))), 2)  # [N,16,2,2]
        h = torch.flatten(self.pool(h), 1)                     # [N,16]
        logits = self.fc(h)
        loss = F.cross_entropy(logits, label)
        return loss, logits


class Block(nn.Module):
    """Pre-LayerNorm transformer block; attention written out by hand.

    Shapes are Python ints (static), so reshapes get constant shapes instead
    of Shape->Gather->Concat chains.
    """

    def __init__(self, batch, ctx, d_model, n_head):
        super().__init__()
        self.B, self.T, self.C, self.H = batch, ctx, d_model, n_head
        self.D = d_model // n_head
        self.ln1 = nn.LayerNorm(d_model)
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)
        self.ln2 = nn.LayerNorm(d_model)
        self.fc = nn.Linear(d_model, 4 * d_model)
        self.fc_out = nn.Linear(4 * d_model, d_model)
        # causal mask: constant lower-triangular bool buffer -> initializer `blocks.N.mask`
        self.register_buffer("mask", torch.tril(torch.ones(ctx, ctx, dtype=torch.bool)))

    def attention(self, x):
        B, T, C, H, D = self.B, self.T, self.C, self.H, self.D
        q, k, v = self.qkv(x).split(C, dim=2)                  # 3 x [B,T,C]
        q = q.reshape(B, T, H, D).transpose(1, 2)              # [B,H,T,D]
        k = k.reshape(B, T, H, D).transpose(1, 2)
        v = v.reshape(B, T, H, D).transpose(1, 2)
        att = torch.matmul(q, k.transpose(2, 3)) * (1.0 / math.sqrt(D))  # [B,H,T,T]
        att = torch.where(self.mask, att, float("-inf"))
        att = torch.softmax(att, dim=-1)
        y = torch.matmul(att, v)                               # [B,H,T,D]
        y = y.transpose(1, 2).reshape(B, T, C)
        return self.proj(y)

    def forward(self, x):
        x = x + self.attention(self.ln1(x))
        x = x + self.fc_out(F.gelu(self.fc(self.ln2(x))))     # exact (erf) GELU
        return x


class TinyGPT(nn.Module):
    def __init__(self, batch=4, ctx=32, vocab=64, d_model=32, n_head=2, n_layer=2):
        super().__init__()
        self.B, self.T, self.V = batch, ctx, vocab
        self.tok_emb = nn.Embedding(vocab, d_model)
        self.pos_emb = nn.Embedding(ctx, d_model)
        self.blocks = nn.ModuleList(
            [Block(batch, ctx, d_model, n_head) for _ in range(n_layer)])
        self.ln_f = nn.LayerNorm(d_model)
        self.register_buffer("pos", torch.arange(ctx, dtype=torch.int64))
        self.apply(self._init_weights)

    @staticmethod
    def _init_weights(m):
        # GPT-2 style init; with the tied head this gives an initial loss near ln(64).
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, mean=0.0, std=0.02)
        if isinstance(m, nn.Linear) and m.bias is not None:
            nn.init.zeros_(m.bias)

    def forward(self, tokens, targets):
        x = self.tok_emb(tokens) + self.pos_emb(self.pos)      # [B,T,C]
        for blk in self.blocks:
            x = blk(x)
        x = self.ln_f(x)
        # LM head tied to the token embedding: logits = x @ tok_emb.weight^T
        logits = torch.matmul(x, self.tok_emb.weight.t())      # [B,T,V]
        loss = F.cross_entropy(logits.reshape(self.B * self.T, self.V),
                               targets.reshape(self.B * self.T))
        return loss, logits


# --------------------------------------------------------------------------- export

def make_cases():
    """(file name, model, example inputs, input names); seed 0 before each model."""
    cases = []

    torch.manual_seed(0)
    m = MLP()
    g = torch.Generator().manual_seed(1)
    x = torch.rand(8, 64, generator=g) * 16.0   # digits pixels are 0..16
    y = torch.randint(0, 10, (8,), generator=g)
    cases.append(("mlp.onnx", m, (x, y), ["x", "label"]))

    torch.manual_seed(0)
    m = CNN()
    g = torch.Generator().manual_seed(1)
    x = torch.rand(8, 1, 8, 8, generator=g) * 16.0
    y = torch.randint(0, 10, (8,), generator=g)
    cases.append(("cnn.onnx", m, (x, y), ["x", "label"]))

    torch.manual_seed(0)
    m = TinyGPT()
    g = torch.Generator().manual_seed(1)
    tok = torch.randint(0, 64, (4, 32), generator=g)
    tgt = torch.randint(0, 64, (4, 32), generator=g)
    cases.append(("tiny_gpt.onnx", m, (tok, tgt), ["tokens", "targets"]))
    return cases


def fail(msg):
    print("ERROR: " + msg, file=sys.stderr)
    sys.exit(1)


def export(model, args, input_names, path):
    model.train()
    state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    # Export a copy: tracing runs forward (in training mode), which updates the
    # BatchNorm running statistics of the module it runs.
    model = copy.deepcopy(model)
    with warnings.catch_warnings():
        # Known and harmless: the legacy-exporter deprecation notice, and
        # BatchNorm's num_batches_tracked += 1, which is not part of the ONNX graph.
        warnings.filterwarnings("ignore", category=DeprecationWarning)
        warnings.filterwarnings("ignore", message=".*num_batches_tracked.*")
        torch.onnx.export(
        model, args, path,
        dynamo=False,
        opset_version=OPSET,
        training=torch.onnx.TrainingMode.TRAINING,
        do_constant_folding=False,
        export_params=True,
        keep_initializers_as_inputs=False,
        input_names=input_names,
        output_names=["loss", "logits"],
        )
    m = onnx.load(path)
    # Store the initial (seed 0) state, not the state after the exporter's
    # tracing forward pass(es): this resets BatchNorm running_mean/var to 0/1.
    for init in m.graph.initializer:
        if init.name in state:
            arr = state[init.name].numpy()
            if onnx.numpy_helper.to_array(init).shape != arr.shape:
                fail(f"{path}: initializer {init.name} has a different shape than in PyTorch")
            init.CopyFrom(onnx.numpy_helper.from_array(arr, init.name))
    m.ir_version = IR_VERSION
    onnx.save(m, path)


def dims(vi):
    t = vi.type.tensor_type
    return [d.dim_value if d.HasField("dim_value") else (d.dim_param or "?")
            for d in t.shape.dim]


def dtype_name(vi):
    return onnx.helper.tensor_dtype_to_np_dtype(vi.type.tensor_type.elem_type).name


def verify(name, model, args, input_names, path):
    size = os.path.getsize(path)
    if size >= MAX_BYTES:
        fail(f"{name}: {size} bytes >= 2 MB")
    m = onnx.load(path)

    opsets = {o.domain: o.version for o in m.opset_import}
    if opsets.get("", opsets.get("ai.onnx")) != OPSET or len(opsets) != 1:
        fail(f"{name}: opset_import {opsets}, want only default domain at {OPSET}")
    if m.ir_version != IR_VERSION:
        fail(f"{name}: ir_version {m.ir_version}, want {IR_VERSION}")

    counts = collections.Counter(n.op_type for n in m.graph.node)
    bad = sorted({f"{n.domain}::{n.op_type}" for n in m.graph.node
                  if n.domain not in ("", "ai.onnx") or n.op_type not in ALLOWED_OPS})
    if bad:
        fail(f"{name}: ops outside the allowed list: {bad}")
    if m.functions:
        fail(f"{name}: model has local functions")

    onnx.checker.check_model(m, full_check=True)
    inferred = onnx.shape_inference.infer_shapes(m, check_type=True, strict_mode=True,
                                                 data_prop=True)

    init_names = {i.name for i in m.graph.initializer}
    graph_inputs = [i.name for i in m.graph.input]
    if graph_inputs != input_names:
        fail(f"{name}: graph inputs {graph_inputs}, want {input_names} (params must be initializers)")
    outs = {o.name: o for o in inferred.graph.output}
    if [o.name for o in m.graph.output][:1] != ["loss"]:
        fail(f"{name}: first output must be `loss`")
    if dims(outs["loss"]) != [] or dtype_name(outs["loss"]) != "float32":
        fail(f"{name}: loss must be a float32 scalar, got {dtype_name(outs['loss'])} {dims(outs['loss'])}")
    for o in inferred.graph.output:
        if not o.type.tensor_type.HasField("shape") or any(
                not isinstance(d, int) for d in dims(o)):
            fail(f"{name}: output {o.name} has no static shape after inference")

    if counts.get("Shape", 0):
        fail(f"{name}: Shape nodes present; shapes should be static constants")
    for n in m.graph.node:
        if n.op_type == "BatchNormalization":
            tm = [a.i for a in n.attribute if a.name == "training_mode"]
            if tm != [1] or len(n.output) != 3:
                fail(f"{name}: BatchNormalization {n.name} is not in training mode "
                     f"with running mean/var outputs")

    params = dict(model.named_parameters())
    missing = [p for p in params if p not in init_names]
    if missing:
        fail(f"{name}: parameters not stored as initializers: {missing}")
    state = model.state_dict()
    extra = [i for i in init_names if i not in state]
    if extra:
        fail(f"{name}: initializers that are not PyTorch parameters/buffers: {extra}")
    for init in m.graph.initializer:
        if not np.array_equal(onnx.numpy_helper.to_array(init), state[init.name].numpy()):
            fail(f"{name}: initializer {init.name} differs from the PyTorch initial state")
    n_params = sum(p.numel() for p in params.values())
    buffers = sorted(i for i in init_names if i not in params)

    # numeric check: onnx reference evaluator vs PyTorch (same train-mode forward)
    feeds = {n: a.numpy() for n, a in zip(input_names, args)}
    ref_loss = onnx.reference.ReferenceEvaluator(m).run(["loss"], feeds)[0]
    with torch.no_grad():
        torch_loss = copy.deepcopy(model).train()(*args)[0].item()
    if not np.isclose(float(ref_loss), torch_loss, rtol=1e-4, atol=1e-5):
        fail(f"{name}: onnx reference loss {float(ref_loss)} != torch loss {torch_loss}")

    io = ", ".join(f"{v.name}:{dtype_name(v)}{dims(v)}" for v in m.graph.input)
    io += " -> " + ", ".join(f"{o.name}:{dtype_name(o)}{dims(o)}" for o in inferred.graph.output)
    ops = " ".join(f"{k}x{v}" for k, v in sorted(counts.items()))
    print(f"{name}: opset {OPSET} ir {m.ir_version} | {io} | params {n_params} "
          f"| {size} bytes | loss {torch_loss:.4f} | ops: {ops}"
          + (f" | non-trainable initializers: {' '.join(buffers)}" if buffers else ""))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.dirname(os.path.abspath(__file__)),
                    help="output folder (default: the models/ folder of this script)")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    print(f"torch {torch.__version__}, onnx {onnx.__version__}, "
          f"python {sys.version.split()[0]}, opset {OPSET}")
    for fname, model, args, input_names in make_cases():
        path = os.path.join(a.out, fname)
        export(model, args, input_names, path)
        verify(fname, model, args, input_names, path)


if __name__ == "__main__":
    main()
