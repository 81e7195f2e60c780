#!/usr/bin/env python3
"""Whole architectures outside the other sweeps through PyTorch's exporters and ampc's training
step, with ampc's loss and one-step gradients against PyTorch's in f64.

Each case is a small module that returns its own loss from a batch (x, y): a VAE (its noise a
buffer), a timestep-conditioned convolution (sinusoidal embedding, FiLM), PointNet (a learned
3x3 transform, a max over points), SimCLR's contrastive loss (a masked similarity matrix),
DeepFM, a gated WaveNet (causal dilated convolutions), a linear-chain CRF (the forward
algorithm unrolled), capsules with routing by agreement, a Perceiver (cross-attention from
learned latents), focal and mixture-density losses, a hypernetwork's per-sample convolution
(one grouped convolution whose weight is computed), a hard Gumbel-softmax (straight-through)
and an FT-Transformer. Each is exported in training mode and checked as
tools/torchvision_gradient_sweep.py checks its models. DeepFM's labels are its own answers at
its initial weights, so its logits for the right class reach past 17, where 1 - sigmoid is 0 in
f32 (TorchScript writes binary_cross_entropy_with_logits through log(1 - sigmoid)).

What the files cannot say shows as a gap: TorchScript writes no `detach()` (gumbel_hard), and
drops an input the loss does not read (vae's and simclr's labels, so `ampc train` refuses the
data's extra array).

Needs torch, onnx, onnxscript and numpy from PyPI:

  venv/bin/python tools/architecture_sweep.py [--ampc build/ampc] [--only crf,deepfm]
      [--exporters torchscript:17,dynamo:18] [--precision fp16] [--list]
"""
import argparse
import math
import os
import sys
import tempfile

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torchvision_gradient_sweep import add_sweep_arguments, check, parse_exporters  # noqa: E402


class Vae(nn.Module):
    """A VAE: reparameterized with fixed noise, a reconstruction and a KL term."""

    def __init__(self):
        super().__init__()
        self.enc = nn.Sequential(nn.Linear(64, 32), nn.ELU())
        self.mu = nn.Linear(32, 8)
        self.logvar = nn.Linear(32, 8)
        self.dec = nn.Sequential(nn.Linear(8, 32), nn.LeakyReLU(0.2), nn.Linear(32, 64))
        self.register_buffer("eps", torch.randn(4, 8, generator=torch.Generator().manual_seed(5)))

    def forward(self, x, y):
        h = self.enc(x)
        mu, logvar = self.mu(h), self.logvar(h)
        z = mu + torch.exp(0.5 * logvar) * self.eps
        rec = self.dec(z)
        recon = F.binary_cross_entropy_with_logits(rec, torch.sigmoid(x), reduction="sum")
        recon = recon / x.shape[0]
        kl = -0.5 * torch.mean(torch.sum(1 + logvar - mu.pow(2) - logvar.exp(), dim=1))
        return recon + kl


class TimestepFilm(nn.Module):
    """A diffusion model's conditioning: a sinusoidal timestep embedding scales and shifts
    group-normalized features (FiLM)."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 16, 3, padding=1)
        self.emb = nn.Sequential(nn.Linear(16, 32), nn.SiLU(), nn.Linear(32, 32))
        self.norm = nn.GroupNorm(4, 16)
        self.out = nn.Conv2d(16, 3, 3, padding=1)

    def forward(self, x, t):
        half = 8
        freqs = torch.exp(-math.log(10000.0) * torch.arange(half, dtype=torch.float32) / half)
        args = t.to(x.dtype)[:, None] * freqs.to(x.dtype)[None]
        e = self.emb(torch.cat([torch.sin(args), torch.cos(args)], dim=-1))
        scale, shift = e.chunk(2, dim=1)
        h = self.norm(self.conv(x)) * (1 + scale[:, :, None, None]) + shift[:, :, None, None]
        return F.mse_loss(self.out(F.silu(h)), x * 0.5)


class PointNet(nn.Module):
    """PointNet: a learned 3x3 transform of the points, shared 1x1 convolutions, a max over
    points, and the transform's orthogonality penalty."""

    def __init__(self):
        super().__init__()
        self.tnet = nn.Sequential(nn.Conv1d(3, 16, 1), nn.ReLU(), nn.Conv1d(16, 32, 1))
        self.tfc = nn.Linear(32, 9)
        self.mlp = nn.Sequential(nn.Conv1d(3, 16, 1), nn.BatchNorm1d(16), nn.ReLU(),
                                 nn.Conv1d(16, 32, 1))
        self.head = nn.Linear(32, 5)

    def forward(self, x, y):
        pts = x.transpose(1, 2)  # [B, 3, N]
        t = self.tnet(pts).max(dim=2).values
        a = self.tfc(t).view(-1, 3, 3) + torch.eye(3)
        pts = torch.bmm(a, pts)
        f = self.mlp(pts).max(dim=2).values
        reg = ((torch.bmm(a, a.transpose(1, 2)) - torch.eye(3)) ** 2).sum(dim=(1, 2)).mean()
        return F.cross_entropy(self.head(f), y) + 1e-3 * reg


class SimClr(nn.Module):
    """SimCLR's NT-Xent: two views, a similarity matrix with its diagonal masked to -inf."""

    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Conv2d(3, 8, 3, stride=2, padding=1), nn.BatchNorm2d(8),
                                 nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                                 nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 8))

    def forward(self, x, y):
        z = F.normalize(self.net(torch.cat([x, torch.flip(x, dims=[3])], dim=0)), dim=1)
        n = z.shape[0]
        sim = z @ z.t() / 0.2
        sim = sim.masked_fill(torch.eye(n, dtype=torch.bool), float("-inf"))
        half = n // 2
        targets = torch.cat([torch.arange(half, n), torch.arange(0, half)])
        return F.cross_entropy(sim, targets)


class DeepFm(nn.Module):
    """DeepFM: first-order terms, the factorization machine's pairwise term and an MLP over
    the same embeddings, with a binary cross-entropy on logits."""

    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(40, 8)
        nn.init.normal_(self.emb.weight, std=2.0)  # confident from the start (confident_labels)
        self.lin = nn.Embedding(40, 1)
        self.deep = nn.Sequential(nn.Linear(5 * 8, 16), nn.ReLU(), nn.Linear(16, 1))
        self.bias = nn.Parameter(torch.zeros(1))

    def forward(self, x, y):
        e = self.emb(x)  # [B, F, D]
        fm = 0.5 * (e.sum(dim=1).pow(2) - e.pow(2).sum(dim=1)).sum(dim=1, keepdim=True)
        logit = self.bias + self.lin(x).sum(dim=1) + fm + self.deep(e.flatten(1))
        return F.binary_cross_entropy_with_logits(logit.squeeze(1), y)


class WaveNet(nn.Module):
    """WaveNet: causal dilated convolutions (left padding), tanh-sigmoid gates, residual
    and skip paths, a class per time step."""

    def __init__(self, ch=8, classes=6):
        super().__init__()
        self.inp = nn.Conv1d(1, ch, 1)
        self.filt = nn.ModuleList(nn.Conv1d(ch, ch, 2, dilation=d) for d in (1, 2, 4))
        self.gate = nn.ModuleList(nn.Conv1d(ch, ch, 2, dilation=d) for d in (1, 2, 4))
        self.res = nn.ModuleList(nn.Conv1d(ch, ch, 1) for _ in range(3))
        self.out = nn.Conv1d(ch, classes, 1)

    def forward(self, x, y):
        h = self.inp(x)
        skip = 0
        for d, f, g, r in zip((1, 2, 4), self.filt, self.gate, self.res):
            p = F.pad(h, (d, 0))
            z = torch.tanh(f(p)) * torch.sigmoid(g(p))
            skip = skip + z
            h = h + r(z)
        return F.cross_entropy(self.out(F.relu(skip)), y)


class Crf(nn.Module):
    """A linear-chain CRF tagger: the forward algorithm unrolled over time, the gold path
    scored through indexed transitions."""

    def __init__(self, vocab=30, tags=5, d=8):
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        self.proj = nn.Linear(d, tags)
        self.trans = nn.Parameter(torch.randn(tags, tags) * 0.1)
        self.start = nn.Parameter(torch.randn(tags) * 0.1)

    def forward(self, x, y):
        em = self.proj(self.emb(x))  # [B, T, K]
        b, t, k = em.shape
        alpha = self.start[None] + em[:, 0]
        for i in range(1, t):
            alpha = torch.logsumexp(alpha[:, :, None] + self.trans[None] + em[:, i, None, :], dim=1)
        logz = torch.logsumexp(alpha, dim=1)
        gold = self.start[y[:, 0]] + em.gather(2, y[:, :, None]).squeeze(2).sum(1)
        gold = gold + self.trans[y[:, :-1], y[:, 1:]].sum(1)
        return (logz - gold).mean()


class Capsules(nn.Module):
    """Capsules: squashed primary capsules, three rounds of routing by agreement, the
    margin loss."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 16, 3, stride=2)
        self.w = nn.Parameter(torch.randn(1, 49 * 2, 5, 6, 8) * 0.1)

    @staticmethod
    def squash(s, dim=-1):
        n2 = (s * s).sum(dim=dim, keepdim=True)
        return n2 / (1 + n2) * s / torch.sqrt(n2 + 1e-8)

    def forward(self, x, y):
        u = self.conv(x)  # [B, 16, 7, 7]
        b = u.shape[0]
        u = self.squash(u.view(b, 2, 8, 49).permute(0, 3, 1, 2).reshape(b, 98, 8))
        uhat = (self.w @ u[:, :, None, :, None]).squeeze(-1)  # [B, 98, 5, 6]
        logits = torch.zeros(b, 98, 5)
        for _ in range(3):
            c = logits.softmax(dim=2)
            v = self.squash((c[..., None] * uhat).sum(dim=1))  # [B, 5, 6]
            logits = logits + (uhat * v[:, None]).sum(-1)
        lengths = v.norm(dim=-1)
        onehot = F.one_hot(y, 5).float()
        loss = onehot * F.relu(0.9 - lengths) ** 2 + 0.5 * (1 - onehot) * F.relu(lengths - 0.1) ** 2
        return loss.sum(1).mean()


class Perceiver(nn.Module):
    """A Perceiver: learned latents cross-attend to the inputs (kdim and vdim differ), then
    a pre-norm self-attention layer."""

    def __init__(self, d=16):
        super().__init__()
        self.inp = nn.Linear(4, 12)
        self.latents = nn.Parameter(torch.randn(6, d) * 0.5)
        self.cross = nn.MultiheadAttention(d, 2, kdim=12, vdim=12, batch_first=True)
        self.self_attn = nn.TransformerEncoderLayer(d, 2, 32, dropout=0.0, batch_first=True,
                                                    norm_first=True, activation="gelu")
        self.head = nn.Linear(d, 5)

    def forward(self, x, y):
        kv = self.inp(x)
        q = self.latents[None].expand(x.shape[0], -1, -1)
        h, _ = self.cross(q, kv, kv, need_weights=False)
        h = self.self_attn(h + q)
        return F.cross_entropy(self.head(h.mean(1)), y)


class FocalMdn(nn.Module):
    """A focal loss on one head and a mixture-density NLL on another."""

    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(10, 32), nn.Tanh())
        self.cls = nn.Linear(32, 5)
        self.mdn = nn.Linear(32, 9)
        self.alpha = nn.Parameter(torch.ones(5), requires_grad=False)

    def forward(self, x, y):
        h = self.body(x)
        logp = F.log_softmax(self.cls(h), dim=1).gather(1, y[:, None]).squeeze(1)
        focal = (-(1 - logp.exp()) ** 2 * logp * self.alpha[y]).mean()
        pi, mu, log_sigma = self.mdn(h).chunk(3, dim=1)
        target = x[:, :1]
        log_n = (-0.5 * ((target - mu) / log_sigma.exp()) ** 2 - log_sigma
                 - 0.5 * math.log(2 * math.pi))
        nll = -torch.logsumexp(F.log_softmax(pi, dim=1) + log_n, dim=1).mean()
        return focal + nll


class DynamicConv(nn.Module):
    """Per-sample convolution weights from a hypernetwork, applied as one grouped conv."""

    def __init__(self):
        super().__init__()
        self.hyper = nn.Linear(3, 4 * 3 * 3 * 3)
        self.head = nn.Linear(4, 5)

    def forward(self, x, y):
        b = x.shape[0]
        w = self.hyper(x.mean(dim=(2, 3))).view(b * 4, 3, 3, 3)
        out = F.conv2d(x.reshape(1, b * 3, *x.shape[2:]), w, padding=1, groups=b)
        out = out.view(b, 4, *x.shape[2:])
        return F.cross_entropy(self.head(F.gelu(out).mean(dim=(2, 3))), y)


class GumbelHard(nn.Module):
    """A hard Gumbel-softmax with fixed noise: one-hot forward, the soft gradient
    (straight-through)."""

    def __init__(self):
        super().__init__()
        self.enc = nn.Linear(10, 6)
        self.dec = nn.Linear(6, 5)
        u = torch.rand(4, 6, generator=torch.Generator().manual_seed(3))
        self.register_buffer("g", -torch.log(-torch.log(u)))

    def forward(self, x, y):
        soft = ((self.enc(x) + self.g) / 0.5).softmax(-1)
        hard = F.one_hot(soft.argmax(-1), 6).float()
        z = hard - soft.detach() + soft
        return F.cross_entropy(self.dec(z), y)


class FtTransformer(nn.Module):
    """FT-Transformer: each numeric feature a token (x * w + b), a class token, a pre-norm
    encoder layer."""

    def __init__(self, feats=6, d=16):
        super().__init__()
        self.w = nn.Parameter(torch.randn(feats, d) * 0.3)
        self.b = nn.Parameter(torch.zeros(feats, d))
        self.cls = nn.Parameter(torch.randn(1, 1, d) * 0.3)
        self.layer = nn.TransformerEncoderLayer(d, 4, 32, dropout=0.0, batch_first=True,
                                                norm_first=True, activation="gelu")
        self.head = nn.Sequential(nn.LayerNorm(d), nn.ReLU(), nn.Linear(d, 5))

    def forward(self, x, y):
        tok = x[:, :, None] * self.w[None] + self.b[None]
        tok = torch.cat([self.cls.expand(x.shape[0], -1, -1), tok], dim=1)
        return F.cross_entropy(self.head(self.layer(tok)[:, 0]), y)


def confident_labels(module, x):
    """DeepFM's labels: its own answers at its initial weights, its bias set to center its
    logits at 0, so that right answers of both classes lie past 17 (see the file comment)."""
    with torch.no_grad():
        e = module.emb(x)
        fm = 0.5 * (e.sum(dim=1).pow(2) - e.pow(2).sum(dim=1)).sum(dim=1)
        logit = module.lin(x).sum(dim=(1, 2)) + fm + module.deep(e.flatten(1))[:, 0]
        module.bias.fill_(-logit.median().item())
        return (logit + module.bias > 0).float()


def cases():
    """name: (module class, batch(module, generator) -> (x, y))."""
    def rn(g, *shape):
        return torch.randn(*shape, generator=g)

    def ri(g, high, *shape):
        return torch.randint(0, high, shape, generator=g)

    def deepfm_batch(m, g):
        x = ri(g, 40, 8, 5)
        return x, confident_labels(m, x)

    return {
        "vae": (Vae, lambda m, g: (rn(g, 4, 64), ri(g, 5, 4))),
        "timestep_film": (TimestepFilm, lambda m, g: (rn(g, 4, 3, 8, 8), ri(g, 1000, 4))),
        "pointnet": (PointNet, lambda m, g: (rn(g, 4, 20, 3), ri(g, 5, 4))),
        "simclr": (SimClr, lambda m, g: (rn(g, 4, 3, 8, 8), ri(g, 5, 4))),
        "deepfm": (DeepFm, deepfm_batch),
        "wavenet": (WaveNet, lambda m, g: (rn(g, 2, 1, 24), ri(g, 6, 2, 24))),
        "crf": (Crf, lambda m, g: (ri(g, 30, 3, 7), ri(g, 5, 3, 7))),
        "capsules": (Capsules, lambda m, g: (rn(g, 4, 3, 16, 16), ri(g, 5, 4))),
        "perceiver": (Perceiver, lambda m, g: (rn(g, 4, 10, 4), ri(g, 5, 4))),
        "focal_mdn": (FocalMdn, lambda m, g: (rn(g, 4, 10), ri(g, 5, 4))),
        "dynamic_conv": (DynamicConv, lambda m, g: (rn(g, 4, 3, 8, 8), ri(g, 5, 4))),
        "gumbel_hard": (GumbelHard, lambda m, g: (rn(g, 4, 10), ri(g, 5, 4))),
        "ft_transformer": (FtTransformer, lambda m, g: (rn(g, 4, 6), ri(g, 5, 4))),
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_sweep_arguments(parser, "case")
    parser.add_argument("--list", action="store_true", help="print the case names and exit")
    args = parser.parse_args()
    table = cases()
    if args.list:
        print("\n".join(table))
        return
    names = [n for n in args.only.split(",") if n] or list(table)
    for name in names:
        if name not in table:
            sys.exit(f"unknown case {name!r} (see --list)")
    exporters = parse_exporters(args.exporters)
    with tempfile.TemporaryDirectory() as work:
        for name in names:
            module_class, batch = table[name]
            torch.manual_seed(0)
            module = module_class().train()
            x, y = batch(module, torch.Generator().manual_seed(1))
            for exporter in exporters:
                line = check(args.ampc, module, x, y, exporter, work, args.precision)
                print(f"{name:16s} {exporter:14s} {line}", flush=True)


if __name__ == "__main__":
    main()
