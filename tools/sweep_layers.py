"""The modules tools/layer_gradient_sweep.py puts between its cases' front layers and losses:
layers that need a reshape around them, a second input or state, and scripted code.
"""
import warnings
from typing import List

import torch
import torch.nn as nn
import torch.nn.functional as F

B, C, H, W = 2, 4, 8, 8  # image batches
T, D = 6, 8  # sequence batches: B x T x D
CLASSES = 5


class CellOverTime(nn.Module):
    """A recurrent cell stepped over the T positions of a sequence."""

    def __init__(self, cell):
        super().__init__()
        self.cell = cell

    def forward(self, x):
        state, outputs = None, []
        for t in range(x.shape[1]):
            state = self.cell(x[:, t], state)
            outputs.append(state[0] if isinstance(state, tuple) else state)
        return torch.stack(outputs, 1)


class ConvTranspose1dOverTime(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.ConvTranspose1d(D, D, 3, stride=2, padding=1, dilation=2)

    def forward(self, x):
        return self.conv(x.transpose(1, 2))


class AffineGrid(nn.Module):
    """A learned affine transform of the image, as a spatial transformer applies it."""

    def __init__(self):
        super().__init__()
        self.theta = nn.Parameter(torch.tensor([[0.93, 0.11, 0.013], [-0.07, 0.87, 0.052]]))

    def forward(self, x):
        grid = F.affine_grid(self.theta.expand(x.shape[0], 2, 3), list(x.shape),
                             align_corners=False)
        return F.grid_sample(x, grid, align_corners=False)


class MaxUnpool(nn.Module):
    def __init__(self):
        super().__init__()
        self.pool = nn.MaxPool2d(2, return_indices=True)
        self.unpool = nn.MaxUnpool2d(2)

    def forward(self, x):
        out, indices = self.pool(x)
        return self.unpool(out, indices)


class SpectralMix(nn.Module):
    """A Fourier layer over time: the one-sided spectrum weighted per frequency, back to time."""

    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(T // 2 + 1, 1))

    def forward(self, x):
        return torch.fft.irfft(torch.fft.rfft(x, dim=1) * self.weight, n=T, dim=1)


class BatchNormSeq(nn.Module):
    def __init__(self):
        super().__init__()
        self.bn = nn.BatchNorm1d(D)

    def forward(self, x):
        return self.bn(x.transpose(1, 2)).transpose(1, 2)


class Conv1dOverTime(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv1d(D, D, 3, padding=1, stride=1)

    def forward(self, x):
        return self.conv(x.transpose(1, 2)).transpose(1, 2)


class Conv3dOverChannels(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv3d(1, 2, 3, padding=1)

    def forward(self, x):
        return self.conv(x[:, None]).flatten(1, 2)


class GridSample(nn.Module):
    """A spatial transformer's sampler: an affine grid of trained parameters that reaches past
    the image's edges (so the padding mode matters)."""

    def __init__(self, mode="bilinear", padding_mode="zeros", align_corners=False):
        super().__init__()
        self.theta = nn.Parameter(torch.tensor([[1.15, 0.2, 0.05], [-0.15, 1.1, 0.1]]))
        self.options = dict(mode=mode, padding_mode=padding_mode, align_corners=align_corners)

    def forward(self, x):
        grid = F.affine_grid(self.theta.expand(x.shape[0], 2, 3), list(x.shape),
                             align_corners=self.options["align_corners"])
        return F.grid_sample(x, grid, **self.options)


class LearnedGridSample(nn.Module):
    """A trained sampling grid (optical-flow style), which TorchScript exports too (it cannot
    export affine_grid)."""

    def __init__(self, mode, padding_mode):
        super().__init__()
        ys, xs = torch.meshgrid(torch.linspace(-1.2, 1.2, H), torch.linspace(-1.1, 1.3, W),
                                indexing="ij")
        self.grid = nn.Parameter(torch.stack([xs * 0.9 + 0.05 * ys, ys], dim=-1)[None])
        self.options = dict(mode=mode, padding_mode=padding_mode, align_corners=False)

    def forward(self, x):
        return F.grid_sample(x, self.grid.expand(x.shape[0], -1, -1, -1), **self.options)


class FoldBack(nn.Module):
    def __init__(self):
        super().__init__()
        self.unfold = nn.Unfold(2, stride=2)
        self.fold = nn.Fold((H, W), 2, stride=2)

    def forward(self, x):
        return self.fold(self.unfold(x) * 2)


class IndexPut(nn.Module):
    def forward(self, t):
        out = t.clone()
        out[:, 1] = t[:, 2] * 3
        return out


class RecurrentOutput(nn.Module):
    """A recurrent layer's output sequence, without its final states."""

    def __init__(self, rnn):
        super().__init__()
        self.rnn = rnn

    def forward(self, x):
        return self.rnn(x)[0]


class SelfAttention(nn.Module):
    def __init__(self, mha):
        super().__init__()
        self.mha = mha

    def forward(self, x):
        return self.mha(x, x, x, need_weights=False)[0]


class CrossAttention(nn.Module):
    def __init__(self):
        super().__init__()
        self.mha = nn.MultiheadAttention(D, 2, kdim=4, vdim=6, batch_first=True)

    def forward(self, x):
        return self.mha(x, x[..., :4], x[..., 2:], need_weights=False)[0]


class WithReversed(nn.Module):
    """module(x, x reversed in time, tgt_mask=causal): a decoder layer (target x, memory the
    reversed x) or a whole nn.Transformer (source x, target the reversed x)."""

    def __init__(self, module):
        super().__init__()
        self.module = module

    def forward(self, x):
        mask = nn.Transformer.generate_square_subsequent_mask(x.shape[1])
        return self.module(x, x.flip(1), tgt_mask=mask)


class Bilinear(nn.Module):
    def __init__(self):
        super().__init__()
        self.bilinear = nn.Bilinear(D, D, D)

    def forward(self, x):
        return self.bilinear(x, x.flip(1))


def recurrence(x):
    h = torch.zeros_like(x[:, 0])
    states: List[torch.Tensor] = []
    for t in range(x.size(1)):
        h = torch.tanh(x[:, t] + 0.5 * h)
        states.append(h)
    return torch.stack(states, 1)


def strided_sum(x):
    total = torch.zeros_like(x[:, 0])
    t = 0
    while t < x.size(1):
        total = total * 0.9 + x[:, t] * x[:, t]
        t += 2
    return total


with warnings.catch_warnings():  # torch.jit.script is deprecated, and still what people export
    warnings.simplefilter("ignore", FutureWarning)
    SCRIPTED = {"recurrence": torch.jit.script(recurrence),
                "strided_sum": torch.jit.script(strided_sum)}
class Scripted(nn.Module):
    """A scripted function, named (the cases are deep-copied; a ScriptFunction is not)."""

    def __init__(self, name):
        super().__init__()
        self.name = name

    def forward(self, x):
        return SCRIPTED[self.name](x)


class BagOf(nn.Module):
    def __init__(self, bag):
        super().__init__()
        self.bag = bag

    def forward(self, ids):
        return self.bag(ids)  # 2-D input: one bag per row


class RaggedBagOf(nn.Module):
    """Bags of varying length over the flattened ids, their offsets computed from the data (as
    a data pipeline passes them): bag i starts after the x[j, 0] % 3 + 1 ids of each bag j < i,
    the last takes the rest."""

    def __init__(self, bag):
        super().__init__()
        self.bag = bag

    def forward(self, ids):
        lengths = ids[:, 0] % 3 + 1
        return self.bag(ids.flatten(), torch.cumsum(lengths, 0) - lengths)


class OneHotLinear(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(CLASSES * 2, D)

    def forward(self, ids):
        return self.proj(F.one_hot(ids, CLASSES * 2).to(self.proj.weight.dtype))


class GaussianNll(nn.Module):
    def __init__(self):
        super().__init__()
        self.mean, self.var = nn.Linear(D, CLASSES), nn.Linear(D, CLASSES)

    def forward(self, x, y):
        return nn.GaussianNLLLoss()(self.mean(x), y, F.softplus(self.var(x)) + 0.1)


class Ctc(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(D, CLASSES)

    def forward(self, x, y):
        logp = F.log_softmax(self.proj(x), -1).transpose(0, 1)  # T x B x classes
        lengths = torch.full((x.shape[0],), x.shape[1], dtype=torch.long)
        return F.ctc_loss(logp, y, lengths, torch.full((x.shape[0],), 3, dtype=torch.long))

class Volume(nn.Module):
    """B x C x H x W as one-channel volumes (B x 1 x C x H x W), a 3-D layer, then flattened
    back to B x C' x H' x W'."""

    def __init__(self, layer):
        super().__init__()
        self.layer = layer

    def forward(self, x):
        return self.layer(x[:, None]).flatten(1, 2)


class PaddedSelfAttention(nn.Module):
    """Self-attention that masks each sequence's last two positions as padding."""

    def __init__(self):
        super().__init__()
        self.mha = nn.MultiheadAttention(D, 2, batch_first=True)

    def forward(self, x):
        padding = torch.zeros(x.shape[0], x.shape[1], dtype=torch.bool)
        padding[:, -2:] = True
        return self.mha(x, x, x, key_padding_mask=padding, need_weights=False)[0]


class LstmLearnedState(nn.Module):
    """A time-major LSTM whose initial hidden state is a parameter."""

    def __init__(self):
        super().__init__()
        self.lstm = nn.LSTM(D, D)
        self.h0 = nn.Parameter(torch.randn(1, 1, D) * 0.1)

    def forward(self, x):
        h0 = self.h0.expand(1, x.shape[0], D).contiguous()
        return self.lstm(x.transpose(0, 1), (h0, torch.zeros_like(h0)))[0].transpose(0, 1)


class AttentionWithWeights(nn.Module):
    """Self-attention whose averaged attention weights are used as well as its output."""

    def __init__(self):
        super().__init__()
        self.mha = nn.MultiheadAttention(D, 2, batch_first=True)

    def forward(self, x):
        out, weights = self.mha(x, x, x, need_weights=True, average_attn_weights=True)
        return out + weights.sum(-1, keepdim=True)


class WeightedBagOf(nn.Module):
    """A sum bag per row with per-sample weights computed from the ids."""

    def __init__(self):
        super().__init__()
        self.bag = nn.EmbeddingBag(CLASSES * 2, D, mode="sum")

    def forward(self, ids):
        return self.bag(ids, per_sample_weights=(ids + 1).to(self.bag.weight.dtype) / 10)


class GruFromState(nn.Module):
    """A GRU whose initial state is the sequence's first position."""

    def __init__(self):
        super().__init__()
        self.gru = nn.GRU(D, D, batch_first=True)

    def forward(self, x):
        return self.gru(x, x[:, 0][None].contiguous())[0]



class Checkpointed(nn.Module):
    """Two linear layers with a GELU between them under activation checkpointing."""

    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(D, D), nn.Linear(D, D)

    def forward(self, x):
        from torch.utils.checkpoint import checkpoint
        return checkpoint(lambda t: self.b(F.gelu(self.a(t))), x, use_reentrant=False)


class FrozenFirst(nn.Module):
    """A frozen linear layer (requires_grad False: `ampc compile --freeze` names it), a tanh and
    a trained one."""

    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(D, D), nn.Linear(D, D)
        self.a.requires_grad_(False)

    def forward(self, x):
        return self.b(torch.tanh(self.a(x)))


class AutocastRegion(nn.Module):
    """A linear layer under CPU autocast to bf16 inside the forward."""

    def __init__(self):
        super().__init__()
        self.a = nn.Linear(D, D)

    def forward(self, x):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            h = self.a(x)
        return h.float() * 2


class RunningMean(nn.Module):
    """A linear layer whose output the module centres by a running mean it updates in place (a
    buffer), and a step counter it keeps (another)."""

    def __init__(self):
        super().__init__()
        self.a = nn.Linear(D, D)
        self.register_buffer("mean", torch.zeros(D))
        self.register_buffer("count", torch.zeros(()))

    def forward(self, x):
        h = self.a(x)
        with torch.no_grad():
            self.mean.mul_(0.5).add_(0.5 * h.mean((0, 1)).detach())
            self.count += 1
        return (h - self.mean) * (1 + self.count / 10)
