"""Training fixtures for the models: PyTorch's gradients and short f32 training runs.

Used by export_models.py (which owns the models and the forward fixtures):

  * reference_grads(): d loss / d parameter at the reference point of `<model>.ref.npz`,
    keyed `grad.<initializer name>`;
  * write_train_refs(): `<model>.train_ref.npz`, 20 optimizer steps from the initial state
    (the .onnx initializers) on 4 fixed batches, for SGD with momentum, the same with
    gradient-norm clipping, and AdamW: the loss and gradient norm at every step and the
    weights (and the cnn's BatchNorm running statistics) after the last step.

Everything here is PyTorch in f32 on the CPU; the caller makes torch deterministic and
single-threaded so the files are byte-for-byte reproducible. Every trajectory is also run
in f64 from the same start, and the f32-vs-f64 spread is printed: it says how far apart two
correct f32 implementations can be expected to drift, i.e. what tolerance a C++ comparison
needs. models/README.md describes the keys, the optimizers' exact update rules and the data.
"""

import copy
import math
import os
import sys

import numpy as np
import onnx
import onnx.numpy_helper
import onnx.reference
import torch
import torch.nn as nn

N_STEPS = 20
N_BATCHES = 4  # step i trains on batch i % N_BATCHES
MAX_TRAIN_REF_BYTES = 1024 * 1024
CHECK_RTOL, CHECK_ATOL = 1e-4, 1e-5
TOKEN_BATCH_SEED = 2  # tiny_gpt's training batches (the forward fixture uses seed 1)


def sgd(params):
    return torch.optim.SGD(params, lr=0.05, momentum=0.9, dampening=0, nesterov=False,
                           weight_decay=1e-4, foreach=False)


def adamw(params):
    return torch.optim.AdamW(params, lr=2e-3, betas=(0.9, 0.999), eps=1e-8,
                             weight_decay=0.01, foreach=False)


# name -> (optimizer over all parameters, clip_grad_norm_ max_norm or None)
TRAJECTORIES = {
    "sgd": (sgd, None),
    "sgd_clip": (sgd, 0.5),
    "adamw": (adamw, None),
}


def fail(msg):
    print("ERROR: " + msg, file=sys.stderr)
    sys.exit(1)


def parameter_names(model, onnx_model):
    """The initializers that are PyTorch parameters, in initializer order.

    A tied parameter (tiny_gpt's LM head = token embedding) is one parameter under the
    first name PyTorch registers it with, which is the name of its one initializer.
    """
    params = dict(model.named_parameters())
    names = [i.name for i in onnx_model.graph.initializer if i.name in params]
    if sorted(names) != sorted(params):
        fail(f"parameters {sorted(set(params) - set(names))} are not initializers")
    return names


def running_stat_names(model, onnx_model):
    """The initializers that training-mode forwards update: BatchNorm running mean/var."""
    stats = {n for mod_name, mod in model.named_modules()
             if isinstance(mod, nn.modules.batchnorm._BatchNorm)
             for n in (f"{mod_name}.running_mean", f"{mod_name}.running_var")}
    return [i.name for i in onnx_model.graph.initializer if i.name in stats]


def _to_f64(model, args):
    return (copy.deepcopy(model).double().train(),
            [a.double() if a.is_floating_point() else a for a in args])


def _grads(model, args, names):
    model.zero_grad(set_to_none=True)
    model(*args)[0].backward()
    params = dict(model.named_parameters())
    if any(params[n].grad is None for n in names):
        fail(f"no gradient for {[n for n in names if params[n].grad is None]}")
    return {n: params[n].grad.detach().numpy().copy() for n in names}


def reference_grads(model, args, onnx_model):
    """`grad.<initializer name>` (f32) of the training-mode loss at `args`, initial state.

    Returns (arrays, largest relative L2 distance of a gradient to its f64 value).
    """
    names = parameter_names(model, onnx_model)
    g32 = _grads(copy.deepcopy(model).train(), args, names)
    g64 = _grads(*_to_f64(model, args), names)
    rel = max(np.linalg.norm(g32[n] - g64[n]) / max(np.linalg.norm(g64[n]), 1e-30)
              for n in names)
    return {"grad." + n: g32[n].astype(np.float32) for n in names}, float(rel)


# --------------------------------------------------------------------------- batches

def _static_shape(vi):
    return [d.dim_value for d in vi.type.tensor_type.shape.dim]


def training_batches(onnx_model, data, digits_path):
    """{graph input name: array [N_BATCHES, *input shape]} with the graph input's dtype.

    data="digits": the first N_BATCHES * B digits in order (B = the static batch size),
    x = images / 16 as float32 reshaped to the input's shape, labels int64.
    data="tokens": seeded uniform token ids and targets in [0, vocab).
    """
    inputs = list(onnx_model.graph.input)
    shapes = {vi.name: _static_shape(vi) for vi in inputs}
    dtypes = {vi.name: onnx.helper.tensor_dtype_to_np_dtype(vi.type.tensor_type.elem_type)
              for vi in inputs}
    if data == "digits":
        (x_name, x_shape), (y_name, y_shape) = shapes.items()
        n = N_BATCHES * x_shape[0]
        if not os.path.exists(digits_path):
            fail(f"{digits_path}: not found (write it with models/make_digits.py)")
        with np.load(digits_path) as d:
            images, labels = d["images"], d["labels"]
        if images.dtype != np.uint8 or images.shape[1:] != (8, 8) or labels.dtype != np.int64:
            fail(f"{digits_path}: want images uint8 [N,8,8] and labels int64 [N]")
        batches = {x_name: (images[:n].astype(np.float32) / 16.0).reshape([N_BATCHES] + x_shape),
                   y_name: labels[:n].reshape([N_BATCHES] + y_shape)}
    elif data == "tokens":
        vocab = onnx.numpy_helper.to_array(
            next(i for i in onnx_model.graph.initializer if i.name == "tok_emb.weight")).shape[0]
        g = torch.Generator().manual_seed(TOKEN_BATCH_SEED)
        batches = {name: torch.randint(0, vocab, [N_BATCHES] + shape, generator=g).numpy()
                   for name, shape in shapes.items()}
    else:
        fail(f"unknown training data {data!r}")
    for name, arr in batches.items():
        if arr.dtype != dtypes[name]:
            fail(f"training batch {name} is {arr.dtype}, graph input is {dtypes[name]}")
    return batches


# --------------------------------------------------------------------------- trajectories

def train(model, batches, input_names, make_optimizer, max_norm, float_dtype):
    """Trains `model` in place for N_STEPS; returns (losses, grad norms), float64 lists."""
    model.train()
    params = list(model.parameters())  # tied weights appear once
    optimizer = make_optimizer(params)
    losses, norms = [], []
    for step in range(N_STEPS):
        feeds = []
        for name in input_names:
            t = torch.from_numpy(batches[name][step % N_BATCHES])
            feeds.append(t.to(float_dtype) if t.is_floating_point() else t)
        optimizer.zero_grad(set_to_none=True)
        loss = model(*feeds)[0]
        loss.backward()
        losses.append(loss.item())
        norms.append(math.sqrt(sum(p.grad.double().square().sum().item() for p in params)))
        if max_norm is not None:
            torch.nn.utils.clip_grad_norm_(params, max_norm=max_norm)
        optimizer.step()
    return losses, norms


def _onnx_loss(onnx_model, values, feeds):
    """The loss of `onnx_model` with initializers replaced by `values`, on `feeds`."""
    m = copy.deepcopy(onnx_model)
    for init in m.graph.initializer:
        if init.name in values:
            init.CopyFrom(onnx.numpy_helper.from_array(values[init.name], init.name))
    return float(onnx.reference.ReferenceEvaluator(m).run(["loss"], feeds)[0])


def _rel(a, b):
    return float(np.linalg.norm(np.asarray(a, np.float64) - b) / max(np.linalg.norm(b), 1e-30))


def write_train_refs(name, model, onnx_path, npz_path, data, digits_path):
    """Writes `npz_path` (see models/README.md) and checks it against onnx's reference.

    Checks: the step-0 loss equals the onnx reference evaluator's on batch 0 with the
    file's initializers, and the final weights, written into the initializers, give the
    loss PyTorch gives for them on batch 0 (so every `final.*` key is the right one).
    """
    onnx_model = onnx.load(onnx_path)
    input_names = [vi.name for vi in onnx_model.graph.input]
    params = parameter_names(model, onnx_model)
    state_names = params + running_stat_names(model, onnx_model)
    batches = training_batches(onnx_model, data, digits_path)
    arrays = {"batch." + k: v for k, v in batches.items()}
    batch0 = {k: v[0] for k, v in batches.items()}
    summary = []
    for traj, (make_optimizer, max_norm) in TRAJECTORIES.items():
        m32 = copy.deepcopy(model)
        losses, norms = train(m32, batches, input_names, make_optimizer, max_norm, torch.float32)
        m64 = copy.deepcopy(model).double()
        losses64, _ = train(m64, batches, input_names, make_optimizer, max_norm, torch.float64)
        final = {n: m32.state_dict()[n].numpy().copy() for n in state_names}
        final64 = {n: m64.state_dict()[n].numpy() for n in state_names}
        if not all(np.all(np.isfinite(v)) for v in final.values()) or not np.all(
                np.isfinite(losses)):
            fail(f"{name}: {traj} diverged")
        arrays[f"{traj}.loss"] = np.array(losses, np.float32)
        arrays[f"{traj}.grad_norm"] = np.array(norms, np.float32)
        for n in state_names:
            arrays[f"{traj}.final.{n}"] = final[n].astype(np.float32)

        onnx_first = _onnx_loss(onnx_model, {}, batch0)
        with torch.no_grad():
            torch_last = copy.deepcopy(m32).train()(
                *[torch.from_numpy(batch0[k]) for k in input_names])[0].item()
        onnx_last = _onnx_loss(onnx_model, final, batch0)
        for what, got, want in [("step-0 loss", onnx_first, losses[0]),
                                ("loss of the final weights", onnx_last, torch_last)]:
            if not np.isclose(got, want, rtol=CHECK_RTOL, atol=CHECK_ATOL):
                fail(f"{name}: {traj}: {what}: onnx reference {got} != torch {want}")
        spread = max(_rel(final[n], final64[n]) for n in params)
        loss_spread = max(abs(a - b) / abs(b) for a, b in zip(losses, losses64))
        summary.append(f"{traj} loss {losses[0]:.4f} -> {losses[-1]:.4f} "
                       f"(|g| {norms[0]:.3g} -> {norms[-1]:.3g}; vs f64: loss {loss_spread:.1e}, "
                       f"weights {spread:.1e})")

    np.savez(npz_path, **arrays)
    size = os.path.getsize(npz_path)
    if size >= MAX_TRAIN_REF_BYTES:
        fail(f"{npz_path}: {size} bytes >= 1 MB")
    with np.load(npz_path) as back:
        if list(back.keys()) != list(arrays) or any(
                back[k].dtype != v.dtype or not np.array_equal(back[k], v)
                for k, v in arrays.items()):
            fail(f"{npz_path}: does not read back as written")
    print(f"{os.path.basename(npz_path)}: {len(arrays)} arrays | {size} bytes | "
          + "; ".join(summary))
