#!/usr/bin/env python3
"""torchvision's classification, segmentation and video models through PyTorch's exporters at
several opsets, with ampc's loss and one-step gradients against PyTorch's in f64.

Each model is built by torchvision with 5 classes and random weights (dropout and stochastic
depth set to 0), wrapped with a cross-entropy loss, and exported in training mode (batch norms
use the batch's statistics). For each export:
  loss: `ampc train`'s first-step loss against the module's loss in f64;
  grad: the gradient of every parameter, read from one SGD step of `ampc train` with lr 2^20
        (exact in binary, so (before - after) / lr is the gradient to f32's precision), against
        the f64 gradient; the largest error of a parameter, relative to the parameter's largest
        gradient (or 1e-3 of the model's largest, if smaller).
Beside each, PyTorch's own f32 error by the same measure: a model whose batch norms see few
values per channel, or whose ReLUs see values within rounding of 0, is ill-conditioned, and
then PyTorch's f32 run is as far from f64 as ampc's. A gradient error more than 10 times
PyTorch's (and above 1e-5) is marked.

Needs torch, torchvision, onnx, onnxscript and numpy from PyPI:

  venv/bin/python tools/torchvision_gradient_sweep.py [--ampc build/ampc] [--only resnet18,vit]
      [--exporters torchscript:17,dynamo:18] [--batch 4] [--size 64]
"""
import argparse
import copy
import json
import os
import re
import subprocess
import sys
import tempfile
import warnings

import numpy as np
import torch
import torch.nn as nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hf_training_sweep import quiet  # noqa: E402

CLASSES = 5
IMAGE, SEGMENTATION, VIDEO = "image", "segmentation", "video"
FRAMES = 4
LR = 2.0 ** 20


def models(M):
    """name -> (model factory, smallest image side it takes, kind: "image", "segmentation" (a
    class per pixel) or "video" (clips of FRAMES frames))."""
    from torchvision.models.convnext import CNBlockConfig
    from torchvision.models.swin_transformer import SwinTransformer
    from torchvision.models.video.swin_transformer import SwinTransformer3d
    from torchvision.models.vision_transformer import VisionTransformer
    seg, video = M.segmentation, M.video
    return {
        "resnet18": (lambda: M.resnet18(num_classes=CLASSES), 32, IMAGE),
        "resnet50": (lambda: M.resnet50(num_classes=CLASSES), 32, IMAGE),
        "resnext50": (lambda: M.resnext50_32x4d(num_classes=CLASSES), 32, IMAGE),
        "mobilenet_v2": (lambda: M.mobilenet_v2(num_classes=CLASSES), 32, IMAGE),
        "mobilenet_v3_large": (lambda: M.mobilenet_v3_large(num_classes=CLASSES), 32, IMAGE),
        "efficientnet_b0": (lambda: M.efficientnet_b0(num_classes=CLASSES), 32, IMAGE),
        "efficientnet_v2_s": (lambda: M.efficientnet_v2_s(num_classes=CLASSES), 32, IMAGE),
        "densenet121": (lambda: M.densenet121(num_classes=CLASSES), 32, IMAGE),
        "squeezenet": (lambda: M.squeezenet1_1(num_classes=CLASSES), 64, IMAGE),
        "shufflenet_v2": (lambda: M.shufflenet_v2_x0_5(num_classes=CLASSES), 32, IMAGE),
        "googlenet": (lambda: M.googlenet(num_classes=CLASSES, aux_logits=False,
                                          init_weights=True), 64, IMAGE),
        "inception_v3": (lambda: M.inception_v3(num_classes=CLASSES, aux_logits=False,
                                                init_weights=True), 80, IMAGE),
        "mnasnet": (lambda: M.mnasnet0_5(num_classes=CLASSES), 32, IMAGE),
        "regnet_y": (lambda: M.regnet_y_400mf(num_classes=CLASSES), 32, IMAGE),
        "alexnet": (lambda: M.alexnet(num_classes=CLASSES), 64, IMAGE),
        "vgg11_bn": (lambda: M.vgg11_bn(num_classes=CLASSES), 32, IMAGE),
        "vit": (lambda: VisionTransformer(image_size=32, patch_size=8, num_layers=2, num_heads=2,
                                          hidden_dim=32, mlp_dim=64, num_classes=CLASSES),
                32, False),
        "swin": (lambda: SwinTransformer(patch_size=[2, 2], embed_dim=16, depths=[1, 1],
                                         num_heads=[2, 2], window_size=[4, 4],
                                         num_classes=CLASSES), 32, IMAGE),
        "convnext": (lambda: M.ConvNeXt([CNBlockConfig(16, 32, 1), CNBlockConfig(32, None, 1)],
                                        num_classes=CLASSES), 32, IMAGE),
        "maxvit": (lambda: M.MaxVit(input_size=(32, 32), stem_channels=8, partition_size=2,
                                    block_channels=[16, 32], block_layers=[1, 1], head_dim=8,
                                    stochastic_depth_prob=0, num_classes=CLASSES), 32, IMAGE),
        "fcn_resnet50": (lambda: seg.fcn_resnet50(num_classes=CLASSES, weights=None,
                                                  weights_backbone=None), 32, SEGMENTATION),
        "deeplabv3_mobilenet": (lambda: seg.deeplabv3_mobilenet_v3_large(
            num_classes=CLASSES, weights=None, weights_backbone=None), 32, SEGMENTATION),
        "lraspp_mobilenet": (lambda: seg.lraspp_mobilenet_v3_large(
            num_classes=CLASSES, weights=None, weights_backbone=None), 32, SEGMENTATION),
        "r3d_18": (lambda: video.r3d_18(num_classes=CLASSES), 32, VIDEO),
        "mc3_18": (lambda: video.mc3_18(num_classes=CLASSES), 32, VIDEO),
        "r2plus1d_18": (lambda: video.r2plus1d_18(num_classes=CLASSES), 32, VIDEO),
        "swin3d": (lambda: SwinTransformer3d(patch_size=[2, 2, 2], embed_dim=16, depths=[1, 1],
                                             num_heads=[2, 2], window_size=[2, 4, 4],
                                             stochastic_depth_prob=0, num_classes=CLASSES),
                   32, VIDEO),
    }


# The models whose input side is fixed by their configuration.
FIXED_SIZE = ("vit", "maxvit")


class WithLoss(nn.Module):
    def __init__(self, model):
        super().__init__()
        self.m = model
        self.loss = nn.CrossEntropyLoss()

    def forward(self, x, y):
        out = self.m(x)
        if isinstance(out, dict):  # segmentation models
            out = out["out"]
        return self.loss(out, y)


def without_dropout(model):
    from torchvision.ops import StochasticDepth
    for module in model.modules():
        if isinstance(module, (nn.Dropout, StochasticDepth)):
            module.p = 0.0
    return model


EXPORTERS = ("torchscript", "torchscript_fold", "dynamo", "dynamo_opt")


def export(module, args, path, exporter):
    kind, opset = exporter.split(":")
    kwargs = dict(input_names=["x", "y"], output_names=["loss"], opset_version=int(opset),
                  training=torch.onnx.TrainingMode.TRAINING)
    with warnings.catch_warnings(), quiet():
        warnings.simplefilter("ignore")
        if kind in ("torchscript", "torchscript_fold"):  # _fold: torch.onnx's default
            torch.onnx.export(module, args, path, dynamo=False,
                              do_constant_folding=kind == "torchscript_fold", **kwargs)
        else:  # dynamo_opt: with the exporter's graph optimizer, as torch.onnx.export defaults
            torch.onnx.export(module, args, path, dynamo=True, optimize=kind == "dynamo_opt",
                              **kwargs)


def initializers(path):
    import onnx
    from onnx import numpy_helper
    return {t.name: numpy_helper.to_array(t).astype(np.float64)
            for t in onnx.load(path).graph.initializer}


# What a low-precision run is compared with, and the largest loss scale it runs at: fp16
# gradients of these small losses would underflow unscaled; a static scale keeps both sides'
# steps alike.
AMP = {"fp16": (torch.float16, 2.0 ** 10), "bf16": (torch.bfloat16, 1.0)}


def torch_run(module, x, y, precision, scale):
    """PyTorch's loss, gradients and loss scale, in f32 or under CPU autocast at `precision`
    with the largest power-of-two scale up to `scale` at which every gradient is finite."""
    dtype = AMP[precision][0] if precision != "fp32" else None
    while True:
        model = copy.deepcopy(module)
        if precision == "fp32":
            loss = model(x, y)
        else:
            with torch.autocast("cpu", dtype=dtype):
                loss = model(x, y)
        (loss.float() * scale).backward()
        grads = {n: (p.grad.numpy() / scale if p.grad is not None else np.zeros(p.shape))
                 for n, p in model.named_parameters()}
        if scale <= 1 or all(np.isfinite(g).all() for g in grads.values()):
            return loss.item(), grads, scale
        scale /= 2


def freeze_flags(module):
    """`ampc compile --freeze` naming the parameters PyTorch does not train (requires_grad
    False: Marian's sinusoidal positions), which no exporter records; [] when there are none."""
    frozen = [name for name, p in module.named_parameters() if not p.requires_grad]
    if not frozen:
        return []
    return ["--freeze", "^(" + "|".join(re.escape(name) for name in frozen) + ")$"]


def step_of(name, value, before, after):
    """The step one SGD step took on the parameter `name` (f64 `value` before it), read in the
    parameter's layout from the exported file `before` and the trained file `after`: under its
    name (a copy the importer made of a parameter the exporter merged with another is in `after`
    only), or from the transposed copy an exporter's constant folding wrote in its place (a
    Linear's weight). Also whether it was that transposed copy; (None, False) when neither."""
    if name in after:
        return before.get(name, value) - after[name], False
    if value.ndim == 2:
        for other, data in before.items():
            if other in after and data.shape == value.T.shape and np.array_equal(data, value.T):
                return (data - after[other]).T, True
    return None, False


def check(ampc, module, x, y, exporter, work, precision="fp32"):
    """One line: ampc's loss and gradient errors against f64, beside PyTorch's at `precision`
    (f32, or CPU autocast at the same static loss scale, named when below AMP's: a model whose
    gradients overflow fp16 at 2^10, in PyTorch's step or in ampc's, is compared at the largest
    power of two at which neither does)."""
    path = os.path.join(work, "model.onnx")
    try:
        export(copy.deepcopy(module), (x, y), path, exporter)
    except Exception as e:  # an exporter that cannot export it: reported
        return f"export failed: {str(e).strip().splitlines()[0][:100]}"
    f64 = copy.deepcopy(module).double()
    loss64 = f64(*(t.double() if t.is_floating_point() else t for t in (x, y)))
    loss64.backward()
    # A parameter the loss does not read (a mask token left unused) has no gradient.
    grads = {n: p.grad.numpy() for n, p in f64.named_parameters() if p.grad is not None}
    data, train = os.path.join(work, "data.npz"), os.path.join(work, "train.onnx")
    trained, log = os.path.join(work, "trained.onnx"), os.path.join(work, "log.jsonl")
    # TorchScript drops an input the loss does not read (an unsupervised model's labels).
    import onnx
    inputs = {i.name for i in onnx.load(path, load_external_data=False).graph.input}
    np.savez(data, **{k: v.numpy()[None] for k, v in (("x", x), ("y", y)) if k in inputs})
    loss_scale = AMP[precision][1] if precision != "fp32" else 1.0
    while True:
        try:
            loss32, grads32, loss_scale = torch_run(module, x, y, precision, loss_scale)
        except RuntimeError as e:  # an op CPU autocast cannot run (bilinear, an fp16 LSTM)
            return f"PyTorch cannot run it at {precision}: {str(e).strip().splitlines()[0][:100]}"
        compile_flags = freeze_flags(module)
        if precision != "fp32":
            compile_flags += ["--precision", precision, "--loss-scale", f"static:{loss_scale:g}"]
        for command in (["compile", path, "-o", train, "--optimizer", "sgd", "--lr", str(LR)] +
                        compile_flags,
                        ["train", train, "--data", data, "--steps", "1", "--export", trained,
                         "--log", log]):
            done = subprocess.run([ampc] + command, capture_output=True, text=True)
            if done.returncode != 0:
                return f"{command[0]} failed: {done.stderr.strip().splitlines()[-1][:150]}"
        with open(log) as f:
            step = next(json.loads(line) for line in f if '"loss"' in line)
        if not step.get("found_inf"):
            break
        if loss_scale <= 1:
            return f"the step overflowed at loss scale {loss_scale:g} and was skipped"
        loss_scale /= 2
    loss = step["loss"]
    before, after = initializers(path), initializers(trained)
    largest = max(np.abs(g).max() for g in grads.values())
    worst, worst_name, worst32, missing, transposed = 0.0, "", 0.0, [], 0
    values = {n: p.detach().double().numpy() for n, p in module.named_parameters()}
    for name, g in grads.items():
        step, was_transposed = step_of(name, values[name], before, after)
        if step is None:
            missing.append(name)
            continue
        scale = max(np.abs(g).max(), 1e-3 * largest)
        error = np.abs(step / LR - g).max() / scale
        if not np.isfinite(error):  # a NaN gradient
            error = np.inf
        if error > worst:
            worst, worst_name = error, name
        worst32 = max(worst32, np.abs(grads32[name] - g).max() / scale)
        transposed += was_transposed
    exact = loss64.item()
    who = "torch f32" if precision == "fp32" else f"torch amp {precision}"
    line = (f"loss {abs(loss - exact) / abs(exact):.1e} ({who} "
            f"{abs(loss32 - exact) / abs(exact):.1e})  grad {worst:.1e} ({who} "
            f"{worst32:.1e}) at {worst_name}")
    if precision != "fp32" and loss_scale != AMP[precision][1]:
        line += f"  (loss scale {loss_scale:g})"
    if transposed:
        line += f"  ({transposed} read as the exporter's folded transpose)"
    if missing:
        line += f"  not in the file by name (tied to another?): {', '.join(missing[:3])}"
    floor = {"fp32": 1e-5, "fp16": 5e-3, "bf16": 4e-2}[precision]
    if worst > 10 * worst32 and worst > floor:
        line += "  <- differs"
    return line


def add_sweep_arguments(parser, what):
    """--ampc, --only (`what` names) and --exporters, which the sweeps share."""
    parser.add_argument("--ampc", default=os.path.join(os.path.dirname(__file__), "..", "build",
                                                       "ampc"))
    parser.add_argument("--only", default="", help=f"comma-separated {what} names")
    parser.add_argument("--exporters", default="torchscript:17,dynamo:18",
                        help="comma-separated exporter:opset, the exporter torchscript, dynamo "
                        "(optimize=False), or torch.onnx's defaults: torchscript_fold (constant "
                        "folding on) and dynamo_opt (the graph optimizer on)")
    parser.add_argument("--precision", choices=("fp32", "fp16", "bf16"), default="fp32",
                        help="compile with --precision (fp16 at a static loss scale of 2^10) "
                        "and compare with PyTorch's CPU autocast at the same dtype and scale")


def parse_exporters(text):
    """--exporters as a list of exporter:opset; exits naming a malformed one."""
    exporters = [e for e in text.split(",") if e]
    for exporter in exporters:
        kind, _, opset = exporter.partition(":")
        if kind not in EXPORTERS or not opset.isdigit():
            sys.exit(f"--exporters: {exporter!r} is not EXPORTER:OPSET, EXPORTER one of "
                     f"{', '.join(EXPORTERS)}")
    return exporters


def selected_names(only, table, what, hint):
    """The names --only lists (every name in `table` when it lists none); exits naming one that
    is not in `table`, with `hint`."""
    names = [n for n in only.split(",") if n] or list(table)
    for name in names:
        if name not in table:
            sys.exit(f"unknown {what} {name!r} ({hint})")
    return names


def case_sweep_main(description, table, build, width):
    """A sweep over named cases, as the layer and architecture sweeps run: --ampc, --only,
    --exporters and --precision (add_sweep_arguments) and --list; then each case check()ed
    through each exporter, a line each. build(name) -> (module, x, y) makes a case under
    torch.manual_seed(0); a case PyTorch cannot build or run is reported and the sweep goes on."""
    parser = argparse.ArgumentParser(description=description)
    add_sweep_arguments(parser, "case")
    parser.add_argument("--list", action="store_true", help="print the case names and exit")
    args = parser.parse_args()
    if args.list:
        print("\n".join(table))
        return
    names = selected_names(args.only, table, "case", "see --list")
    exporters = parse_exporters(args.exporters)
    with tempfile.TemporaryDirectory() as work:
        for name in names:
            torch.manual_seed(0)
            try:
                module, x, y = build(name)
            except Exception as e:  # the case itself is wrong for this PyTorch
                reason = str(e).splitlines()[0][:100]
                print(f"{name:{width}s} PyTorch cannot run the case: {reason}")
                continue
            for exporter in exporters:
                line = check(args.ampc, module, x, y, exporter, work, args.precision)
                print(f"{name:{width}s} {exporter:14s} {line}", flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_sweep_arguments(parser, "model")
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--size", type=int, default=64,
                        help="image side (at least each model's smallest; vit and maxvit take 32, "
                        f"the video models clips of {FRAMES} frames of 32 x 32)")
    args = parser.parse_args()
    import torchvision.models
    table = models(torchvision.models)
    names = selected_names(args.only, table, "model", f"known: {', '.join(table)}")
    exporters = parse_exporters(args.exporters)
    with tempfile.TemporaryDirectory() as work:
        for name in names:
            factory, smallest, kind = table[name]
            fixed = name in FIXED_SIZE or kind == VIDEO
            side = smallest if fixed else max(smallest, args.size)
            torch.manual_seed(0)
            module = WithLoss(without_dropout(factory())).train()
            g = torch.Generator().manual_seed(1)
            frames = (FRAMES,) if kind == VIDEO else ()
            x = torch.randn(args.batch, 3, *frames, side, side, generator=g)
            y = torch.randint(0, CLASSES, (args.batch, side, side) if kind == SEGMENTATION
                              else (args.batch,), generator=g)
            for exporter in exporters:
                print(f"{name:20s} {exporter:14s} {check(args.ampc, module, x, y, exporter, work, args.precision)}",
                      flush=True)


if __name__ == "__main__":
    main()
