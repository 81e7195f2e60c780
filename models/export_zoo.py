#!/usr/bin/env python3
"""Export the model zoo: small, randomly initialized versions of architectures people train,
each through every PyTorch exporter that can export it, with PyTorch's f32 training runs.

Needs torch, onnx and numpy (and torchvision for resnet18 and mobilenet_v3_small) from PyPI:

    python -m venv venv && venv/bin/pip install torch torchvision onnx onnxscript numpy
    venv/bin/python models/export_zoo.py            # writes models/zoo/
    venv/bin/python models/export_zoo.py --only gpt2,llama

Writes into models/zoo/ (committed, so building and testing ampc needs no Python):
  * <model>.<exporter>.onnx for each exporter that exported the model, exporters:
      - torchscript: torch.onnx.export(dynamo=False, opset_version=17,
                     training=TrainingMode.TRAINING, do_constant_folding=False)
      - dynamo:      torch.onnx.export(dynamo=True, training=TrainingMode.TRAINING), every
                     other argument at its default (PyTorch's default exporter)
      - dynamo_raw:  the same with optimize=False and opset_version=20: the exporter's graph
                     before its own optimizer (CastLike, SplitToSequence/SequenceAt, shape
                     arithmetic), as older exporter versions wrote it
      - dynamo_opset23: the same at opset 23, where attention and RMSNorm are exported as
                     the Attention and RMSNormalization ops (transformers only)
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
    onnx's reference evaluator equals
    PyTorch's training-mode loss on batch 0 (relative 1e-4), every parameter is an initializer
    of the file under its PyTorch name, and BatchNormalization runs in training mode. An
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
import sys
import traceback
import warnings

import numpy as np
import onnx
import onnx.numpy_helper
import onnx.reference
import torch
import torch.nn as nn
import torch.nn.functional as F

N_STEPS = 10
N_BATCHES = 4
FAITHFUL_RTOL = 1e-4
HERE = os.path.dirname(os.path.abspath(__file__))


def sgd(params, lr=0.05):
    return torch.optim.SGD(params, lr=lr, momentum=0.9, weight_decay=1e-4, foreach=False)


def adamw(params, lr=2e-3):
    return torch.optim.AdamW(params, lr=lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01,
                             foreach=False)


# ----------------------------------------------------------------------------- transformers


class CausalSelfAttention(nn.Module):
    """Multi-head causal attention; n_kv_heads < n_heads is grouped-query attention."""

    def __init__(self, dim, n_heads, n_kv_heads=None, bias=True, rotary=None):
        super().__init__()
        self.n_heads, self.n_kv = n_heads, n_kv_heads or n_heads
        self.head_dim = dim // n_heads
        self.q = nn.Linear(dim, n_heads * self.head_dim, bias=bias)
        self.kv = nn.Linear(dim, 2 * self.n_kv * self.head_dim, bias=bias)
        self.proj = nn.Linear(dim, dim, bias=bias)
        self.rotary = rotary

    def forward(self, x):
        b, t, _ = x.shape
        q = self.q(x).view(b, t, self.n_heads, self.head_dim).transpose(1, 2)
        k, v = self.kv(x).split(self.n_kv * self.head_dim, dim=2)
        k = k.view(b, t, self.n_kv, self.head_dim).transpose(1, 2)
        v = v.view(b, t, self.n_kv, self.head_dim).transpose(1, 2)
        if self.rotary is not None:
            q, k = self.rotary(q), self.rotary(k)
        if self.n_kv != self.n_heads:
            k = k.repeat_interleave(self.n_heads // self.n_kv, dim=1)
            v = v.repeat_interleave(self.n_heads // self.n_kv, dim=1)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(y.transpose(1, 2).reshape(b, t, -1))


class Rotary(nn.Module):
    """Rotary position embeddings (rotate-half form) over the last dim of [B, H, T, D]."""

    def __init__(self, head_dim, max_len, base=10000.0):
        super().__init__()
        inv = 1.0 / base ** (torch.arange(0, head_dim, 2).float() / head_dim)
        angles = torch.outer(torch.arange(max_len).float(), inv)
        self.register_buffer("cos", torch.cat([angles.cos()] * 2, dim=-1), persistent=False)
        self.register_buffer("sin", torch.cat([angles.sin()] * 2, dim=-1), persistent=False)

    def forward(self, x):
        t = x.shape[2]
        x1, x2 = x.chunk(2, dim=-1)
        rotated = torch.cat([-x2, x1], dim=-1)
        return x * self.cos[:t] + rotated * self.sin[:t]


class GptBlockModel(nn.Module):
    """The GPT block a user tried: RMSNorm, causal SDPA, tanh GELU, tied embeddings."""

    def __init__(self, vocab=64, dim=32, heads=4, max_len=16):
        super().__init__()
        self.wte = nn.Embedding(vocab, dim)
        self.wpe = nn.Embedding(max_len, dim)
        self.norm1, self.norm2, self.norm_f = nn.RMSNorm(dim), nn.RMSNorm(dim), nn.RMSNorm(dim)
        self.attn = CausalSelfAttention(dim, heads)
        self.fc, self.fc_out = nn.Linear(dim, 4 * dim), nn.Linear(4 * dim, dim)
        self.head = nn.Linear(dim, vocab, bias=False)
        self.head.weight = self.wte.weight
        nn.init.normal_(self.wte.weight, std=0.02)

    def forward(self, idx, targets):
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1]))
        x = x + self.attn(self.norm1(x))
        x = x + self.fc_out(F.gelu(self.fc(self.norm2(x)), approximate="tanh"))
        logits = self.head(self.norm_f(x))
        return F.cross_entropy(logits.flatten(0, 1), targets.flatten()), logits


class Gpt2(nn.Module):
    """GPT-2: learned positions, pre-LayerNorm blocks, GELU, tied LM head."""

    def __init__(self, vocab=64, dim=32, heads=4, layers=2, max_len=16):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, dim), nn.Embedding(max_len, dim)
        self.blocks = nn.ModuleList()
        for _ in range(layers):
            self.blocks.append(nn.ModuleDict(dict(
                ln1=nn.LayerNorm(dim), attn=CausalSelfAttention(dim, heads), ln2=nn.LayerNorm(dim),
                fc=nn.Linear(dim, 4 * dim), proj=nn.Linear(4 * dim, dim))))
        self.ln_f = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab, bias=False)
        self.head.weight = self.wte.weight
        nn.init.normal_(self.wte.weight, std=0.02)

    def forward(self, idx, targets):
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1]))
        for b in self.blocks:
            x = x + b["attn"](b["ln1"](x))
            x = x + b["proj"](F.gelu(b["fc"](b["ln2"](x))))
        logits = self.head(self.ln_f(x))
        return F.cross_entropy(logits.flatten(0, 1), targets.flatten()), logits


class Llama(nn.Module):
    """Llama-style decoder: RMSNorm, rotary embeddings, SwiGLU, grouped-query attention."""

    def __init__(self, vocab=64, dim=32, heads=4, kv_heads=2, layers=2, max_len=16, hidden=64):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        rotary = Rotary(dim // heads, max_len)
        self.blocks = nn.ModuleList()
        for _ in range(layers):
            self.blocks.append(nn.ModuleDict(dict(
                attn_norm=nn.RMSNorm(dim, eps=1e-5),
                attn=CausalSelfAttention(dim, heads, kv_heads, bias=False, rotary=rotary),
                mlp_norm=nn.RMSNorm(dim, eps=1e-5),
                gate=nn.Linear(dim, hidden, bias=False), up=nn.Linear(dim, hidden, bias=False),
                down=nn.Linear(hidden, dim, bias=False))))
        self.norm = nn.RMSNorm(dim, eps=1e-5)
        self.head = nn.Linear(dim, vocab, bias=False)
        nn.init.normal_(self.embed.weight, std=0.02)

    def forward(self, idx, targets):
        x = self.embed(idx)
        for b in self.blocks:
            x = x + b["attn"](b["attn_norm"](x))
            h = b["mlp_norm"](x)
            x = x + b["down"](F.silu(b["gate"](h)) * b["up"](h))
        logits = self.head(self.norm(x))
        return F.cross_entropy(logits.flatten(0, 1), targets.flatten()), logits


class BertMlm(nn.Module):
    """BERT-style encoder (post-LayerNorm, GELU) with a masked-LM loss and a padding mask:
    labels are -100 where no token is predicted; attention_mask is 1 for real tokens."""

    def __init__(self, vocab=64, dim=32, heads=4, layers=2, max_len=16):
        super().__init__()
        self.heads = heads
        self.tok, self.pos = nn.Embedding(vocab, dim), nn.Embedding(max_len, dim)
        self.emb_ln = nn.LayerNorm(dim, eps=1e-12)
        self.layers = nn.ModuleList()
        for _ in range(layers):
            self.layers.append(nn.ModuleDict(dict(
                qkv=nn.Linear(dim, 3 * dim), out=nn.Linear(dim, dim), ln1=nn.LayerNorm(dim, eps=1e-12),
                fc=nn.Linear(dim, 4 * dim), fc_out=nn.Linear(4 * dim, dim),
                ln2=nn.LayerNorm(dim, eps=1e-12))))
        self.mlm_dense, self.mlm_ln = nn.Linear(dim, dim), nn.LayerNorm(dim, eps=1e-12)
        self.decoder = nn.Linear(dim, vocab)
        self.decoder.weight = self.tok.weight
        nn.init.normal_(self.tok.weight, std=0.02)

    def forward(self, input_ids, attention_mask, labels):
        b, t = input_ids.shape
        x = self.emb_ln(self.tok(input_ids) + self.pos(torch.arange(t)))
        bias = (1.0 - attention_mask[:, None, None, :].to(x.dtype)) * torch.finfo(x.dtype).min
        for layer in self.layers:
            q, k, v = layer["qkv"](x).view(b, t, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
            scores = q @ k.transpose(-1, -2) / (q.shape[-1] ** 0.5) + bias
            a = (scores.softmax(-1) @ v).transpose(1, 2).reshape(b, t, -1)
            x = layer["ln1"](x + layer["out"](a))
            x = layer["ln2"](x + layer["fc_out"](F.gelu(layer["fc"](x))))
        logits = self.decoder(self.mlm_ln(F.gelu(self.mlm_dense(x))))
        return F.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=-100), logits


# ----------------------------------------------------------------------------- vision


class ResCnn(nn.Module):
    """The residual CNN a user tried: Conv, training-mode BatchNorm, SiLU, a stride-2 block
    with a 1x1 projection, adaptive average pooling."""

    def __init__(self, classes=10):
        super().__init__()
        self.c1, self.b1 = nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8)
        self.c2, self.b2 = nn.Conv2d(8, 16, 3, stride=2, padding=1), nn.BatchNorm2d(16)
        self.skip = nn.Conv2d(8, 16, 1, stride=2)
        self.fc = nn.Linear(16, classes)

    def forward(self, x, y):
        h = F.silu(self.b1(self.c1(x)))
        h = F.silu(self.b2(self.c2(h)) + self.skip(h))
        logits = self.fc(F.adaptive_avg_pool2d(h, 1).flatten(1))
        return F.cross_entropy(logits, y), logits


class MlpWide(nn.Module):
    """An MLP on flattened 28x28 images whose weights are exported to a .onnx.data file."""

    def __init__(self, hidden=128, classes=10):
        super().__init__()
        self.fc1, self.fc2, self.fc3 = nn.Linear(784, hidden), nn.Linear(hidden, hidden), nn.Linear(hidden, classes)

    def forward(self, x, y):
        logits = self.fc3(F.relu(self.fc2(F.relu(self.fc1(x)))))
        return F.cross_entropy(logits, y), logits


class WithLoss(nn.Module):
    """A classifier from torchvision with its cross-entropy loss."""

    def __init__(self, net):
        super().__init__()
        self.net = net

    def forward(self, x, y):
        logits = self.net(x)
        return F.cross_entropy(logits, y), logits


def resnet18_narrow(classes=10):
    """torchvision's ResNet-18 (BasicBlock, [2, 2, 2, 2]) at 1/8 of its widths."""
    from torchvision.models.resnet import BasicBlock, ResNet

    class Narrow(ResNet):
        def _make_layer(self, block, planes, blocks, stride=1, dilate=False):
            return super()._make_layer(block, planes // 8, blocks, stride, dilate)

    net = Narrow(BasicBlock, [2, 2, 2, 2], num_classes=classes)
    net.fc = nn.Linear(512 // 8, classes)
    # The stem keeps 64 channels in torchvision; narrow it too.
    net.inplanes = 8
    net.conv1 = nn.Conv2d(3, 8, 7, 2, 3, bias=False)
    net.bn1 = nn.BatchNorm2d(8)
    net.layer1 = net._make_layer(BasicBlock, 64, 2)
    return WithLoss(net)


def mobilenet_v3_small(classes=10):
    """torchvision's MobileNetV3-small at width 0.25, no dropout (its masks are random)."""
    from torchvision.models import mobilenet_v3_small as build

    return WithLoss(build(num_classes=classes, width_mult=0.25, dropout=0.0))


class UNet(nn.Module):
    """A U-Net-style segmentation net: GroupNorm and SiLU throughout, a stride-2 and a max-pool
    downsampling, a transposed convolution and a nearest resize upsampling, a bilinear resize
    of the bottleneck added to the output, and a Dice + cross-entropy loss on one-hot masks."""

    def __init__(self, classes=3, width=8):
        super().__init__()
        w = width

        def block(cin, cout, stride=1):
            return nn.Sequential(nn.Conv2d(cin, cout, 3, stride=stride, padding=1),
                                 nn.GroupNorm(4, cout), nn.SiLU())

        self.classes = classes
        self.enc1, self.enc2 = block(3, w), block(w, 2 * w, stride=2)
        self.mid = block(2 * w, 2 * w)
        self.dec2 = block(4 * w, 2 * w)
        self.up1 = nn.ConvTranspose2d(2 * w, w, 2, stride=2)
        self.dec1 = block(2 * w, w)
        self.side = nn.Conv2d(2 * w, classes, 1)
        self.head = nn.Conv2d(w, classes, 1)

    def forward(self, x, y):
        e1 = self.enc1(x)                                   # w    x H
        e2 = self.enc2(e1)                                  # 2w   x H/2
        m = self.mid(F.max_pool2d(e2, 2))                   # 2w   x H/4
        d2 = self.dec2(torch.cat([F.interpolate(m, scale_factor=2.0, mode="nearest"), e2], 1))
        d1 = self.dec1(torch.cat([self.up1(d2), e1], 1))    # w    x H
        side = F.interpolate(self.side(m), scale_factor=4.0, mode="bilinear", align_corners=False)
        logits = self.head(d1) + side
        probs = logits.softmax(1)
        target = F.one_hot(y, self.classes).permute(0, 3, 1, 2).to(probs.dtype)
        overlap = (probs * target).sum((0, 2, 3))
        total = probs.sum((0, 2, 3)) + target.sum((0, 2, 3))
        dice = 1 - ((2 * overlap + 1) / (total + 1)).mean()
        return F.cross_entropy(logits, y) + dice, logits


# ----------------------------------------------------------------------------- batches


def tokens(g, shape, vocab=64):
    return torch.randint(0, vocab, shape, generator=g)


def lm_batch(g, b=2, t=16):
    return {"idx": tokens(g, (b, t)), "targets": tokens(g, (b, t))}


def mlm_batch(g, b=2, t=16):
    ids = tokens(g, (b, t))
    lengths = torch.tensor([t, t - 5])
    mask = (torch.arange(t)[None, :] < lengths[:, None]).to(torch.int64)
    labels = torch.where(torch.rand((b, t), generator=g) < 0.3, ids, torch.full_like(ids, -100))
    labels = torch.where(mask.bool(), labels, torch.full_like(ids, -100))
    labels[:, 0] = ids[:, 0]  # at least one prediction per row
    return {"input_ids": ids, "attention_mask": mask, "labels": labels}


def normal_image_batch(g, b, c, h, w, classes=10):
    # Normal pixels: max pooling over grid pixels would meet ties that f32 rounding breaks.
    return {"x": torch.randn((b, c, h, w), generator=g), "y": torch.randint(0, classes, (b,), generator=g)}


def image_batch(g, b, c, h, w, classes=10):
    # Pixels on a 1/16 grid in [-1, 1), like 4-bit images: the stored batches compress.
    x = torch.randint(-16, 16, (b, c, h, w), generator=g).float() / 16
    return {"x": x, "y": torch.randint(0, classes, (b,), generator=g)}


def mask_batch(g, b=4, h=16, w=16, classes=3):
    x = torch.randint(-16, 16, (b, 3, h, w), generator=g).float() / 16
    return {"x": x, "y": torch.randint(0, classes, (b, h, w), generator=g)}


def flat_batch(g, b=8, classes=10):
    return {"x": torch.rand((b, 784), generator=g), "y": torch.randint(0, classes, (b,), generator=g)}


# name -> (model factory, batch factory, exporters to try)
ALL_EXPORTERS = ("torchscript", "dynamo", "dynamo_raw")
TRANSFORMER_EXPORTERS = ALL_EXPORTERS + ("dynamo_opset23",)
VISION_EXPORTERS = ("torchscript", "dynamo")
ZOO = {
    "gpt_block": (GptBlockModel, lm_batch, TRANSFORMER_EXPORTERS),
    "gpt2": (Gpt2, lm_batch, TRANSFORMER_EXPORTERS),
    "llama": (Llama, lm_batch, TRANSFORMER_EXPORTERS),
    "bert_mlm": (BertMlm, mlm_batch, TRANSFORMER_EXPORTERS),
    "res_cnn": (ResCnn, lambda g: image_batch(g, 4, 3, 16, 16), ALL_EXPORTERS),
    "resnet18": (resnet18_narrow, lambda g: normal_image_batch(g, 8, 3, 40, 40),
                 VISION_EXPORTERS),
    "mobilenet_v3_small": (mobilenet_v3_small, lambda g: image_batch(g, 16, 3, 64, 64),
                           VISION_EXPORTERS),
    "mlp_wide": (MlpWide, flat_batch, ("dynamo",)),
    "unet": (UNet, mask_batch, ALL_EXPORTERS),
}


# Learning rates other than the defaults, where the default makes two correct runs part ways. A
# narrow ResNet under SGD is chaotic at 0.05. At 0.01 one ReLU input in layer4 sits 1.5e-5 from
# zero at step 7, so about 3% of equally valid f32 summation orders (PyTorch's own, with channels
# or samples permuted) flip it and part by 1e-3 by step 9. At 0.005 f32 is stable, but low
# precision is not: PyTorch's own autocast misses its f32 losses by up to 6.8% (bf16) and 3.7%
# (fp16), and two valid bf16 runs differ by 10%. At 0.001 every f32 order stays within 4e-7 of
# f64 and PyTorch's autocast within 1.7% of f32. AdamW moves every weight by about lr each step,
# so it crosses ReLU kinks far more often: at 2e-3 PyTorch's own f32 run flips a ReLU input's sign
# at step 3 and 169 of 200 permuted orders part; at 1e-4 none of 600 parts by more than 1e-6.
DEFAULT_LR = {"sgd": 0.05, "adamw": 2e-3}
LEARNING_RATES = {"resnet18": {"sgd": 0.001, "adamw": 1e-4}}

# ----------------------------------------------------------------------------- export


def export(model, args, names, path, exporter, external_data):
    kwargs = dict(input_names=names, output_names=["loss", "logits"],
                  training=torch.onnx.TrainingMode.TRAINING)
    if exporter == "torchscript":
        torch.onnx.export(model, args, path, dynamo=False, opset_version=17,
                          do_constant_folding=False, **kwargs)
    elif exporter == "dynamo":
        torch.onnx.export(model, args, path, dynamo=True, external_data=external_data, **kwargs)
    else:
        opset = 23 if exporter == "dynamo_opset23" else 20
        torch.onnx.export(model, args, path, dynamo=True, optimize=False, opset_version=opset,
                          external_data=external_data, **kwargs)


def onnx_loss(path, feeds):
    model = onnx.load(path)
    return float(onnx.reference.ReferenceEvaluator(model).run(["loss"], feeds)[0])


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
    initializers (folded into constants), BatchNormalization in inference mode."""
    graph = onnx.load(path, load_external_data=False).graph
    initializers = {i.name for i in graph.initializer}
    lost = [names[0] for names in parameter_aliases(model).values()
            if not any(n in initializers for n in names)]
    reasons = []
    if lost:
        reasons.append(f"parameters {', '.join(lost[:4])}{' ...' if len(lost) > 4 else ''} "
                       "are not initializers of the file")
    inference_bn = [n.name for n in graph.node if n.op_type == "BatchNormalization" and not any(
        a.name == "training_mode" and a.i == 1 for a in n.attribute)]
    if inference_bn and any(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in model.modules()):
        reasons.append("BatchNormalization is exported in inference mode")
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


def build(name, out_dir, refs_only=False, manifest_entries=()):
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
        feeds = {n: batches[n][0].numpy() for n in names}
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
    if os.path.exists(manifest_path) and (args.only or args.refs_only):
        with open(manifest_path) as f:
            entries = json.load(f)["entries"]
        if not args.refs_only:
            entries = [e for e in entries if e["model"] not in names]
    for n in names:
        print(n)
        if args.refs_only:
            build(n, args.out, refs_only=True, manifest_entries=entries)
        else:
            entries += build(n, args.out)
    entries.sort(key=lambda e: (e["model"], e["exporter"]))
    with open(manifest_path, "w") as f:
        json.dump({"torch": torch.__version__, "onnx": onnx.__version__, "steps": N_STEPS,
                   "entries": entries}, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
