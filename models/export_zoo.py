#!/usr/bin/env python3
"""Export the model zoo: small, randomly initialized versions of architectures people train,
each through every PyTorch exporter that can export it, with PyTorch's f32 training runs.

Needs torch, onnx and numpy (and torchvision for resnet18 and mobilenet_v3_small, transformers
for the hf_* models) from PyPI:

    python -m venv venv && venv/bin/pip install torch torchvision transformers onnx onnxscript numpy
    venv/bin/python models/export_zoo.py            # writes models/zoo/
    venv/bin/python models/export_zoo.py --only gpt2,llama

Writes into models/zoo/ (committed, so building and testing ampc needs no Python):
  * <model>.<exporter>.onnx for each exporter that exported the model, exporters:
      - torchscript: torch.onnx.export(dynamo=False, opset_version=17,
                     training=TrainingMode.TRAINING, do_constant_folding=False)
      - torchscript_opset12: the same at opset 12, the oldest that has the cross-entropy loss
                     (Softmax on its 2-D coercion, BatchNormalization's five training-mode
                     outputs, LayerNorm and GroupNorm as the ops they are made of)
      - dynamo:      torch.onnx.export(dynamo=True, training=TrainingMode.TRAINING), every
                     other argument at its default (PyTorch's default exporter)
      - dynamo_raw:  the same with optimize=False and opset_version=20: the exporter's graph
                     before its own optimizer (CastLike, SplitToSequence/SequenceAt, shape
                     arithmetic), as older exporter versions wrote it
      - dynamo_opset23: the same at opset 23, where attention and RMSNorm are exported as
                     the Attention and RMSNormalization ops (transformers only)
      - dynamo_opset25: the same at opset 25, to which PyTorch converts its graph with ONNX's
                     version converter (llama and padded_decoder)
    Graph inputs are named by the model's forward() arguments; outputs are `loss` (a scalar)
    then `logits`. mlp_wide keeps its weights in an external `.onnx.data` file.
  * <model>.train_ref.npz: `batch.<input>` [4, ...] (step i trains on batch i % 4; image
    batches are int8 multiples of `batch.<input>.scale`, 1/16, to keep the files small) and the
    losses of 10 f32 PyTorch steps from the initial weights: `sgd.loss` (SGD, momentum 0.9,
    weight decay 1e-4) and `adamw.loss` (AdamW, weight decay 0.01), at the learning rates
    `sgd.lr` (0.05 unless LEARNING_RATES says) and `adamw.lr` (2e-3); `eval.<input>`, a
    held-out batch, and `<opt>.eval_loss`, the trained model's loss on it in eval mode
    (BatchNorm on its running statistics).
  * manifest.json: one entry per (model, exporter): the file, and whether the export is
    faithful to the training model (and `parameters`, the initializers that are PyTorch
    parameters: what to train, since float buffers are initializers too): its loss under
    onnx's reference evaluator (with BatchNormalization as PyTorch reads it: see the class)
    equals PyTorch's training-mode loss on batch 0 (relative 1e-4), every parameter is an
    initializer of the file under its PyTorch name, and BatchNormalization runs in training mode. An
    exporter that failed or wrote a different model is recorded with the reason, and the file
    of an unfaithful export is kept (an importer must still read it) but its training is not
    compared with PyTorch's. The default exporter's optimizer (optimize=True) writes inference
    graphs: it folds weights into transposed constants and merges equal initializers (two
    LayerNorm weights that both start at ones become one), so train from optimize=False.
    A faithful entry's `eval_loss` ({"sgd": .., "adamw": ..}) is `<opt>.eval_loss` from the
    state the file holds: the TorchScript exporter runs the model once in training mode while
    tracing, so its BatchNorm running statistics already include batch 0
    (`buffers_from_export` names them). The trained model ampc exports must give it, where
    `eval_f32_vs_f64` (the same in f64) says the comparison can tell an error from rounding.
"""

import argparse
import copy
import json
import os
import re
import sys
import warnings

import numpy as np
import onnx
import onnx.numpy_helper
import onnx.reference
import onnx.reference.op_run
import torch
import torch.nn as nn

N_STEPS = 10
N_BATCHES = 4
FAITHFUL_RTOL = 1e-4
HERE = os.path.dirname(os.path.abspath(__file__))


def sgd(params, lr=0.05):
    return torch.optim.SGD(params, lr=lr, momentum=0.9, weight_decay=1e-4, foreach=False)


def adamw(params, lr=2e-3):
    return torch.optim.AdamW(params, lr=lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01,
                             foreach=False)

from zoo_models import ZOO  # noqa: E402  (the models)


# Learning rates other than the defaults, where the default makes two correct runs part ways. A
# narrow ResNet under SGD is chaotic at 0.05. At 0.01 one ReLU input in layer4 sits 1.5e-5 from
# zero at step 7, so about 3% of equally valid f32 summation orders (PyTorch's own, with channels
# or samples permuted) flip it and part by 1e-3 by step 9. At 0.005 f32 is stable, but low
# precision is not: PyTorch's own autocast misses its f32 losses by up to 6.8% (bf16) and 3.7%
# (fp16), and two valid bf16 runs differ by 10%. At 0.001 every f32 order stays within 4e-7 of
# f64 and PyTorch's autocast within 1.7% of f32. AdamW moves every weight by about lr each step,
# so it crosses ReLU kinks far more often: at 2e-3 PyTorch's own f32 run flips a ReLU input's sign
# at step 3 and 169 of 200 permuted orders part; at 1e-4 none of 600 parts by more than 1e-6.
# The waveform net under SGD at 0.05 more than doubles its loss in the first steps, and PyTorch's
# own bf16 autocast misses its f32 losses by 10% there; at 0.01 by 1.4% (fp16: 0.2%).
DEFAULT_LR = {"sgd": 0.05, "adamw": 2e-3}
LEARNING_RATES = {"resnet18": {"sgd": 0.001, "adamw": 1e-4}, "audio_conv": {"sgd": 0.01}}

# ----------------------------------------------------------------------------- export


def export(model, args, names, path, exporter, external_data):
    kwargs = dict(input_names=names, output_names=["loss", "logits"],
                  training=torch.onnx.TrainingMode.TRAINING)
    if exporter.startswith("torchscript"):
        opset = 12 if exporter == "torchscript_opset12" else 17
        torch.onnx.export(model, args, path, dynamo=False, opset_version=opset,
                          do_constant_folding=False, **kwargs)
    elif exporter == "dynamo":
        torch.onnx.export(model, args, path, dynamo=True, external_data=external_data, **kwargs)
    else:
        opset = {"dynamo_opset23": 23, "dynamo_opset25": 25}.get(exporter, 20)
        torch.onnx.export(model, args, path, dynamo=True, optimize=False, opset_version=opset,
                          external_data=external_data, **kwargs)


class BatchNormalization(onnx.reference.op_run.OpRun):
    """BatchNormalization for onnx's reference evaluator as PyTorch and onnxruntime read every
    opset of it: in training mode (training_mode=1 from opset 14; before it, outputs past Y) Y is
    normalized with the batch's statistics. The evaluator's own opset 9-13 form normalizes with
    the updated running statistics and takes any node for training mode, so it cannot show a
    TorchScript export below opset 14 faithful. The running statistics are updated as in every
    opset (momentum times the old, plus the batch's); saved_mean and saved_var are the batch's."""

    op_domain = ""

    def _run(self, x, scale, bias, mean, var, epsilon=None, momentum=None, training_mode=None):
        node = self.onnx_node
        if any(a.name == "training_mode" for a in node.attribute):
            training = training_mode == 1
        else:
            training = len([o for o in node.output if o]) > 1
        training = training or recorded_training(node)
        stats = (mean, var)
        if training:
            axes = tuple(i for i in range(x.ndim) if i != 1)
            stats = (x.mean(axis=axes), x.var(axis=axes))
        shape = (1, -1) + (1,) * (x.ndim - 2)
        eps = 1e-5 if epsilon is None else epsilon
        y = ((x - stats[0].reshape(shape)) / np.sqrt(stats[1].reshape(shape) + eps)
             * scale.reshape(shape) + bias.reshape(shape))
        m = 0.9 if momentum is None else momentum
        running = (mean * m + stats[0] * (1 - m), var * m + stats[1] * (1 - m))
        outputs = (y,) + running + stats
        return tuple(o.astype(x.dtype) for o in outputs[:len(node.output)])


class SoftmaxCrossEntropyLoss(onnx.reference.op_run.OpRun):
    """SoftmaxCrossEntropyLoss for onnx's reference evaluator with the label smoothing PyTorch's
    dynamo exporter records in the node's FX node (the op has no attribute for it), computed as
    PyTorch's cross_entropy documents it: (1 - e) * the op's loss + e / C * the same reduction of
    -sum_c(weight_c * log_softmax_c), zero at ignored targets, a mean dividing by the summed
    weights of the kept targets' classes. Class-index targets only (what the zoo uses)."""

    op_domain = ""

    def _run(self, scores, targets, weights=None, ignore_index=None, reduction=None):
        reduction = (reduction or b"mean")
        reduction = reduction.decode() if isinstance(reduction, bytes) else reduction
        shifted = scores - scores.max(axis=1, keepdims=True)
        log_prob = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
        classes = scores.shape[1]
        w = np.ones(classes, scores.dtype) if weights is None else weights
        kept = np.ones(targets.shape, bool) if ignore_index is None else targets != ignore_index
        safe = np.where(kept, targets, 0)
        picked = np.take_along_axis(log_prob, np.expand_dims(safe, 1), axis=1).squeeze(1)
        nll = np.where(kept, -w[safe] * picked, 0)
        shape = (1, -1) + (1,) * (scores.ndim - 2)
        smooth = np.where(kept, -(log_prob * w.reshape(shape)).sum(axis=1), 0)
        if reduction == "mean":
            total = np.where(kept, w[safe], 0).sum()
            nll, smooth = nll.sum() / total, smooth.sum() / total
        elif reduction == "sum":
            nll, smooth = nll.sum(), smooth.sum()
        e = recorded_label_smoothing(self.onnx_node)
        loss = (1 - e) * nll + e / classes * smooth
        return (np.asarray(loss, dtype=scores.dtype), log_prob.astype(scores.dtype))[
            :len(self.onnx_node.output)]


def fx_call_args(node):
    """The arguments of the aten call PyTorch's dynamo exporter recorded in the node's FX node
    (metadata_props `pkg.torch.onnx.fx_node`), as strings; None without one."""
    for prop in node.metadata_props:
        if prop.key == "pkg.torch.onnx.fx_node":
            call = re.search(r"\]\(args = \(([^)]*)\)", prop.value)
            return [a.strip() for a in call.group(1).split(",")] if call else None
    return None


def recorded_label_smoothing(node):
    args = fx_call_args(node) or []
    return float(args[5]) if len(args) > 5 else 0.0


def recorded_training(node):
    """Whether PyTorch's dynamo exporter recorded that the batch norm `node` ran in training mode:
    the `training` argument of the aten call in the node's FX node (metadata_props), which the
    inference form the exporter writes for it loses (ampc reads it the same way)."""
    is_batch_norm = any(p.key == "pkg.torch.onnx.fx_node" and "batch_norm" in p.value
                        for p in node.metadata_props)
    return is_batch_norm and (fx_call_args(node) or [])[5:6] == ["True"]


def onnx_loss(path, feeds):
    model = onnx.load(path)
    evaluator = onnx.reference.ReferenceEvaluator(
        model, new_ops=[BatchNormalization, SoftmaxCrossEntropyLoss])
    return float(evaluator.run(["loss"], feeds)[0])


def parameter_aliases(model):
    """{id(parameter): every name it has} (a tied parameter has several)."""
    aliases = {}
    for name, p in model.named_parameters(remove_duplicate=False):
        aliases.setdefault(id(p), []).append(name)
    return aliases


def parameter_initializers(model, path):
    """The file's initializers that are PyTorch parameters (the rest are buffers: rotary
    tables, BatchNorm statistics), which ampc must train and no others."""
    graph = onnx.load(path, load_external_data=False).graph
    names = {n for aliases in parameter_aliases(model).values() for n in aliases}
    return sorted(i.name for i in graph.initializer if i.name in names)


def unfaithful_because(model, path):
    """What the export lost, where it can be told from the file: parameters that are not
    initializers (folded into constants), BatchNormalization in inference mode (and not recorded
    as training in its FX node), an embedding's padding_idx."""
    graph = onnx.load(path, load_external_data=False).graph
    initializers = {i.name for i in graph.initializer}
    lost = [names[0] for names in parameter_aliases(model).values()
            if not any(n in initializers for n in names)]
    reasons = []
    if lost:
        reasons.append(f"parameters {', '.join(lost[:4])}{' ...' if len(lost) > 4 else ''} "
                       "are not initializers of the file")
    opset = next(o.version for o in onnx.load(path, load_external_data=False).opset_import
                 if o.domain in ("", "ai.onnx"))
    inference_bn = [n.name for n in graph.node if n.op_type == "BatchNormalization" and not (
        any(a.name == "training_mode" and a.i == 1 for a in n.attribute)
        or (opset < 14 and len([o for o in n.output if o]) > 1) or recorded_training(n))]
    if inference_bn and any(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in model.modules()):
        reasons.append("BatchNormalization is exported in inference mode")
    if any(isinstance(m, nn.Embedding) and m.padding_idx is not None for m in model.modules()):
        # ONNX's Gather has no padding_idx; the dynamo exporter records the aten.embedding call
        # it came from in the node's metadata (onnx >= 1.16), which ampc reads.
        recorded = [n for n in graph.node if n.op_type == "Gather" and any(
            p.key == "pkg.torch.onnx.fx_node" and "aten.embedding" in p.value
            for p in n.metadata_props)]
        if not recorded:
            reasons.append("the embedding's padding_idx is not in the file (its row would train)")
    return "; ".join(reasons)


def train(model, batches, names, make_optimizer, lr, eval_batch=None):
    """The losses of N_STEPS steps, and the trained model's eval-mode loss on `eval_batch`."""
    model = copy.deepcopy(model).train()
    params = list(model.parameters())
    optimizer = make_optimizer(params, lr)
    losses = []
    for step in range(N_STEPS):
        optimizer.zero_grad(set_to_none=True)
        loss = model(*[batches[n][step % N_BATCHES] for n in names])[0]
        loss.backward()
        losses.append(loss.item())
        optimizer.step()
    if eval_batch is None:
        return losses, None
    with torch.no_grad():
        return losses, model.eval()(*[eval_batch[n] for n in names])[0].item()


def with_file_buffers(model, path):
    """The model with the buffers (BatchNorm running statistics) the file holds: the TorchScript
    exporter runs the model once in training mode while tracing, so its file's running
    statistics already include the example batch. Also returns the names of those that differ."""
    graph = onnx.load(path, load_external_data=False).graph
    stored = {i.name: i for i in graph.initializer}
    model = copy.deepcopy(model)
    changed = []
    for name, buffer in model.named_buffers():
        if name not in stored or not buffer.is_floating_point():
            continue
        value = torch.from_numpy(onnx.numpy_helper.to_array(stored[name]).copy())
        if value.shape == buffer.shape and not torch.equal(value, buffer):
            buffer.copy_(value)
            changed.append(name)
    return model, changed


def as_f64(arrays):
    return {n: b.double() if b.is_floating_point() else b for n, b in arrays.items()}


def eval_losses(model, batches, names, eval_batch, path):
    """{optimizer: the eval-mode loss on `eval_batch` after N_STEPS steps}, from the state the
    exported file holds; the relative gap of the same in f64 (Adam turns the rounding noise of
    gradients that are zero in exact arithmetic, such as a bias before BatchNorm, into full-size
    steps that training-mode losses do not see but eval-mode ones do); the buffers the file
    changed."""
    model, changed = with_file_buffers(model, path)
    model64 = copy.deepcopy(model).double()
    losses, spreads = {}, {}
    for key, make_optimizer in (("sgd", sgd), ("adamw", adamw)):
        lr = LEARNING_RATES.get(model_name(path), {}).get(key, DEFAULT_LR[key])
        losses[key] = train(model, batches, names, make_optimizer, lr, eval_batch)[1]
        loss64 = train(model64, as_f64(batches), names, make_optimizer, lr, as_f64(eval_batch))[1]
        spreads[key] = float(f"{abs(losses[key] - loss64) / abs(loss64):.3g}")
    return losses, spreads, changed


def model_name(path):
    return os.path.basename(path).split(".")[0]


def first_line(error):
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0] if text else ''}"[:300]


def add_eval_losses(entry, model, batches, names, eval_batch, path):
    losses, spreads, changed = eval_losses(model, batches, names, eval_batch, path)
    entry["eval_loss"] = losses
    entry["eval_f32_vs_f64"] = spreads
    if changed:
        entry["buffers_from_export"] = changed


def check(entry, model, path, feeds, want, training_data):
    """Fills `entry` for the exported file at `path`: whether it is faithful to `model` (its loss
    on the batch `feeds` is PyTorch's, `want`, and it lost nothing that can be told from the
    file), why not, its parameters and op types, and a faithful one's eval losses."""
    batches, names, eval_batch = training_data
    file = os.path.basename(path)
    try:
        got = onnx_loss(path, feeds)
        lost = unfaithful_because(model, path)
        same_loss = abs(got - want) <= FAITHFUL_RTOL * abs(want)
        faithful = same_loss and not lost
        reason = "" if same_loss else (f"the exported model's loss on batch 0 is {got:.6g} "
                                       f"under onnx's reference evaluator, PyTorch's "
                                       f"{want:.6g}")
        if lost:
            reason = f"{reason}; {lost}" if reason else lost
    except Exception as e:
        faithful, reason = False, f"onnx's reference evaluator fails: {first_line(e)}"
    entry.update(status="ok" if faithful else "unfaithful", reason=reason,
                 parameters=parameter_initializers(model, path))
    if faithful:
        add_eval_losses(entry, model, batches, names, eval_batch, path)
    ops = sorted({n.op_type for n in onnx.load(path, load_external_data=False).graph.node})
    entry["ops"] = ops
    size = os.path.getsize(path) + (os.path.getsize(path + ".data") if os.path.exists(path + ".data") else 0)
    print(f"  {file}: {entry['status']} {reason} ({size / 1024:.0f} KiB, {len(ops)} op types)")


def build(name, out_dir, refs_only=False, manifest_entries=(), recheck=False):
    factory, make_batch, exporters = ZOO[name]
    torch.manual_seed(0)
    model = factory().train()
    g = torch.Generator().manual_seed(1)
    raw = [make_batch(g) for _ in range(N_BATCHES)]
    names = list(raw[0])
    batches = {n: torch.stack([b[n] for b in raw]) for n in names}
    # A held-out batch, drawn after the training batches (which it leaves as they were).
    eval_batch = make_batch(g)
    args = tuple(batches[n][0] for n in names)
    with torch.no_grad():
        want = copy.deepcopy(model).train()(*args)[0].item()

    if recheck:
        # The files as they are: only what the manifest says of them is recomputed.
        entries = []
        for old in manifest_entries:
            if old["model"] != name:
                continue
            if old["status"] == "export failed":
                entries.append(old)
                continue
            entry = {k: old[k] for k in ("model", "exporter", "file", "inputs")}
            check(entry, model, os.path.join(out_dir, entry["file"]),
                  {n: batches[n][0].numpy() for n in names}, want, (batches, names, eval_batch))
            entry["f32_vs_f64"] = old["f32_vs_f64"]
            entries.append(entry)
        return entries

    entries = []
    for exporter in exporters if not refs_only else ():
        file = f"{name}.{exporter}.onnx"
        path = os.path.join(out_dir, file)
        for stale in (path, path + ".data"):
            if os.path.exists(stale):
                os.remove(stale)
        entry = {"model": name, "exporter": exporter, "file": file, "inputs": names}
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                export(copy.deepcopy(model), args, names, path, exporter, name == "mlp_wide")
        except Exception as e:  # an exporter that cannot export the model: recorded, not fatal
            entry.update(status="export failed", reason=first_line(e))
            entries.append(entry)
            print(f"  {file}: export failed: {entry['reason']}")
            continue
        check(entry, model, path, {n: batches[n][0].numpy() for n in names}, want,
              (batches, names, eval_batch))
        entries.append(entry)

    for entry in manifest_entries:
        if entry["model"] == name and entry["status"] == "ok":
            add_eval_losses(entry, model, batches, names, eval_batch,
                            os.path.join(out_dir, entry["file"]))
    ref = {}
    for prefix, arrays in (("batch", batches), ("eval", eval_batch)):
        for n in names:
            b = arrays[n].numpy()
            if (b.dtype == np.float32 and np.array_equal(np.round(b * 16), b * 16)
                    and np.abs(b).max() <= 1):
                # Grid pixels are stored as int8 multiples of `.scale`: a quarter of the bytes.
                ref[f"{prefix}.{n}"] = (b * 16).astype(np.int8)
                ref[f"{prefix}.{n}.scale"] = np.float32(1 / 16)
            else:
                ref[f"{prefix}.{n}"] = b
    # The same runs in f64 say how far two correct f32 runs may drift apart (`<opt>.f32_vs_f64`,
    # the largest relative gap of a step's loss): where that is not well below the test's bar,
    # the run is too chaotic to tell an error from rounding, and the test says so instead of
    # comparing (Adam on a ResNet: BatchNorm makes some gradients zero in exact arithmetic, and
    # Adam turns their rounding noise into full-size steps).
    model64 = copy.deepcopy(model).double()
    batches64 = {n: b.double() if b.is_floating_point() else b for n, b in batches.items()}
    spread = 0.0
    for key, make_optimizer in (("sgd", sgd), ("adamw", adamw)):
        lr = LEARNING_RATES.get(name, {}).get(key, DEFAULT_LR[key])
        ref[f"{key}.lr"] = np.float64(lr)
        losses, eval_loss = train(model, batches, names, make_optimizer, lr, eval_batch)
        losses = np.array(losses, dtype=np.float64)
        losses64 = np.array(train(model64, batches64, names, make_optimizer, lr)[0])
        ref[f"{key}.eval_loss"] = np.float64(eval_loss)
        spread_key = float(np.max(np.abs(losses - losses64) / np.abs(losses64)))
        print(f"  {key} at lr {lr}: f32 vs f64 {spread_key:.2e}")
        spread = max(spread, spread_key)
        ref[f"{key}.loss"] = losses
        ref[f"{key}.f32_vs_f64"] = np.float64(spread_key)
    for entry in entries:
        entry["f32_vs_f64"] = float(f"{spread:.3g}")
    np.savez_compressed(os.path.join(out_dir, f"{name}.train_ref.npz"), **ref)
    return entries


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=os.path.join(HERE, "zoo"))
    parser.add_argument("--only", default="", help="comma-separated model names")
    parser.add_argument("--refs-only", action="store_true",
                        help="rewrite only the <model>.train_ref.npz files, not the exports")
    parser.add_argument("--recheck", action="store_true",
                        help="recompute the manifest's entries (faithful or not, parameters, "
                             "eval losses) from the files as they are, exporting nothing")
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    os.makedirs(args.out, exist_ok=True)
    names = [n for n in args.only.split(",") if n] or list(ZOO)
    for n in names:
        if n not in ZOO:
            sys.exit(f"unknown model {n!r} (models: {', '.join(ZOO)})")
    manifest_path = os.path.join(args.out, "manifest.json")
    entries = []
    if os.path.exists(manifest_path) and (args.only or args.refs_only or args.recheck):
        with open(manifest_path) as f:
            entries = json.load(f)["entries"]
    old_entries = list(entries)
    if not args.refs_only:
        entries = [e for e in entries if e["model"] not in names]
    for n in names:
        print(n)
        if args.refs_only:
            build(n, args.out, refs_only=True, manifest_entries=entries)
        elif args.recheck:
            entries += build(n, args.out, manifest_entries=old_entries, recheck=True)
        else:
            entries += build(n, args.out)
    entries.sort(key=lambda e: (e["model"], e["exporter"]))
    with open(manifest_path, "w") as f:
        json.dump({"torch": torch.__version__, "onnx": onnx.__version__, "steps": N_STEPS,
                   "entries": entries}, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
