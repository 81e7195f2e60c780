#!/usr/bin/env python3
"""Export the ampc example training models (MLP, CNN, tiny GPT) to ONNX.

Needs: Python 3, PyTorch and onnx from PyPI (numpy comes with them), e.g.

    python -m venv venv && venv/bin/pip install torch onnx numpy
    venv/bin/python models/export_models.py              # writes models/*.onnx and fixtures
    venv/bin/python models/export_models.py --out DIR    # writes them into DIR
    venv/bin/python models/export_models.py --refs-only  # keeps the .onnx, writes the .npz

The outputs (mlp.onnx, cnn.onnx, tiny_gpt.onnx) are committed, so building and
testing ampc does not need PyTorch; rerun this script only to change them.

Every model is exported in TRAINING mode with its loss inside the graph:
  * graph outputs: `loss` (float32 scalar, mean cross-entropy) first, then `logits`;
  * parameters are graph initializers named after the PyTorch parameters
    (`fc1.weight`, ...), never graph inputs;
  * static shapes (no dynamic axes), opset 17, IR version 8, so libonnx 1.12
    can check them;
  * exporter: the TorchScript exporter (`torch.onnx.export(..., dynamo=False)`)
    with `training=TrainingMode.TRAINING` and `do_constant_folding=False`;
  * tiny_gpt is written in the nanoGPT idiom (`B, T, C = x.size()`, `.view(...)`,
    `self.bias[:, :, :T, :T]`, `torch.arange(0, t)`, ...) and is exported with the
    exporter's own shape inference off (see export()), so its graph keeps PyTorch's
    shape arithmetic (Shape -> Gather -> Unsqueeze -> Concat -> Reshape, Range,
    Slice of the mask buffer) on purpose: ampc has to fold it, as in users' exports.

After export the script verifies each file and fails loudly otherwise:
  * only ops from ALLOWED_OPS (the ops ampc implements) appear, default domain only;
  * onnx.checker.check_model(full_check=True) and strict shape inference pass,
    and every graph output gets a static shape (`loss` is a scalar);
  * the file is smaller than 2 MB;
  * the loss computed by onnx's reference evaluator matches PyTorch's.
It prints one summary line per model (ops used, parameter count, file size).

Then it writes two fixtures next to each model (torch single-threaded and
deterministic, so they are byte-for-byte reproducible):
  * `<name>.ref.npz` (see write_refs()): the graph inputs by ONNX input name,
    PyTorch's f32 training-mode outputs as `output.<onnx output name>` (checked
    against onnx's reference evaluator) and the gradients `grad.<initializer name>`;
  * `<name>.train_ref.npz` (see training_refs.py): 20 steps of SGD, SGD with
    gradient clipping and AdamW from the initial state on fixed batches (the mlp
    and cnn train on models/digits.npz, written once by make_digits.py).
`--refs-only` does not export: it loads the existing .onnx files, checks them (and
that their initializers equal the rebuilt PyTorch initial state) and writes only the
.npz files, so the committed models stay byte-identical.
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

import training_refs

OPSET = 17
IR_VERSION = 8  # the IR version that goes with opset 17 (ONNX 1.12)
MAX_BYTES = 2 * 1024 * 1024
MAX_REF_BYTES = 200 * 1024
# What each model trains on in its <name>.train_ref.npz (see training_refs.training_batches).
TRAIN_DATA = {"mlp.onnx": "digits", "cnn.onnx": "digits", "tiny_gpt.onnx": "tokens"}
REF_RTOL, REF_ATOL = 1e-4, 1e-5

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


class CausalSelfAttention(nn.Module):
    """nanoGPT-style causal self-attention, written the way PyTorch users write it.

    Shapes come from `x.size()` at run time, so the exporter records PyTorch's
    shape arithmetic (Shape -> Gather -> Unsqueeze -> Concat -> Reshape, a Slice of
    the mask buffer, ...) even though every input shape is static. This is on
    purpose: ampc has to fold such chains in real users' exports.
    """

    def __init__(self, d_model, n_head, block_size):
        super().__init__()
        assert d_model % n_head == 0
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)
        self.n_head = n_head
        self.n_embd = d_model
        # causal mask: float lower-triangular [1,1,block,block] buffer -> initializer
        # `blocks.N.attn.bias` (the nanoGPT name; it is not a parameter)
        self.register_buffer("bias", torch.tril(torch.ones(block_size, block_size))
                             .view(1, 1, block_size, block_size))

    def forward(self, x):
        B, T, C = x.size()  # batch, sequence length, embedding dim
        q, k, v = self.qkv(x).split(self.n_embd, dim=2)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)  # [B,H,T,D]
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))  # [B,H,T,T]
        att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf"))
        att = F.softmax(att, dim=-1)
        y = att @ v                                                    # [B,H,T,D]
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.proj(y)


class Block(nn.Module):
    """Pre-LayerNorm transformer block: x + attn(ln1(x)), then x + MLP(ln2(x))."""

    def __init__(self, d_model, n_head, block_size):
        super().__init__()
        self.ln1 = nn.LayerNorm(d_model)
        self.attn = CausalSelfAttention(d_model, n_head, block_size)
        self.ln2 = nn.LayerNorm(d_model)
        self.fc = nn.Linear(d_model, 4 * d_model)
        self.fc_out = nn.Linear(4 * d_model, d_model)

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        x = x + self.fc_out(F.gelu(self.fc(self.ln2(x))))     # exact (erf) GELU
        return x


class TinyGPT(nn.Module):
    """nanoGPT-style language model (exported with batch 4, sequence length 32)."""

    def __init__(self, block_size=32, vocab=64, d_model=32, n_head=2, n_layer=2):
        super().__init__()
        self.block_size = block_size
        self.tok_emb = nn.Embedding(vocab, d_model)
        self.pos_emb = nn.Embedding(block_size, d_model)
        self.blocks = nn.ModuleList(
            [Block(d_model, n_head, block_size) for _ in range(n_layer)])
        self.ln_f = nn.LayerNorm(d_model)
        self.lm_head = nn.Linear(d_model, vocab, bias=False)
        # weight tying: one parameter, exported once as the initializer `tok_emb.weight`
        self.tok_emb.weight = self.lm_head.weight
        self.apply(self._init_weights)

    @staticmethod
    def _init_weights(m):
        # GPT-2 style init; with the tied head this gives an initial loss near ln(64).
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, mean=0.0, std=0.02)
        if isinstance(m, nn.Linear) and m.bias is not None:
            nn.init.zeros_(m.bias)

    def forward(self, idx, targets):
        b, t = idx.size()
        assert t <= self.block_size
        pos = torch.arange(0, t, dtype=torch.long, device=idx.device)  # [t]
        x = self.tok_emb(idx) + self.pos_emb(pos)                      # [b,t,C]
        for blk in self.blocks:
            x = blk(x)
        x = self.ln_f(x)
        logits = self.lm_head(x)                                       # [b,t,V]
        loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))
        return loss, logits


# --------------------------------------------------------------------------- export

def make_cases():
    """(file name, model, example inputs, input names, keep shape ops); seed 0 before each model."""
    cases = []

    torch.manual_seed(0)
    m = MLP()
    g = torch.Generator().manual_seed(1)
    x = torch.rand(8, 64, generator=g) * 16.0   # digits pixels are 0..16
    y = torch.randint(0, 10, (8,), generator=g)
    cases.append(("mlp.onnx", m, (x, y), ["x", "label"], False))

    torch.manual_seed(0)
    m = CNN()
    g = torch.Generator().manual_seed(1)
    x = torch.rand(8, 1, 8, 8, generator=g) * 16.0
    y = torch.randint(0, 10, (8,), generator=g)
    cases.append(("cnn.onnx", m, (x, y), ["x", "label"], False))

    torch.manual_seed(0)
    m = TinyGPT()
    g = torch.Generator().manual_seed(1)
    tok = torch.randint(0, 64, (4, 32), generator=g)
    tgt = torch.randint(0, 64, (4, 32), generator=g)
    cases.append(("tiny_gpt.onnx", m, (tok, tgt), ["tokens", "targets"], True))
    return cases


def fail(msg):
    print("ERROR: " + msg, file=sys.stderr)
    sys.exit(1)


def export(model, args, input_names, path, keep_shape_ops=False):
    """Export `model` to `path`.

    keep_shape_ops=False: plain `torch.onnx.export(..., dynamo=False)`. With static input
    shapes the exporter's own ONNX shape inference (always on there, independent of
    do_constant_folding) turns every `x.size()` (Shape -> Gather) into a Constant.

    keep_shape_ops=True: the same export with that shape inference switched off
    (`onnx_shape_inference=False` of the TorchScript exporter's internal `_export`, which
    `torch.onnx.export` calls with it on). The graph then keeps PyTorch's shape arithmetic
    (Shape -> Gather -> Unsqueeze -> Concat -> Reshape, Range, Slice bounds from Shape, ...):
    node for node the graph that an export with dynamic_axes gives (checked with torch
    2.15.0), while the graph inputs and outputs keep their static shapes.
    """
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
        # Also known: tiny_gpt's `assert t <= block_size` and `math.sqrt(k.size(-1))` turn
        # traced sizes into Python values, which the trace keeps as constants (intended:
        # the shapes are static).
        warnings.filterwarnings("ignore", category=torch.jit.TracerWarning)
        options = dict(
            opset_version=OPSET,
            training=torch.onnx.TrainingMode.TRAINING,
            do_constant_folding=False,
            export_params=True,
            keep_initializers_as_inputs=False,
            input_names=input_names,
            output_names=["loss", "logits"],
        )
        if keep_shape_ops:
            from torch.onnx._internal.torchscript_exporter import utils as ts_utils
            ts_utils._export(model, args, path, onnx_shape_inference=False, **options)
        else:
            torch.onnx.export(model, args, path, dynamo=False, **options)
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


# --------------------------------------------------------------------------- reference fixtures

def write_refs(name, model, args, input_names, onnx_path, npz_path):
    """Write `npz_path`: the graph inputs, PyTorch's f32 outputs and gradients for them.

    Keys: each graph input by its ONNX name (dtype and shape exactly as the graph
    input declares), then `output.<name>` for each graph output, in graph order:
    PyTorch's training-mode forward (BatchNorm on batch statistics) of the initial
    state, the same forward the graph was exported from; then `grad.<initializer>`,
    d loss / d parameter of that forward for every parameter (not buffers), in
    initializer order. Fails if onnx's reference evaluator on the .onnx file does not
    reproduce every output (rtol 1e-4, atol 1e-5).
    Returns {output name: max |reference - torch|}.
    """
    m = onnx.load(onnx_path)
    # A live Dropout would make the outputs random: none may be active.
    if any(n.op_type == "Dropout" for n in m.graph.node) or any(
            isinstance(mod, nn.modules.dropout._DropoutNd) and mod.p > 0
            for mod in model.modules()):
        fail(f"{name}: has Dropout; a reference of a random forward would not be reproducible")

    arrays = {}
    for vi, arg in zip(m.graph.input, args):
        want = onnx.helper.tensor_dtype_to_np_dtype(vi.type.tensor_type.elem_type)
        arr = arg.numpy().astype(want)
        if list(arr.shape) != dims(vi):
            fail(f"{name}: input {vi.name} has shape {list(arr.shape)}, graph says {dims(vi)}")
        arrays[vi.name] = arr
    if list(arrays) != input_names:
        fail(f"{name}: graph inputs {list(arrays)}, want {input_names}")

    out_names = [o.name for o in m.graph.output]
    with torch.no_grad():
        torch_outs = copy.deepcopy(model).train()(*args)
    if len(torch_outs) != len(out_names):
        # e.g. BatchNorm running statistics as graph outputs: no PyTorch value to record
        fail(f"{name}: graph outputs {out_names}, but PyTorch returns {len(torch_outs)} values")
    for oname, t in zip(out_names, torch_outs):
        arrays["output." + oname] = t.numpy().astype(np.float32)

    feeds = {k: arrays[k] for k in input_names}
    ref_outs = onnx.reference.ReferenceEvaluator(m).run(None, feeds)
    max_diff = {}
    for oname, ref in zip(out_names, ref_outs):
        want = arrays["output." + oname]
        ref = np.asarray(ref)
        if ref.shape != want.shape or ref.dtype != want.dtype:
            fail(f"{name}: output {oname}: reference gives {ref.dtype}{list(ref.shape)}, "
                 f"torch {want.dtype}{list(want.shape)}")
        if not np.all(np.isfinite(want)):
            fail(f"{name}: torch output {oname} is not finite")
        max_diff[oname] = float(np.max(np.abs(ref.astype(np.float64) - want)))
        if not np.allclose(ref, want, rtol=REF_RTOL, atol=REF_ATOL):
            fail(f"{name}: output {oname}: onnx reference differs from torch "
                 f"(max |diff| {max_diff[oname]:.3g})")

    grads, grad_spread = training_refs.reference_grads(model, args, m)
    arrays.update(grads)

    # Uncompressed; np.savez dates every zip entry 1980-01-01 (zipfile's default),
    # so the same arrays give the same bytes.
    np.savez(npz_path, **arrays)
    size = os.path.getsize(npz_path)
    if size >= MAX_REF_BYTES:
        fail(f"{npz_path}: {size} bytes >= 200 KB")
    with np.load(npz_path) as back:  # round trip: same keys, dtypes, values
        if list(back.keys()) != list(arrays) or any(
                back[k].dtype != v.dtype or not np.array_equal(back[k], v)
                for k, v in arrays.items()):
            fail(f"{npz_path}: does not read back as written")
    keys = ", ".join(f"{k}:{v.dtype}{list(v.shape)}" for k, v in arrays.items()
                     if not k.startswith("grad."))
    diffs = ", ".join(f"{k} {v:.2e}" for k, v in max_diff.items())
    print(f"{os.path.basename(npz_path)}: {keys}, {len(grads)} grad.* | {size} bytes | "
          f"max |onnx reference - torch|: {diffs} | "
          f"grads: largest |f32 - f64| / |f64| {grad_spread:.1e}")
    return max_diff


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.dirname(os.path.abspath(__file__)),
                    help="output folder (default: the models/ folder of this script)")
    ap.add_argument("--refs-only", action="store_true",
                    help="do not export: check the existing .onnx files in the output folder "
                         "against the rebuilt PyTorch models and write only the .ref.npz and "
                         ".train_ref.npz files")
    ap.add_argument("--digits", default=os.path.join(
                        os.path.dirname(os.path.abspath(__file__)), "digits.npz"),
                    help="the digits data set the mlp and cnn train on in .train_ref.npz "
                         "(default: models/digits.npz, written by make_digits.py)")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    # Reproducible fixtures: one thread (a fixed reduction order) and no
    # nondeterministic kernels.
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    print(f"torch {torch.__version__}, onnx {onnx.__version__}, numpy {np.__version__}, "
          f"python {sys.version.split()[0]}, opset {OPSET}")
    for fname, model, args, input_names, keep_shape_ops in make_cases():
        path = os.path.join(a.out, fname)
        if a.refs_only:
            if not os.path.exists(path):
                fail(f"{path}: not found (--refs-only uses the existing .onnx files)")
        else:
            export(model, args, input_names, path, keep_shape_ops)
        # Also checks that the initializers equal the PyTorch initial state, so the
        # reference below is of the same weights as the file.
        verify(fname, model, args, input_names, path)
        write_refs(fname, model, args, input_names, path,
                   path[:-len(".onnx")] + ".ref.npz")
        training_refs.write_train_refs(fname, model, path,
                                       path[:-len(".onnx")] + ".train_ref.npz",
                                       TRAIN_DATA[fname], a.digits)


if __name__ == "__main__":
    main()
