#!/usr/bin/env python3
"""PyTorch's layers, losses and tensor functions one at a time through PyTorch's exporters and
ampc's training step, with ampc's loss and one-step gradients against PyTorch's in f64.

Each case is a small module: a layer with parameters in front (a convolution for images, a
linear layer for sequences), the layer under test, and a loss (the case's own, or the mean
squared distance to a fixed random target of the output's shape). It is exported in training
mode by the TorchScript exporter and the dynamo exporter and checked as
tools/torchvision_gradient_sweep.py checks its models: the first step's loss and every
parameter's gradient after one SGD step against PyTorch's in f64, beside PyTorch's own f32
error. A case whose export ampc cannot compile or train says why, in ampc's words. The
modules some layers need around them (a reshape, a second input, scripted code) are in
tools/sweep_layers.py.

Needs torch, onnx, onnxscript and numpy from PyPI:

  venv/bin/python tools/layer_gradient_sweep.py [--ampc build/ampc] [--only hardshrink,lrn]
      [--exporters torchscript:17,dynamo:18] [--list]
"""
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torchvision_gradient_sweep import case_sweep_main  # noqa: E402
from sweep_layers import B, C, CLASSES, D, H, T, W  # noqa: E402
from sweep_layers import (  # noqa: E402
    AffineGrid,
    AttentionWithWeights,
    AutocastRegion,
    BagOf,
    BatchNormSeq,
    Bilinear,
    CellOverTime,
    Checkpointed,
    Conv1dOverTime,
    Conv3dOverChannels,
    ConvTranspose1dOverTime,
    CrossAttention,
    Ctc,
    FoldBack,
    FrozenFirst,
    GaussianNll,
    GridSample,
    GruFromState,
    IndexPut,
    LearnedGridSample,
    LstmLearnedState,
    MaxUnpool,
    OneHotLinear,
    PaddedSelfAttention,
    RaggedBagOf,
    RecurrentOutput,
    RunningMean,
    Scripted,
    SelfAttention,
    SpectralMix,
    Volume,
    WeightedBagOf,
    WithReversed)


class Lambda(nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, x):
        return self.fn(x)


class ImageCase(nn.Module):
    """A 3x3 convolution from 3 to C channels, the layer, then the squared distance to y."""

    def __init__(self, layer, channels=3):
        super().__init__()
        self.conv = nn.Conv2d(channels, C, 3, padding=1)
        self.layer = layer

    def forward(self, x, y):
        return ((self.layer(self.conv(x)) - y) ** 2).mean()


class SeqCase(nn.Module):
    """A linear layer D -> D over B x T x D, the layer, then the squared distance to y."""

    def __init__(self, layer):
        super().__init__()
        self.proj = nn.Linear(D, D)
        self.layer = layer

    def forward(self, x, y):
        out = self.layer(self.proj(x))
        if isinstance(out, tuple):  # recurrent layers and attention: their first output
            out = out[0]
        return ((out - y) ** 2).mean()


class LossCase(nn.Module):
    """A linear layer D -> `width` over B x D, then the loss against y."""

    def __init__(self, loss, width=CLASSES, activation=None):
        super().__init__()
        self.proj = nn.Linear(D, width)
        self.activation = activation or (lambda t: t)
        self.loss = loss

    def forward(self, x, y):
        return self.loss(self.activation(self.proj(x)), y)


class PairLossCase(nn.Module):
    """Two linear layers D -> D over B x D, and a loss of the two outputs and y."""

    def __init__(self, loss):
        super().__init__()
        self.a, self.b = nn.Linear(D, D), nn.Linear(D, D)
        self.loss = loss

    def forward(self, x, y):
        return self.loss(self.a(x), self.b(x), y)


class TripletCase(nn.Module):
    def __init__(self, loss):
        super().__init__()
        self.a, self.p, self.n = nn.Linear(D, D), nn.Linear(D, D), nn.Linear(D, D)
        self.loss = loss

    def forward(self, x, y):
        return self.loss(self.a(x), self.p(x), self.n(x)) + 0 * y.sum()


class EmbeddingCase(nn.Module):
    """A layer over token ids (B x T), then the squared distance to y."""

    def __init__(self, layer):
        super().__init__()
        self.layer = layer

    def forward(self, x, y):
        return ((self.layer(x) - y) ** 2).mean()


def image(layer):
    return ImageCase(layer), "image"


def seq(layer):
    return SeqCase(layer), "seq"


def fn(f):
    return Lambda(f)


def cases():
    """name -> factory of (module, kind of batch: image, seq, tokens, ctc or a flat_* target)."""
    return {
        # activations
        "hardshrink": lambda: image(nn.Hardshrink(0.1)),
        "softshrink": lambda: image(nn.Softshrink(0.1)),
        "tanhshrink": lambda: image(nn.Tanhshrink()),
        "threshold": lambda: image(nn.Threshold(0.1, -1.0)),
        "relu6": lambda: image(nn.ReLU6()),
        "hardtanh": lambda: image(nn.Hardtanh(-0.5, 0.5)),
        "celu": lambda: image(nn.CELU(0.7)),
        "selu": lambda: image(nn.SELU()),
        "elu": lambda: image(nn.ELU(0.5)),
        "leaky_relu": lambda: image(nn.LeakyReLU(0.2)),
        "prelu": lambda: image(nn.PReLU(C)),
        "glu": lambda: image(nn.GLU(dim=1)),
        "logsigmoid": lambda: image(nn.LogSigmoid()),
        "softsign": lambda: image(nn.Softsign()),
        "softplus": lambda: image(nn.Softplus(beta=2.0, threshold=1.0)),
        "hardsigmoid": lambda: image(nn.Hardsigmoid()),
        "hardswish": lambda: image(nn.Hardswish()),
        "mish": lambda: image(nn.Mish()),
        "gelu_tanh": lambda: image(nn.GELU(approximate="tanh")),
        "softmin": lambda: seq(nn.Softmin(dim=-1)),
        "log_softmax": lambda: seq(nn.LogSoftmax(dim=1)),
        # pooling
        "adaptive_max_pool_1": lambda: image(nn.AdaptiveMaxPool2d(1)),
        "adaptive_max_pool_2": lambda: image(nn.AdaptiveMaxPool2d(2)),
        "adaptive_avg_pool_3": lambda: image(nn.AdaptiveAvgPool2d(3)),
        "max_pool_ceil": lambda: image(nn.MaxPool2d(3, stride=2, ceil_mode=True)),
        "max_pool_dilated": lambda: image(nn.MaxPool2d(2, dilation=2, padding=1)),
        "avg_pool_no_pad_count": lambda: image(nn.AvgPool2d(3, stride=2, padding=1,
                                                            count_include_pad=False)),
        "avg_pool_ceil": lambda: image(nn.AvgPool2d(3, stride=2, ceil_mode=True)),
        "lp_pool": lambda: image(nn.LPPool2d(2, 2)),
        "max_pool_1d": lambda: seq(nn.MaxPool1d(2)),
        "amax": lambda: image(fn(lambda t: t.amax(dim=(2, 3)))),
        "max_unpool": lambda: image(MaxUnpool()),
        # Fourier transforms (dynamo only: TorchScript cannot export them)
        "spectral_mix": lambda: seq(SpectralMix()),
        "stft_magnitude": lambda: seq(fn(lambda t: torch.stft(
            t.reshape(B, T * D), 8, 4, window=torch.hann_window(8), center=False,
            return_complex=True).abs())),
        # normalization
        "local_response_norm": lambda: image(nn.LocalResponseNorm(3)),
        "instance_norm_affine": lambda: image(nn.InstanceNorm2d(C, affine=True)),
        "group_norm": lambda: image(nn.GroupNorm(2, C)),
        "layer_norm_2d": lambda: image(nn.LayerNorm([H, W])),
        "rms_norm": lambda: seq(nn.RMSNorm(D)),
        "batch_norm_1d": lambda: seq(Lambda(BatchNormSeq())),
        "normalize": lambda: seq(fn(lambda t: F.normalize(t, dim=-1))),
        # convolution and resampling
        "conv_1d": lambda: seq(fn(Conv1dOverTime())),
        "conv_3d": lambda: image(Conv3dOverChannels()),
        "conv_transpose_s2": lambda: image(nn.ConvTranspose2d(C, C, 3, stride=2, padding=1,
                                                              output_padding=1)),
        "conv_grouped_dilated": lambda: image(nn.Conv2d(C, C, 3, padding=2, dilation=2,
                                                        groups=2)),
        "conv_reflect": lambda: image(nn.Conv2d(C, C, 3, padding=1, padding_mode="reflect")),
        "conv_circular": lambda: image(nn.Conv2d(C, C, 3, padding=1, padding_mode="circular")),
        "conv_same": lambda: image(nn.Conv2d(C, C, 4, padding="same")),
        "upsample_nearest": lambda: image(nn.Upsample(scale_factor=2, mode="nearest")),
        "upsample_bilinear": lambda: image(nn.Upsample(scale_factor=2, mode="bilinear")),
        "upsample_bilinear_ac": lambda: image(nn.Upsample(scale_factor=2, mode="bilinear",
                                                          align_corners=True)),
        "upsample_bicubic": lambda: image(nn.Upsample(scale_factor=2, mode="bicubic")),
        "interpolate_1_5": lambda: image(fn(lambda t: F.interpolate(t, scale_factor=1.5,
                                                                    mode="bilinear"))),
        "pixel_shuffle": lambda: image(nn.PixelShuffle(2)),
        "pixel_unshuffle": lambda: image(nn.PixelUnshuffle(2)),
        "grid_sample": lambda: image(GridSample()),
        "grid_sample_border_align": lambda: image(GridSample("bilinear", "border", True)),
        "grid_sample_reflection": lambda: image(GridSample("bilinear", "reflection")),
        "grid_sample_bicubic": lambda: image(GridSample("bicubic", "zeros", True)),
        "grid_sample_nearest": lambda: image(GridSample("nearest", "reflection")),
        "grid_sample_learned_grid": lambda: image(LearnedGridSample("bilinear", "border")),
        "grid_sample_learned_grid_bicubic": lambda: image(LearnedGridSample("bicubic", "zeros")),
        "unfold": lambda: image(nn.Unfold(3, padding=1)),
        "fold": lambda: image(FoldBack()),
        "channel_shuffle": lambda: image(nn.ChannelShuffle(2)),
        "reflection_pad": lambda: image(nn.ReflectionPad2d((1, 2, 0, 1))),
        "replication_pad": lambda: image(nn.ReplicationPad2d(1)),
        "zero_pad": lambda: image(nn.ZeroPad2d((1, 0, 2, 1))),
        # tensor functions
        "cumsum": lambda: seq(fn(lambda t: torch.cumsum(t, dim=1))),
        "cumprod": lambda: seq(fn(lambda t: torch.cumprod(t, dim=1))),
        "logsumexp": lambda: seq(fn(lambda t: torch.logsumexp(t, dim=-1))),
        "var_std": lambda: seq(fn(lambda t: t.var(dim=1, keepdim=True) + t.std(dim=-1, keepdim=True))),
        "norm_p2": lambda: seq(fn(lambda t: torch.linalg.vector_norm(t, dim=-1))),
        "cosine_similarity": lambda: seq(fn(lambda t: F.cosine_similarity(t, t.flip(1),
                                                                           dim=-1))),
        "pairwise_distance": lambda: seq(fn(lambda t: F.pairwise_distance(t, t.roll(1, 1)))),
        "cdist": lambda: seq(fn(lambda t: torch.cdist(t, t.flip(1) + 0.5))),
        "einsum": lambda: seq(fn(lambda t: torch.einsum("btd,bsd->bts", t, t))),
        "baddbmm": lambda: seq(fn(lambda t: torch.baddbmm(t[:, :, :T], t, t.transpose(1, 2)))),
        "flip_roll": lambda: seq(fn(lambda t: t.flip(1) * t.roll(2, dims=2))),
        "tril_triu": lambda: seq(fn(lambda t: torch.tril(t) - torch.triu(t, 1))),
        "topk": lambda: seq(fn(lambda t: torch.topk(t, 3, dim=-1).values)),
        "sort": lambda: seq(fn(lambda t: torch.sort(t, dim=-1, descending=True).values)),
        "max_dim": lambda: seq(fn(lambda t: t.max(dim=1).values)),
        "clamp_tensor": lambda: seq(fn(lambda t: torch.clamp(t, min=-t.abs().mean(),
                                                             max=torch.tensor(0.3)))),
        "masked_fill": lambda: seq(fn(lambda t: t.masked_fill(t < 0, -2.0))),
        "where": lambda: seq(fn(lambda t: torch.where(t > 0, t * 2, t.exp()))),
        "gather": lambda: seq(fn(lambda t: torch.gather(t, 2, t.argsort(dim=2)))),
        "index_select": lambda: seq(fn(lambda t: t.index_select(2, torch.tensor([3, 0, 0, 5])))),
        "scatter_add": lambda: seq(fn(lambda t: torch.zeros_like(t).scatter_add(
            2, torch.tensor([0, 1, 1, 3, 0, 2, 7, 7]).expand_as(t).contiguous(), t))),
        "index_put": lambda: seq(fn(IndexPut())),
        "atan2": lambda: seq(fn(lambda t: torch.atan2(t, t.flip(2) + 0.5))),
        "cross": lambda: seq(fn(lambda t: torch.linalg.cross(t[..., :3], t[..., 3:6]))),
        "outer_kron": lambda: seq(fn(lambda t: torch.kron(t[0, :2, :2], t[1, :2, :2]))),
        "repeat_interleave": lambda: seq(fn(lambda t: t.repeat_interleave(2, dim=1))),
        "tensor_unfold": lambda: seq(fn(lambda t: t.unfold(1, 3, 2))),
        "pow_sqrt_rsqrt": lambda: seq(fn(lambda t: t.pow(3) + (t * t + 1).sqrt().rsqrt())),
        "trig": lambda: seq(fn(lambda t: t.sin() * t.cos() + t.tan().atan() + t.tanh().asin())),
        "erf_erfinv": lambda: seq(fn(lambda t: torch.erf(t) + torch.erfinv(torch.tanh(t) * 0.5))),
        "log1p_expm1": lambda: seq(fn(lambda t: torch.log1p(t.abs()) + torch.expm1(t))),
        "sinh_cosh": lambda: seq(fn(lambda t: t.sinh() + t.cosh() + t.asinh())),
        "reciprocal_sign": lambda: seq(fn(lambda t: (t.abs() + 1).reciprocal() * t.sign())),
        "floor_round_frac": lambda: seq(fn(lambda t: t * t.floor() + t.frac() + t.round())),
        "min_max_pair": lambda: seq(fn(lambda t: torch.maximum(t, t.flip(1))
                                       - torch.minimum(t, t.roll(1, 2)))),
        "prod": lambda: seq(fn(lambda t: t.prod(dim=-1))),
        "mean_dims": lambda: seq(fn(lambda t: t.mean(dim=(0, 2), keepdim=True) * t)),
        # recurrent layers and attention
        "rnn_tanh": lambda: seq(nn.RNN(D, D, batch_first=True)),
        "rnn_relu_2layer": lambda: seq(nn.RNN(D, D, num_layers=2, nonlinearity="relu",
                                              batch_first=True)),
        "lstm_bidirectional": lambda: seq(RecurrentOutput(nn.LSTM(
            D, D // 2, num_layers=2, bidirectional=True, batch_first=True))),
        "lstm_proj": lambda: seq(nn.LSTM(D, 10, proj_size=D, batch_first=True)),
        "gru": lambda: seq(nn.GRU(D, D, batch_first=True)),
        "multihead_attention": lambda: seq(SelfAttention(nn.MultiheadAttention(D, 2,
                                                                               batch_first=True))),
        "mha_kdim": lambda: seq(CrossAttention()),
        "sdpa_causal": lambda: seq(fn(lambda t: F.scaled_dot_product_attention(
            t[:, None], t[:, None], t[:, None], is_causal=True)[:, 0])),
        "transformer_encoder": lambda: seq(nn.TransformerEncoderLayer(
            D, 2, 16, dropout=0.0, batch_first=True)),
        "transformer_encoder_prenorm_gelu": lambda: seq(nn.TransformerEncoderLayer(
            D, 2, 16, dropout=0.0, activation="gelu", norm_first=True, batch_first=True)),
        "transformer_decoder": lambda: seq(WithReversed(nn.TransformerDecoderLayer(
            D, 2, 16, dropout=0.0, batch_first=True))),
        "bilinear": lambda: seq(fn(Bilinear())),
        # scripted control flow (torch.jit.script), which the TorchScript exporter writes as
        # ONNX Loops (dynamo traces through it): a for-loop over time carrying a state and
        # collecting a list, and a while-loop with a stride
        "scripted_for_loop": lambda: seq(Scripted("recurrence")),
        "scripted_while_loop": lambda: seq(Scripted("strided_sum")),
        # embeddings
        "embedding_bag_sum": lambda: (EmbeddingCase(BagOf(nn.EmbeddingBag(CLASSES * 2, D,
                                                                          mode="sum"))),
                                      "tokens"),
        "embedding_bag_mean": lambda: (EmbeddingCase(BagOf(nn.EmbeddingBag(CLASSES * 2, D))),
                                       "tokens"),
        "embedding_bag_max": lambda: (EmbeddingCase(BagOf(nn.EmbeddingBag(CLASSES * 2, D,
                                                                          mode="max"))),
                                      "tokens"),
        "embedding_bag_offsets_sum": lambda: (EmbeddingCase(RaggedBagOf(nn.EmbeddingBag(
            CLASSES * 2, D, mode="sum"))), "tokens"),
        "embedding_bag_offsets_mean": lambda: (EmbeddingCase(RaggedBagOf(nn.EmbeddingBag(
            CLASSES * 2, D))), "tokens"),
        "embedding_bag_offsets_max": lambda: (EmbeddingCase(RaggedBagOf(nn.EmbeddingBag(
            CLASSES * 2, D, mode="max"))), "tokens"),
        "embedding_max_norm": lambda: (EmbeddingCase(nn.Embedding(CLASSES * 2, D, max_norm=1.0)),
                                       "tokens"),
        "one_hot": lambda: (EmbeddingCase(OneHotLinear()), "tokens"),
        # losses
        "l1": lambda: (LossCase(nn.L1Loss()), "flat_target"),
        "smooth_l1": lambda: (LossCase(nn.SmoothL1Loss(beta=0.5)), "flat_target"),
        "huber": lambda: (LossCase(nn.HuberLoss(delta=0.5)), "flat_target"),
        "mse_sum": lambda: (LossCase(nn.MSELoss(reduction="sum")), "flat_target"),
        "bce": lambda: (LossCase(nn.BCELoss(), activation=torch.sigmoid), "flat_prob"),
        "bce_logits_pos_weight": lambda: (LossCase(nn.BCEWithLogitsLoss(
            pos_weight=torch.linspace(0.5, 2, CLASSES))), "flat_prob"),
        "kl_div": lambda: (LossCase(nn.KLDivLoss(reduction="batchmean"),
                                    activation=lambda t: F.log_softmax(t, -1)), "flat_dist"),
        "soft_margin": lambda: (LossCase(nn.SoftMarginLoss()), "flat_sign"),
        "multilabel_soft_margin": lambda: (LossCase(nn.MultiLabelSoftMarginLoss()),
                                           "flat_prob"),
        "poisson_nll": lambda: (LossCase(nn.PoissonNLLLoss()), "flat_count"),
        "gaussian_nll": lambda: (GaussianNll(), "flat_target"),
        "cross_entropy_smoothing": lambda: (LossCase(nn.CrossEntropyLoss(label_smoothing=0.1)),
                                            "flat_class"),
        "cross_entropy_weight_ignore": lambda: (LossCase(nn.CrossEntropyLoss(
            weight=torch.linspace(0.5, 2, CLASSES), ignore_index=1)), "flat_class"),
        "cross_entropy_probs": lambda: (LossCase(nn.CrossEntropyLoss()), "flat_dist"),
        "nll": lambda: (LossCase(nn.NLLLoss(), activation=lambda t: F.log_softmax(t, -1)),
                        "flat_class"),
        "multi_margin": lambda: (LossCase(nn.MultiMarginLoss()), "flat_class"),
        "cosine_embedding": lambda: (PairLossCase(nn.CosineEmbeddingLoss(0.1)), "flat_sign1"),
        "margin_ranking": lambda: (PairLossCase(lambda a, b, y: nn.MarginRankingLoss(0.1)(
            a[:, 0], b[:, 0], y)), "flat_sign1"),
        "hinge_embedding": lambda: (LossCase(nn.HingeEmbeddingLoss()), "flat_sign"),
        "triplet_margin": lambda: (TripletCase(nn.TripletMarginLoss()), "flat_target"),
        "ctc": lambda: (Ctc(), "ctc"),
        # more layers and tensor functions
        "weight_norm": lambda: seq(nn.utils.parametrizations.weight_norm(nn.Linear(D, D))),
        "lstm_cell": lambda: seq(CellOverTime(nn.LSTMCell(D, D))),
        "gru_cell": lambda: seq(CellOverTime(nn.GRUCell(D, D))),
        "conv_transpose_1d": lambda: seq(ConvTranspose1dOverTime()),
        "conv_transpose_out_pad_groups": lambda: image(nn.ConvTranspose2d(
            C, C, 3, stride=2, padding=1, output_padding=1, groups=2)),
        "adaptive_avg_pool_1d": lambda: seq(nn.AdaptiveAvgPool1d(3)),
        "softmax2d": lambda: image(nn.Softmax2d()),
        "layer_norm_no_bias": lambda: seq(nn.LayerNorm(D, bias=False)),
        "diff": lambda: seq(fn(lambda t: torch.diff(t, dim=1))),
        "quantile": lambda: seq(fn(lambda t: torch.quantile(t, 0.3, dim=-1))),
        "logcumsumexp": lambda: seq(fn(lambda t: torch.logcumsumexp(t, dim=1))),
        "vector_norm_3": lambda: seq(fn(lambda t: torch.linalg.vector_norm(t, ord=3, dim=-1))),
        "addcmul_lerp": lambda: seq(fn(lambda t: torch.addcmul(t, t, t.flip(2), value=0.5)
                                       + torch.lerp(t, t.flip(1), 0.3))),
        "xlogy": lambda: seq(fn(lambda t: torch.xlogy(t.abs(), t.abs() + 1))),
        "logit_sinc": lambda: seq(fn(lambda t: torch.logit(torch.sigmoid(t), 1e-3)
                                     + torch.sinc(t))),
        "remainder": lambda: seq(fn(lambda t: t * torch.remainder(t, 0.7))),
        "nan_to_num": lambda: seq(fn(lambda t: torch.nan_to_num(t.log()))),
        "sdpa_bool_mask": lambda: seq(fn(lambda t: F.scaled_dot_product_attention(
            t[:, None], t[:, None], t[:, None],
            attn_mask=torch.ones(T, T, dtype=torch.bool).tril())[:, 0])),
        "affine_grid": lambda: image(AffineGrid()),
        "embedding_padding_idx": lambda: (EmbeddingCase(nn.Embedding(CLASSES * 2, D,
                                                                     padding_idx=0)), "tokens"),
        "cross_entropy_2d": lambda: image(fn(lambda t: F.cross_entropy(
            t, (t.detach().sum(1) > 0).long() * 3, reduction="none"))),
        "multilabel_margin": lambda: (LossCase(nn.MultiLabelMarginLoss()), "flat_labels"),
        # random ops, used so that the result does not depend on the draw
        "randn_like": lambda: image(fn(lambda t: t + 0.0 * torch.randn_like(t))),
        "rand_like": lambda: image(fn(lambda t: t * (torch.rand_like(t) >= 0).float())),
        "bernoulli": lambda: image(fn(lambda t: t * torch.bernoulli(torch.ones_like(t)))),
        "dropout2d": lambda: image(nn.Dropout2d(0.0)),
        "alpha_dropout": lambda: image(nn.AlphaDropout(0.0)),
        "rrelu": lambda: image(nn.RReLU(0.25, 0.25)),
        # 3-D layers, more normalizations, resampling and convolutions
        "max_pool_3d": lambda: image(Volume(nn.MaxPool3d(2, stride=(1, 2, 2)))),
        "avg_pool_3d": lambda: image(Volume(nn.AvgPool3d(3, stride=2, padding=1))),
        "conv_transpose_3d": lambda: image(Volume(nn.ConvTranspose3d(1, 2, 3, stride=2,
                                                                     padding=1))),
        "upsample_trilinear": lambda: image(Volume(nn.Upsample(scale_factor=2,
                                                               mode="trilinear"))),
        "instance_norm_1d": lambda: seq(nn.InstanceNorm1d(T, affine=True)),
        "group_norm_one_group": lambda: image(nn.GroupNorm(1, C)),
        "layer_norm_no_affine": lambda: seq(nn.LayerNorm(D, elementwise_affine=False)),
        "interpolate_area": lambda: image(fn(lambda t: F.interpolate(t, size=(3, 5),
                                                                     mode="area"))),
        "interpolate_nearest_exact": lambda: image(fn(lambda t: F.interpolate(
            t, scale_factor=1.5, mode="nearest-exact"))),
        "upsample_to_size": lambda: image(nn.Upsample(size=(5, 11), mode="bilinear")),
        "depthwise_no_bias": lambda: image(nn.Conv2d(C, C, 3, padding=1, groups=C, bias=False)),
        "conv_transpose_dilated": lambda: image(nn.ConvTranspose2d(C, C, 3, dilation=2)),
        "unfold_strided_dilated": lambda: image(nn.Unfold(3, dilation=2, padding=2, stride=2)),
        "pad_negative": lambda: image(fn(lambda t: F.pad(t, (-1, 2, 1, -2)))),
        "flatten_unflatten": lambda: image(nn.Sequential(nn.Flatten(1),
                                                         nn.Unflatten(1, (C * H, W)))),
        # more tensor functions (scatter_reduce 'mean' through dynamo and index_add through
        # TorchScript are written as scatters without a reduction: ampc warns, and differs)
        "scatter_reduce_amax": lambda: seq(fn(lambda t: torch.zeros_like(t).scatter_reduce(
            2, torch.tensor([0, 1, 1, 3, 0, 2, 7, 7]).expand_as(t).contiguous(), t, "amax",
            include_self=False))),
        "scatter_reduce_mean": lambda: seq(fn(lambda t: torch.zeros_like(t).scatter_reduce(
            2, torch.tensor([0, 1, 1, 3, 0, 2, 7, 7]).expand_as(t).contiguous(), t, "mean"))),
        "index_add": lambda: seq(fn(lambda t: torch.zeros_like(t).index_add(
            1, torch.tensor([0, 2, 2, 5, 1, 0]), t))),
        "take_along_dim": lambda: seq(fn(lambda t: torch.take_along_dim(
            t, t.argmax(-1, keepdim=True), -1))),
        "chunk_uneven": lambda: seq(fn(lambda t: torch.cat(
            [c * (i + 1) for i, c in enumerate(t.chunk(3, dim=-1))], -1))),
        "tensor_split": lambda: seq(fn(lambda t: sum(
            c.sum(-1, keepdim=True) for c in torch.tensor_split(t, (1, 5), dim=2)))),
        "narrow_movedim": lambda: seq(fn(lambda t: t.narrow(2, 1, 5).movedim(1, 2))),
        "unbind_stack": lambda: seq(fn(lambda t: torch.stack(list(reversed(t.unbind(1))), 2))),
        "std_mean": lambda: seq(fn(lambda t: torch.std_mean(t, dim=-1, correction=0)[0][..., None]
                                   * t)),
        "logaddexp": lambda: seq(fn(lambda t: torch.logaddexp(t, t.flip(1)))),
        "silu_gelu": lambda: image(fn(lambda t: F.silu(t) + F.gelu(t))),
        "einsum_diagonal": lambda: seq(fn(lambda t: torch.einsum("bii->bi", t[:, :, :T]))),
        "diag_embed": lambda: seq(fn(lambda t: torch.diag_embed(t[:, 0]))),
        "diagonal_offset": lambda: seq(fn(lambda t: torch.diagonal(t, offset=1, dim1=1, dim2=2))),
        "inverse_trig": lambda: seq(fn(lambda t: torch.tanh(t).acos()
                                       + torch.atanh(torch.tanh(t) * 0.5)
                                       + (t.abs() + 1).acosh())),
        "pow_tensor_exponent": lambda: seq(fn(lambda t: (t.abs() + 0.5) ** t.flip(1))),
        "log_softmax_batch_axis": lambda: seq(fn(lambda t: F.log_softmax(t, dim=0))),
        "xlog1py_entr": lambda: seq(fn(lambda t: torch.special.xlog1py(t, t.abs())
                                       + torch.special.entr(t.sigmoid()))),
        "cumsum_reverse": lambda: seq(fn(lambda t: t.flip(1).cumsum(1).flip(1))),
        "bucketize": lambda: seq(fn(lambda t: t * torch.bucketize(
            t, torch.tensor([-0.5, 0.0, 0.5])).float())),
        "softmax_minus_inf": lambda: seq(fn(lambda t: F.softmax(
            t.masked_fill(torch.arange(D) > 5, float("-inf")), -1))),
        "clamp_min_max_scalars": lambda: seq(fn(lambda t: t.clamp_min(0.1) * t.clamp_max(-0.1))),
        "linear_of_a_vector": lambda: seq(fn(lambda t: F.linear(t[0, 0], t[1]))),
        "mha_key_padding": lambda: seq(PaddedSelfAttention()),
        "lstm_learned_state": lambda: seq(LstmLearnedState()),
        "gru_bidirectional": lambda: seq(RecurrentOutput(nn.GRU(
            D, D // 2, num_layers=2, bidirectional=True, batch_first=True))),
        "embedding_scale_grad_by_freq": lambda: (EmbeddingCase(
            nn.Embedding(CLASSES * 2, D, scale_grad_by_freq=True)), "tokens"),
        # more losses
        "kl_div_log_target": lambda: (LossCase(nn.KLDivLoss(reduction="batchmean",
                                                            log_target=True),
                                               activation=lambda t: F.log_softmax(t, -1)),
                                      "flat_log_dist"),
        "bce_weight": lambda: (LossCase(nn.BCELoss(weight=torch.linspace(0.5, 2, CLASSES)),
                                        activation=torch.sigmoid), "flat_prob"),
        "triplet_cosine_distance": lambda: (TripletCase(nn.TripletMarginWithDistanceLoss(
            distance_function=lambda a, b: 1 - F.cosine_similarity(a, b), margin=0.5)),
            "flat_target"),
        "multi_margin_p2_weight": lambda: (LossCase(nn.MultiMarginLoss(
            p=2, margin=0.5, weight=torch.linspace(0.5, 2, CLASSES))), "flat_class"),
        "nll_sum_ignore": lambda: (LossCase(nn.NLLLoss(reduction="sum", ignore_index=2),
                                            activation=lambda t: F.log_softmax(t, -1)),
                                   "flat_class"),
        "huber_sum": lambda: (LossCase(nn.HuberLoss(reduction="sum", delta=2.0)), "flat_target"),
        # detach(): ONNX cannot say it; dynamo's FX metadata keeps it, TorchScript's export
        # loses it (so those differ, as the file computes another gradient)
        "detach": lambda: seq(fn(lambda t: t * t.detach().exp())),
        "straight_through_argmax": lambda: seq(fn(lambda t: t + (
            F.one_hot(t.argmax(-1), D).to(t.dtype) - t).detach())),
        "distillation_detached_targets": lambda: (LossCase(lambda a, y: F.cross_entropy(
            a, F.softmax(a * 2, -1).detach()) + F.cross_entropy(a, y)), "flat_class"),
        # more of the layers models are built from
        "mha_bias_kv_zero_attn": lambda: seq(SelfAttention(nn.MultiheadAttention(
            D, 2, add_bias_kv=True, add_zero_attn=True, batch_first=True))),
        "mha_need_weights": lambda: seq(AttentionWithWeights()),
        "transformer": lambda: seq(WithReversed(nn.Transformer(D, 2, 1, 1, 16, dropout=0.0,
                                                                batch_first=True))),
        "embedding_bag_per_sample_weights": lambda: (EmbeddingCase(WeightedBagOf()), "tokens"),
        "gru_initial_state": lambda: seq(GruFromState()),
        "conv_replicate": lambda: image(nn.Conv2d(C, C, 3, padding=1, padding_mode="replicate")),
        "upsample_bicubic_ac": lambda: image(nn.Upsample(scale_factor=2, mode="bicubic",
                                                         align_corners=True)),
        "interpolate_antialias": lambda: image(fn(lambda t: F.interpolate(
            t, size=(5, 5), mode="bilinear", antialias=True))),
        "pixel_shuffle_3": lambda: image(nn.Sequential(nn.Conv2d(C, 9, 1), nn.PixelShuffle(3))),
        "softplus_past_threshold": lambda: seq(fn(lambda t: F.softplus(t * 30))),
        # x[mask]: rows whose count depends on the data
        "masked_select_mse": lambda: (LossCase(lambda a, y: ((a[y > 0] - y[y > 0]) ** 2).mean()),
                                      "flat_target"),
        "masked_select_l1_sum": lambda: (LossCase(
            lambda a, y: torch.masked_select(a, y > 0).abs().sum()), "flat_target"),
        "masked_mean": lambda: seq(fn(lambda t: (t * (t > 0)).sum(1)
                                      / (t > 0).sum(1).clamp_min(1))),
        "matrix_norm": lambda: seq(fn(lambda t: torch.linalg.matrix_norm(t, keepdim=True) * t)),
        "amin_two_axes": lambda: image(fn(lambda t: t.amin(dim=(1, 3)))),
        "cross_entropy_sum": lambda: (LossCase(nn.CrossEntropyLoss(reduction="sum")),
                                      "flat_class"),
        "bce_logits_weight_sum": lambda: (LossCase(nn.BCEWithLogitsLoss(
            weight=torch.linspace(0.5, 2, CLASSES), reduction="sum")), "flat_prob"),
        "poisson_nll_full": lambda: (LossCase(nn.PoissonNLLLoss(log_input=False, full=True),
                                              activation=F.softplus), "flat_count"),
        "smooth_l1_beta_0": lambda: (LossCase(nn.SmoothL1Loss(beta=0.0)), "flat_target"),
        # what training code wraps around layers
        "checkpoint": lambda: seq(Checkpointed()),
        "frozen_layer": lambda: seq(FrozenFirst()),
        "autocast_region": lambda: seq(AutocastRegion()),
        "spectral_norm": lambda: seq(nn.utils.parametrizations.spectral_norm(nn.Linear(D, D))),
        "running_mean_buffer": lambda: seq(RunningMean()),
    }


def batch(kind, module, g):
    """x and y for a case's module."""
    if kind in ("image", "seq"):
        x = torch.randn((B, 3, H, W) if kind == "image" else (B, T, D), generator=g)
        inner = module.layer(module.conv(x) if kind == "image" else module.proj(x))
        if isinstance(inner, tuple):
            inner = inner[0]
        return x, torch.randn(inner.shape, generator=g)
    if kind == "tokens":
        x = torch.randint(0, CLASSES * 2, (B, T), generator=g)
        return x, torch.randn(module.layer(x).shape, generator=g)
    x = torch.randn(B, D, generator=g)
    if kind == "ctc":
        return torch.randn(B, T, D, generator=g), torch.randint(1, CLASSES, (B, 3), generator=g)
    return x, {
        "flat_target": lambda: torch.randn(B, CLASSES, generator=g),
        "flat_prob": lambda: torch.rand(B, CLASSES, generator=g),
        "flat_dist": lambda: torch.softmax(torch.randn(B, CLASSES, generator=g), -1),
        "flat_log_dist": lambda: torch.log_softmax(torch.randn(B, CLASSES, generator=g), -1),
        "flat_sign": lambda: torch.randint(0, 2, (B, CLASSES), generator=g).float() * 2 - 1,
        "flat_sign1": lambda: torch.randint(0, 2, (B,), generator=g).float() * 2 - 1,
        "flat_count": lambda: torch.randint(0, 4, (B, CLASSES), generator=g).float(),
        "flat_class": lambda: torch.randint(0, CLASSES, (B,), generator=g),
        "flat_labels": lambda: torch.tensor([[3, 0, -1, 1, 2], [1, -1, 0, 0, 0]]),
    }[kind]()


def main():
    table = cases()

    def build(name):
        module, kind = table[name]()
        module.train()
        return (module, *batch(kind, module, torch.Generator().manual_seed(1)))

    case_sweep_main(__doc__.splitlines()[0], table, build, width=34)


if __name__ == "__main__":
    main()
