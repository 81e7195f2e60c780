#!/usr/bin/env python3
"""Whole architectures outside the other sweeps through PyTorch's exporters and ampc's training
step, with ampc's loss and one-step gradients against PyTorch's in f64.

Each case is a small module (tools/sweep_architectures.py) that returns its own loss from a
batch (x, y): a VAE (its noise a buffer), a timestep-conditioned convolution (sinusoidal
embedding, FiLM), PointNet (a learned 3x3 transform, a max over points), SimCLR's contrastive
loss (a masked similarity matrix), DeepFM, a gated WaveNet (causal dilated convolutions), a
linear-chain CRF (the forward algorithm unrolled), capsules with routing by agreement, a
Perceiver (cross-attention from learned latents), focal and mixture-density losses, a
hypernetwork's per-sample convolution (one grouped convolution whose weight is computed), a hard
Gumbel-softmax (straight-through), an FT-Transformer, an LSTM encoder-decoder with additive
attention (an LSTMCell unrolled), a neural ODE (RK4 steps), StyleGAN2's modulated convolution, a
graph attention layer (scatter softmax), DCN v2, TabNet's sparsemax masks, RealNVP, VQ-VAE, a
batch-hard triplet loss, ArcFace, a character CNN with highway layers, and a U-Net with a Dice
loss. Each is exported in training mode and checked as tools/torchvision_gradient_sweep.py
checks its models (the labels of a model whose loss does not read them, which TorchScript drops,
are not fed; PyTorch cannot run the encoder-decoder's LSTM under CPU autocast at fp16, and the
sweep says so). DeepFM's labels are its own answers at its initial weights, so its logits for
the right class reach past 17, where 1 - sigmoid is 0 in f32 (TorchScript writes
binary_cross_entropy_with_logits through log(1 - sigmoid)).

What the files cannot say shows as a gap: TorchScript writes no `detach()` (gumbel_hard,
vq_vae), and writes `index_add` as a scatter without reduction (gat; at opset 17 it also writes
the `amax` scatter with a reduction ONNX admits from 18 only).

Needs torch, onnx, onnxscript and numpy from PyPI:

  venv/bin/python tools/architecture_sweep.py [--ampc build/ampc] [--only crf,deepfm]
      [--exporters torchscript:17,dynamo:18] [--precision fp16] [--list]
"""
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torchvision_gradient_sweep import case_sweep_main  # noqa: E402
from sweep_architectures import (  # noqa: E402
    ArcFace,
    BatchHardTriplet,
    Capsules,
    Crf,
    DcnV2,
    DeepFm,
    DiceUnet,
    DynamicConv,
    FocalMdn,
    FtTransformer,
    Gat,
    GumbelHard,
    HighwayCharCnn,
    ModulatedConv,
    NeuralOde,
    Perceiver,
    PointNet,
    RealNvp,
    Seq2SeqAttention,
    SimClr,
    Sparsemax,
    TimestepFilm,
    Vae,
    VqVae,
    WaveNet,
    confident_labels,
)


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
        "seq2seq_attention": (Seq2SeqAttention, lambda m, g: (ri(g, 20, 3, 6), ri(g, 20, 3, 5))),
        "neural_ode": (NeuralOde, lambda m, g: (rn(g, 4, 6), ri(g, 5, 4))),
        "modulated_conv": (ModulatedConv, lambda m, g: (rn(g, 4, 3, 8, 8), ri(g, 5, 4))),
        "gat": (Gat, lambda m, g: (rn(g, 10, 8), ri(g, 3, 10))),
        "dcn_v2": (DcnV2, lambda m, g: (rn(g, 6, 10), ri(g, 5, 6))),
        "sparsemax": (Sparsemax, lambda m, g: (rn(g, 4, 8), ri(g, 5, 4))),
        "realnvp": (RealNvp, lambda m, g: (rn(g, 8, 6), ri(g, 5, 8))),
        "vq_vae": (VqVae, lambda m, g: (rn(g, 6, 12), ri(g, 5, 6))),
        "batch_hard_triplet": (BatchHardTriplet, lambda m, g: (rn(g, 8, 10), ri(g, 3, 8))),
        "arcface": (ArcFace, lambda m, g: (rn(g, 6, 10), ri(g, 5, 6))),
        "highway_char_cnn": (HighwayCharCnn, lambda m, g: (ri(g, 30, 4, 9), ri(g, 5, 4))),
        "dice_unet": (DiceUnet, lambda m, g: (rn(g, 4, 3, 8, 8), ri(g, 2, 4, 8, 8))),
    }


def main():
    table = cases()

    def build(name):
        module_class, batch = table[name]
        module = module_class().train()
        return (module, *batch(module, torch.Generator().manual_seed(1)))

    case_sweep_main(__doc__.splitlines()[0], table, build, width=18)


if __name__ == "__main__":
    main()
