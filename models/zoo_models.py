"""The model zoo's models and their batches, for export_zoo.py: small, randomly initialized
versions of architectures people train, each returning (loss, logits) from forward().

ZOO maps a name to (model factory, batch factory, exporters to try); see export_zoo.py for
what is written for each.
"""

import math

import torch
import torch.nn as nn
import torch.nn.functional as F


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


class PaddedDecoder(nn.Module):
    """A decoder trained on left-padded batches, with both of Hugging Face's attention masks:
    layer 0 adds the eager bias (0 where a key is kept, finfo(float32).min elsewhere) to the
    scores and drops the probabilities with p = 0, layer 1 passes a causal-and-padding bool mask to scaled_dot_product_attention. The
    query rows of the padding keep no key: the bias makes them uniform over all keys, the bool
    mask makes them 0 (PyTorch's safe softmax). The loss reads every position, padding
    included, so that those rows' gradients are not zero."""

    def __init__(self, vocab=64, dim=32, heads=4, max_len=16):
        super().__init__()
        self.heads = heads
        self.embed, self.pos = nn.Embedding(vocab, dim), nn.Embedding(max_len, dim)
        self.layers = nn.ModuleList()
        for _ in range(2):
            self.layers.append(nn.ModuleDict(dict(
                norm1=nn.LayerNorm(dim), qkv=nn.Linear(dim, 3 * dim, bias=False),
                out=nn.Linear(dim, dim, bias=False), norm2=nn.LayerNorm(dim),
                fc=nn.Linear(dim, 4 * dim), fc_out=nn.Linear(4 * dim, dim))))
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab, bias=False)
        nn.init.normal_(self.embed.weight, std=0.02)

    def forward(self, idx, attention_mask, targets):
        b, t = idx.shape
        x = self.embed(idx) + self.pos(torch.arange(t))
        causal = torch.ones(t, t, dtype=torch.bool).tril()
        keep = causal[None, None] & attention_mask[:, None, None, :].bool()  # [B, 1, T, T]
        bias = (~keep).to(x.dtype) * torch.finfo(x.dtype).min
        for i, layer in enumerate(self.layers):
            q, k, v = layer["qkv"](layer["norm1"](x)).view(b, t, 3, self.heads, -1).permute(
                2, 0, 3, 1, 4)
            if i == 0:
                scores = q @ k.transpose(-1, -2) / (q.shape[-1] ** 0.5) + bias
                # Hugging Face's eager attention, attention_dropout=0.0 included.
                a = F.dropout(scores.softmax(-1), p=0.0, training=self.training) @ v
            else:
                a = F.scaled_dot_product_attention(q, k, v, attn_mask=keep)
            x = x + layer["out"](a.transpose(1, 2).reshape(b, t, -1))
            x = x + layer["fc_out"](F.gelu(layer["fc"](layer["norm2"](x))))
        logits = self.head(self.norm(x))
        return F.cross_entropy(logits.flatten(0, 1), targets.flatten()), logits


class PaddedTagger(nn.Module):
    """A token tagger built as Hugging Face's encoders are: token embeddings with a padding_idx
    (PyTorch never moves that row), a fixed sinusoidal position table registered as a buffer
    (not a parameter: PyTorch does not train it), one pre-LayerNorm self-attention layer whose
    keys skip the padding, and per-token logits. The loss reads every position, padding
    included, so that the padding row and the table do get gradients a trainer must not apply;
    it is cross-entropy with label smoothing, class weights (a buffer) and ignored targets,
    which ONNX's SoftmaxCrossEntropyLoss cannot say all of (the dynamo exporter records the
    smoothing in the node's metadata; the TorchScript exporter refuses it)."""

    def __init__(self, vocab=64, dim=32, heads=4, max_len=16, pad=0):
        super().__init__()
        self.heads, self.pad = heads, pad
        self.embed = nn.Embedding(vocab, dim, padding_idx=pad)
        angles = torch.arange(max_len)[:, None] / 10000 ** (torch.arange(0, dim, 2) / dim)
        table = torch.zeros(max_len, dim)
        table[:, 0::2], table[:, 1::2] = angles.sin(), angles.cos()
        self.register_buffer("positions", table)
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv, self.out = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.fc, self.fc_out = nn.Linear(dim, 2 * dim), nn.Linear(2 * dim, dim)
        self.head = nn.Linear(dim, vocab)
        self.register_buffer("class_weights", torch.linspace(0.5, 1.5, vocab))

    def forward(self, idx, targets):
        b, t = idx.shape
        x = self.embed(idx) + self.positions[:t]
        keep = (idx != self.pad)[:, None, None, :]  # [B, 1, 1, T]: keys that are tokens
        q, k, v = self.qkv(self.norm1(x)).view(b, t, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, attn_mask=keep)
        x = x + self.out(a.transpose(1, 2).reshape(b, t, -1))
        x = x + self.fc_out(F.gelu(self.fc(self.norm2(x))))
        logits = self.head(x)
        loss = F.cross_entropy(logits.flatten(0, 1), targets.flatten(), weight=self.class_weights,
                               ignore_index=-100, label_smoothing=0.1)
        return loss, logits


class RmsNorm(nn.Module):
    """T5's LayerNorm: scales by the root mean square, no mean subtracted, no bias."""

    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.weight, self.eps = nn.Parameter(torch.ones(dim)), eps

    def forward(self, x):
        return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps))


class T5Encoder(nn.Module):
    """T5-style encoder LM: RMS norms, unscaled attention with a learned relative-position bias
    (T5's bidirectional log buckets: integer arithmetic, Log, Min and Where on positions), a
    gated tanh-GELU feed-forward, no biases. The bias is a trained weight, so the attention
    stays unfused (fuse-attention takes only biases that no weight reaches)."""

    def __init__(self, vocab=64, dim=32, heads=4, layers=2, buckets=8, max_distance=16):
        super().__init__()
        self.heads, self.buckets, self.max_distance = heads, buckets, max_distance
        self.tok = nn.Embedding(vocab, dim)
        self.rel = nn.Embedding(buckets, heads)
        self.layers = nn.ModuleList()
        for _ in range(layers):
            self.layers.append(nn.ModuleDict(dict(
                n1=RmsNorm(dim), qkv=nn.Linear(dim, 3 * dim, bias=False),
                o=nn.Linear(dim, dim, bias=False), n2=RmsNorm(dim),
                wi0=nn.Linear(dim, 2 * dim, bias=False), wi1=nn.Linear(dim, 2 * dim, bias=False),
                wo=nn.Linear(2 * dim, dim, bias=False))))
        self.norm = RmsNorm(dim)
        self.head = nn.Linear(dim, vocab, bias=False)

    def bucket(self, relative):
        half = self.buckets // 2
        exact = half // 2
        distance = relative.abs()
        far = exact + (torch.log(distance.float() / exact) / math.log(self.max_distance / exact)
                       * (half - exact)).to(torch.long)
        far = torch.min(far, torch.full_like(far, half - 1))
        return (relative > 0).to(torch.long) * half + torch.where(distance < exact, distance, far)

    def forward(self, idx, targets):
        b, t = idx.shape
        pos = torch.arange(t)
        bias = self.rel(self.bucket(pos[None, :] - pos[:, None])).permute(2, 0, 1)[None]
        x = self.tok(idx)
        for layer in self.layers:
            q, k, v = layer["qkv"](layer["n1"](x)).view(b, t, 3, self.heads, -1).permute(
                2, 0, 3, 1, 4)
            scores = q @ k.transpose(-1, -2) + bias
            a = (scores.float().softmax(-1).type_as(scores) @ v).transpose(1, 2).reshape(b, t, -1)
            x = x + layer["o"](a)
            h = layer["n2"](x)
            x = x + layer["wo"](F.gelu(layer["wi0"](h), approximate="tanh") * layer["wi1"](h))
        logits = self.head(self.norm(x))
        return F.cross_entropy(logits.flatten(0, 1), targets.flatten()), logits


class Seq2Seq(nn.Module):
    """nn.Transformer encoder-decoder (post-norm, ReLU, one layer each) with a source padding
    mask (for the encoder's self-attention and the decoder's cross-attention) and a causal
    target mask: nn.MultiheadAttention's self- and cross-attention."""

    def __init__(self, vocab=64, dim=32, heads=4, max_len=16, pad=0):
        super().__init__()
        self.pad = pad
        self.src_emb, self.tgt_emb = nn.Embedding(vocab, dim), nn.Embedding(vocab, dim)
        self.pos = nn.Parameter(torch.randn(max_len, dim) * 0.02)
        self.net = nn.Transformer(dim, heads, 1, 1, 2 * dim, dropout=0.0, batch_first=True)
        self.head = nn.Linear(dim, vocab)

    def forward(self, src, tgt, targets):
        t = tgt.shape[1]
        causal = torch.triu(torch.full((t, t), float("-inf")), diagonal=1)
        # tgt_is_causal: PyTorch would otherwise compare the mask with a causal one, which
        # torch.export cannot trace.
        # The padding mask for the cross-attention too: in eval mode PyTorch's fast path runs
        # the encoder on nested tensors, whose padded positions come out as zeros.
        padding = src == self.pad
        out = self.net(self.src_emb(src) + self.pos[:src.shape[1]],
                       self.tgt_emb(tgt) + self.pos[:t], tgt_mask=causal, tgt_is_causal=True,
                       src_key_padding_mask=padding, memory_key_padding_mask=padding)
        logits = self.head(out)
        return F.cross_entropy(logits.flatten(0, 1), targets.flatten()), logits


class Moe(nn.Module):
    """A mixture-of-experts feed-forward in a token classifier: top-2 routing (torch.topk), each
    token's expert weights gathered by index, einsum, a load-balancing auxiliary loss."""

    def __init__(self, vocab=64, dim=16, experts=4, hidden=32):
        super().__init__()
        self.experts = experts
        self.tok = nn.Embedding(vocab, dim)
        self.router = nn.Linear(dim, experts, bias=False)
        self.w1 = nn.Parameter(torch.randn(experts, dim, hidden) * 0.2)
        self.w2 = nn.Parameter(torch.randn(experts, hidden, dim) * 0.2)
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab)

    def forward(self, idx, targets):
        x = self.tok(idx)                                         # [B, T, D]
        probs = self.router(x).softmax(-1)
        top, which = probs.topk(2, dim=-1)                        # [B, T, 2]
        top = top / top.sum(-1, keepdim=True)
        h = F.relu(torch.einsum("btd,btkdh->btkh", x, self.w1[which]))
        x = x + (torch.einsum("btkh,btkhd->btkd", h, self.w2[which]) * top.unsqueeze(-1)).sum(2)
        load = F.one_hot(which[..., 0], self.experts).float().mean((0, 1))
        aux = self.experts * (load * probs.mean((0, 1))).sum()
        logits = self.head(self.norm(x))
        return F.cross_entropy(logits.flatten(0, 1), targets.flatten()) + 0.01 * aux, logits


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


class Vit(nn.Module):
    """ViT: a patch convolution, a class token, learned positions, nn.TransformerEncoder
    (pre-norm, GELU: nn.MultiheadAttention without a mask), the head on the class token."""

    def __init__(self, classes=10, dim=32, heads=4, layers=2, patch=4, image=16):
        super().__init__()
        self.patch = nn.Conv2d(3, dim, patch, stride=patch)
        self.cls = nn.Parameter(torch.zeros(1, 1, dim))
        self.pos = nn.Parameter(torch.randn(1, (image // patch) ** 2 + 1, dim) * 0.02)
        layer = nn.TransformerEncoderLayer(dim, heads, 2 * dim, dropout=0.0, activation="gelu",
                                           batch_first=True, norm_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, classes)

    def forward(self, x, y):
        p = self.patch(x).flatten(2).transpose(1, 2)
        p = torch.cat([self.cls.expand(p.shape[0], -1, -1), p], dim=1) + self.pos
        logits = self.head(self.norm(self.encoder(p))[:, 0])
        return F.cross_entropy(logits, y), logits


class ConvNeXtBlock(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.dw = nn.Conv2d(dim, dim, 7, padding=3, groups=dim)
        self.norm = nn.LayerNorm(dim, eps=1e-6)
        self.pw1, self.pw2 = nn.Linear(dim, 4 * dim), nn.Linear(4 * dim, dim)
        self.gamma = nn.Parameter(torch.full((dim,), 0.5))

    def forward(self, x):
        h = self.dw(x).permute(0, 2, 3, 1)
        h = self.pw2(F.gelu(self.pw1(self.norm(h)))) * self.gamma
        return x + h.permute(0, 3, 1, 2)


class ConvNeXt(nn.Module):
    """ConvNeXt-style: a patchify stem, depthwise 7x7 convolutions, LayerNorm over channels in
    channels-last order (permutes around it), pointwise Linears, layer scale."""

    def __init__(self, classes=10, dims=(16, 32)):
        super().__init__()
        self.stem = nn.Conv2d(3, dims[0], 4, stride=4)
        self.stem_norm = nn.LayerNorm(dims[0], eps=1e-6)
        self.b1 = ConvNeXtBlock(dims[0])
        self.down_norm = nn.LayerNorm(dims[0], eps=1e-6)
        self.down = nn.Conv2d(dims[0], dims[1], 2, stride=2)
        self.b2 = ConvNeXtBlock(dims[1])
        self.norm = nn.LayerNorm(dims[1], eps=1e-6)
        self.head = nn.Linear(dims[1], classes)

    @staticmethod
    def channels_last_norm(norm, x):
        return norm(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)

    def forward(self, x, y):
        h = self.b1(self.channels_last_norm(self.stem_norm, self.stem(x)))
        h = self.b2(self.down(self.channels_last_norm(self.down_norm, h)))
        logits = self.head(self.norm(h.mean((-2, -1))))
        return F.cross_entropy(logits, y), logits


class Mixer(nn.Module):
    """MLP-Mixer: patches cut with unfold, token-mixing MLPs on transposed activations, Mish,
    ELU and Softplus, and an auxiliary term on the tokens' standard deviation."""

    def __init__(self, classes=10, dim=24, tokens=16):
        super().__init__()
        self.patch = nn.Linear(48, dim)
        self.n1, self.n2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.tok1, self.tok2 = nn.Linear(tokens, 2 * tokens), nn.Linear(2 * tokens, tokens)
        self.ch1, self.ch2 = nn.Linear(dim, 2 * dim), nn.Linear(2 * dim, dim)
        self.head = nn.Linear(dim, classes)

    def forward(self, x, y):
        b = x.shape[0]
        p = x.unfold(2, 4, 4).unfold(3, 4, 4).permute(0, 2, 3, 1, 4, 5).reshape(b, 16, 48)
        h = self.patch(p)
        h = h + self.tok2(F.mish(self.tok1(self.n1(h).transpose(1, 2)))).transpose(1, 2)
        h = h + self.ch2(F.elu(self.ch1(self.n2(h))))
        logits = self.head(F.softplus(h).mean(1))
        aux = (h.std(1) - 1).pow(2).mean()
        return F.cross_entropy(logits, y) + 0.01 * aux, logits


class Swin(nn.Module):
    """A Swin-style block: shifted windows (torch.roll, window partition by view and permute),
    window attention with a learned relative-position bias looked up by an index buffer named
    `index` (which the dynamo exporter with optimize=False also gives to aten.index's output),
    GELU MLP, mean-pooled head."""

    def __init__(self, classes=10, dim=16, heads=2, window=4):
        super().__init__()
        self.heads, self.window = heads, window
        self.patch = nn.Conv2d(3, dim, 2, stride=2)
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.table = nn.Parameter(torch.randn((2 * window - 1) ** 2, heads) * 0.02)
        grid = torch.stack(torch.meshgrid(torch.arange(window), torch.arange(window),
                                          indexing="ij")).flatten(1)
        rel = (grid[:, :, None] - grid[:, None, :]).permute(1, 2, 0) + window - 1
        self.register_buffer("index", rel[..., 0] * (2 * window - 1) + rel[..., 1],
                             persistent=False)
        self.mlp = nn.Sequential(nn.Linear(dim, 2 * dim), nn.GELU(), nn.Linear(2 * dim, dim))
        self.head = nn.Linear(dim, classes)

    def forward(self, x, y):
        h = self.patch(x).permute(0, 2, 3, 1)                       # B, H, W, C
        b, rows, cols, c = h.shape
        w, n = self.window, self.window * self.window
        s = torch.roll(self.norm1(h), shifts=(-2, -2), dims=(1, 2))
        win = s.view(b, rows // w, w, cols // w, w, c).permute(0, 1, 3, 2, 4, 5).reshape(-1, n, c)
        q, k, v = self.qkv(win).view(-1, n, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)
        bias = self.table[self.index.view(-1)].view(n, n, -1).permute(2, 0, 1)
        a = ((q @ k.transpose(-2, -1)) * (q.shape[-1] ** -0.5) + bias).softmax(-1) @ v
        a = self.proj(a.transpose(1, 2).reshape(-1, n, c))
        a = a.view(b, rows // w, cols // w, w, w, c).permute(0, 1, 3, 2, 4, 5).reshape(b, rows, cols, c)
        h = h + torch.roll(a, shifts=(2, 2), dims=(1, 2))
        h = h + self.mlp(self.norm2(h))
        logits = self.head(h.mean((1, 2)))
        return F.cross_entropy(logits, y), logits


class Clip(nn.Module):
    """A contrastive image-text model: a conv image tower and a mean-of-embeddings text tower,
    L2-normalized, a learned logit scale (exp, clamped at 100), cross-entropy both ways against
    the diagonal (torch.arange labels)."""

    def __init__(self, vocab=64, dim=16):
        super().__init__()
        self.image = nn.Sequential(nn.Conv2d(3, 8, 3, stride=2, padding=1), nn.ReLU(),
                                   nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, dim))
        self.tok = nn.Embedding(vocab, dim)
        self.text = nn.Linear(dim, dim)
        self.logit_scale = nn.Parameter(torch.tensor(math.log(1 / 0.07)))

    def forward(self, x, idx):
        i = F.normalize(self.image(x), dim=-1)
        t = F.normalize(self.text(self.tok(idx).mean(1)), dim=-1)
        logits = self.logit_scale.exp().clamp(max=100) * i @ t.t()
        labels = torch.arange(x.shape[0])
        return (F.cross_entropy(logits, labels) + F.cross_entropy(logits.t(), labels)) / 2, logits


# ----------------------------------------------------------------------------- recurrent


class RnnTagger(nn.Module):
    """A token tagger: embeddings, a 2-layer bidirectional GRU, an LSTM on top, per-token logits
    (nn.GRU and nn.LSTM export as ONNX's GRU and LSTM ops)."""

    def __init__(self, vocab=64, dim=16, hidden=12):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.gru = nn.GRU(dim, hidden, num_layers=2, batch_first=True, bidirectional=True)
        self.lstm = nn.LSTM(2 * hidden, hidden, batch_first=True)
        self.head = nn.Linear(hidden, vocab)

    def forward(self, idx, targets):
        h, _ = self.gru(self.embed(idx))
        h, _ = self.lstm(h)
        logits = self.head(h)
        return F.cross_entropy(logits.flatten(0, 1), targets.flatten()), logits


# ----------------------------------------------------------------------------- recommenders


class BagRecommender(nn.Module):
    """A click model as DLRM builds one: two sparse features, each a bag of ids per example
    (nn.EmbeddingBag, summed and averaged, which both exporters write as an ONNX Loop over the
    bags), a dense tower, the pairwise dot products of the three vectors, and a top MLP to one
    logit under binary cross-entropy."""

    def __init__(self, vocab=40, dim=8, dense=6):
        super().__init__()
        self.user = nn.EmbeddingBag(vocab, dim, mode="sum")
        self.item = nn.EmbeddingBag(vocab, dim, mode="mean")
        self.bottom = nn.Sequential(nn.Linear(dense, dim), nn.ReLU())
        self.top = nn.Sequential(nn.Linear(3 * dim + 3, 16), nn.ReLU(), nn.Linear(16, 1))

    def forward(self, dense, user_ids, item_ids, clicks):
        d, u, i = self.bottom(dense), self.user(user_ids), self.item(item_ids)
        pairs = torch.stack([(d * u).sum(1), (d * i).sum(1), (u * i).sum(1)], dim=1)
        logits = self.top(torch.cat([d, u, i, pairs], dim=1)).squeeze(1)
        return F.binary_cross_entropy_with_logits(logits, clicks), logits


# ----------------------------------------------------------------------------- graphs


class Gnn(nn.Module):
    """Two message-passing layers on an edge list: index_select of the sources, index_add into
    the destinations (a scatter-add with repeated indices), mean by in-degree, residual."""

    def __init__(self, features=8, hidden=16, classes=3):
        super().__init__()
        self.l1, self.l2 = nn.Linear(features, hidden), nn.Linear(hidden, classes)

    @staticmethod
    def propagate(h, src, dst):
        total = h.new_zeros(h.shape).index_add(0, dst, h.index_select(0, src))
        degree = h.new_zeros(h.shape[0]).index_add(0, dst, h.new_ones(dst.shape[0])).clamp(min=1)
        return total / degree[:, None] + h

    def forward(self, x, src, dst, y):
        h = F.relu(self.propagate(self.l1(x), src, dst))
        logits = self.l2(self.propagate(h, src, dst))
        return F.cross_entropy(logits, y), logits


# ----------------------------------------------------------------------------- audio


class AudioConv(nn.Module):
    """A 1-D convolution net on waveforms: a strided Conv1d, GroupNorm, SiLU, dilated
    convolutions with BatchNorm1d and InstanceNorm1d, LeakyReLU and Hardswish, adaptive max
    pooling, and a label-smoothed loss (which the TorchScript exporter refuses)."""

    def __init__(self, classes=6, ch=16):
        super().__init__()
        self.front = nn.Conv1d(1, ch, 9, stride=4, padding=4)
        self.gn = nn.GroupNorm(4, ch)
        self.d1 = nn.Conv1d(ch, ch, 3, dilation=2, padding=2)
        self.bn = nn.BatchNorm1d(ch)
        self.d2 = nn.Conv1d(ch, 2 * ch, 3, dilation=4, padding=4, bias=False)
        self.inorm = nn.InstanceNorm1d(2 * ch, affine=True)
        self.pool = nn.AdaptiveMaxPool1d(4)
        self.head = nn.Linear(8 * ch, classes)

    def forward(self, x, y):
        h = F.silu(self.gn(self.front(x)))
        h = h + F.leaky_relu(self.bn(self.d1(h)), 0.1)
        h = F.hardswish(self.inorm(self.d2(h)))
        logits = self.head(self.pool(h).flatten(1))
        return F.cross_entropy(logits, y, label_smoothing=0.1), logits


class Conformer(nn.Module):
    """A Conformer convolution module on frames: a weight-normed input projection
    (parametrizations.weight_norm), pointwise Conv1d and GLU, depthwise Conv1d, BatchNorm1d,
    SiLU, a per-frame classifier (cross-entropy over the class axis of [B, C, T])."""

    def __init__(self, features=10, dim=16, classes=5):
        super().__init__()
        from torch.nn.utils.parametrizations import weight_norm
        self.inp = weight_norm(nn.Linear(features, dim))
        self.ln = nn.LayerNorm(dim)
        self.pw1 = nn.Conv1d(dim, 2 * dim, 1)
        self.dw = nn.Conv1d(dim, dim, 5, padding=2, groups=dim)
        self.bn = nn.BatchNorm1d(dim)
        self.pw2 = nn.Conv1d(dim, dim, 1)
        self.head = nn.Linear(dim, classes)

    def forward(self, x, y):
        h = self.inp(x)                                                # B, T, D
        c = F.glu(self.pw1(self.ln(h).transpose(1, 2)), dim=1)
        h = h + self.pw2(F.silu(self.bn(self.dw(c)))).transpose(1, 2)
        logits = self.head(h)
        return F.cross_entropy(logits.transpose(1, 2), y), logits


class RunningMean(nn.Module):
    """Sequence classification with a running mean (cumsum over time), a length mask built from
    a lengths input, a masked mean, clamp and pow, log_softmax and nll_loss."""

    def __init__(self, features=6, dim=12, classes=4):
        super().__init__()
        self.l1, self.l2 = nn.Linear(features, dim), nn.Linear(dim, classes)

    def forward(self, x, lengths, y):
        t = x.shape[1]
        h = torch.tanh(self.l1(x)).cumsum(1) / torch.arange(1, t + 1)[None, :, None]
        mask = (torch.arange(t)[None, :] < lengths[:, None]).float()
        pooled = (h * mask[..., None]).sum(1) / mask.sum(1, keepdim=True)
        logits = self.l2(pooled.clamp(-0.9, 0.9).pow(3) + pooled)
        return F.nll_loss(F.log_softmax(logits, -1), y), logits


# ----------------------------------------------------------------------------- batches


# ----------------------------------------------------------------------------- Hugging Face


class HuggingFace(nn.Module):
    """A transformers model whose forward() takes the batch's tensors in order, by name, and
    returns (loss, logits). transformers is imported only when one of these is built."""

    def __init__(self, model, inputs):
        super().__init__()
        self.hf, self.inputs = model, inputs

    def forward(self, *args):
        out = self.hf(**dict(zip(self.inputs, args)))
        return out.loss, out.logits


def hugging_face(model_class, config_class, inputs, **config):
    """A factory: the transformers model at a tiny size (width 32, 2 layers, 4 heads, vocabulary
    64), with dropout off and PyTorch's scaled_dot_product_attention ("sdpa"), as trained."""

    def make():
        import transformers

        cfg = getattr(transformers, config_class)(vocab_size=64, **config)
        cfg._attn_implementation = "sdpa"
        return HuggingFace(getattr(transformers, model_class)(cfg), inputs)

    return make


DECODER_SIZE = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                    intermediate_size=64, max_position_embeddings=64)
# Qwen2: grouped-query attention (two key/value heads; the dynamo exporter writes
# scaled_dot_product_attention's enable_gqa), biases on Q, K and V only, RMSNorm, SwiGLU.
HF_QWEN2 = hugging_face("Qwen2ForCausalLM", "Qwen2Config", ["input_ids", "labels"],
                        num_key_value_heads=2, **DECODER_SIZE)
# Mistral: a sliding window of 8 over 16 positions (a band mask, not a causal one), and GQA.
HF_MISTRAL = hugging_face("MistralForCausalLM", "MistralConfig", ["input_ids", "labels"],
                          num_key_value_heads=2, sliding_window=8, **DECODER_SIZE)
# GPT-NeoX (Pythia): the fused QKV projection, rotary embedding on a quarter of each head,
# attention and MLP in parallel from one residual.
HF_NEOX = hugging_face("GPTNeoXForCausalLM", "GPTNeoXConfig", ["input_ids", "labels"],
                       hidden_dropout=0.0, attention_dropout=0.0, **DECODER_SIZE)
# Falcon: multi-query attention (one key/value head that MatMul broadcasts over the query
# heads), rotary embedding, attention and MLP in parallel, no biases.
HF_FALCON = hugging_face("FalconForCausalLM", "FalconConfig", ["input_ids", "labels"],
                         hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                         hidden_dropout=0.0, attention_dropout=0.0)
# DistilBERT: a masked LM on right-padded batches (the padding mask), tied input and output
# embeddings, GELU, and a padding row (padding_idx 0) in the word embedding.
HF_DISTILBERT = hugging_face("DistilBertForMaskedLM", "DistilBertConfig",
                             ["input_ids", "attention_mask", "labels"], dim=32, n_layers=2,
                             n_heads=4, hidden_dim=64, max_position_embeddings=64, dropout=0.0,
                             attention_dropout=0.0)


def lm_ids_batch(g, b=2, t=16):
    """lm_batch under transformers' names: it shifts the labels itself."""
    return {"input_ids": tokens(g, (b, t)), "labels": tokens(g, (b, t))}


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


def left_padded_batch(g, b=2, t=16):
    lengths = torch.tensor([t, t - 5])
    mask = (torch.arange(t)[None, :] >= (t - lengths)[:, None]).to(torch.int64)
    return {"idx": tokens(g, (b, t)), "attention_mask": mask, "targets": tokens(g, (b, t))}


def right_padded_batch(g, b=2, t=16, pad=0):
    lengths = t - 5 * (torch.arange(b) % 2)  # every other sequence 5 tokens short
    ids = torch.randint(1, 64, (b, t), generator=g)
    ids = torch.where(ids == pad, torch.zeros_like(ids), ids)  # tokens are never the pad
    ids = torch.where(torch.arange(t)[None, :] < lengths[:, None], ids, torch.full_like(ids, pad))
    targets = tokens(g, (b, t))
    ignored = torch.rand((b, t), generator=g) < 0.2
    return {"idx": ids, "targets": torch.where(ignored, torch.full_like(targets, -100), targets)}


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


def click_batch(g, b=8, vocab=40):
    return {"dense": torch.randn((b, 6), generator=g),
            "user_ids": tokens(g, (b, 4), vocab), "item_ids": tokens(g, (b, 3), vocab),
            "clicks": (torch.rand((b,), generator=g) < 0.3).float()}


def flat_batch(g, b=8, classes=10):
    return {"x": torch.rand((b, 784), generator=g), "y": torch.randint(0, classes, (b,), generator=g)}


def seq2seq_batch(g, b=2, t=16):
    """Source tokens with a padded tail (0) in the first row, target tokens shifted by one."""
    src = tokens(g, (b, t))
    src[:, 1:] = torch.where(src[:, 1:] == 0, 1, src[:, 1:])
    src[0, 12:] = 0
    tgt = tokens(g, (b, t + 1))
    return {"src": src, "tgt": tgt[:, :-1], "targets": tgt[:, 1:]}


def waveform_batch(g, b=4, n=256, classes=6):
    return {"x": torch.randn((b, 1, n), generator=g),
            "y": torch.randint(0, classes, (b,), generator=g)}


def clip_batch(g, b=4, vocab=64):
    return {"x": torch.rand((b, 3, 8, 8), generator=g),
            "idx": torch.randint(0, vocab, (b, 6), generator=g)}


def graph_batch(g, nodes=12, edges=30, classes=3):
    return {"x": torch.randn((nodes, 8), generator=g),
            "src": torch.randint(0, nodes, (edges,), generator=g),
            "dst": torch.randint(0, nodes, (edges,), generator=g),
            "y": torch.randint(0, classes, (nodes,), generator=g)}


def frames_batch(g, b=2, t=12, classes=5):
    return {"x": torch.randn((b, t, 10), generator=g),
            "y": torch.randint(0, classes, (b, t), generator=g)}


def lengths_batch(g, b=3, t=8, classes=4):
    return {"x": torch.randn((b, t, 6), generator=g),
            "lengths": torch.randint(1, t + 1, (b,), generator=g),
            "y": torch.randint(0, classes, (b,), generator=g)}


# name -> (model factory, batch factory, exporters to try)
ALL_EXPORTERS = ("torchscript", "dynamo", "dynamo_raw")
TRANSFORMER_EXPORTERS = ALL_EXPORTERS + ("dynamo_opset23",)
# Opset 25, the newest to which PyTorch 2.15 converts its graph of Gelu, RMSNormalization and
# Attention (ONNX's version converter has no adapter for them further): two of the transformers.
OPSET25 = ("dynamo_opset25",)
# Models whose layers the TorchScript exporter can also write at opset 12 (the first with the
# cross-entropy loss): Softmax on its 2-D coercion, BatchNormalization's training form before
# opset 14 (five outputs, no training_mode), LayerNorm and GroupNorm as their decompositions.
OPSET12 = ("torchscript_opset12",)
VISION_EXPORTERS = ("torchscript", "dynamo")
ZOO = {
    "gpt_block": (GptBlockModel, lm_batch, TRANSFORMER_EXPORTERS),
    "gpt2": (Gpt2, lm_batch, TRANSFORMER_EXPORTERS),
    "llama": (Llama, lm_batch, TRANSFORMER_EXPORTERS + OPSET25),
    "bert_mlm": (BertMlm, mlm_batch, TRANSFORMER_EXPORTERS + OPSET12),
    "padded_decoder": (PaddedDecoder, left_padded_batch, TRANSFORMER_EXPORTERS + OPSET25),
    "padded_tagger": (PaddedTagger, right_padded_batch, TRANSFORMER_EXPORTERS),
    "res_cnn": (ResCnn, lambda g: image_batch(g, 4, 3, 16, 16), ALL_EXPORTERS + OPSET12),
    "resnet18": (resnet18_narrow, lambda g: normal_image_batch(g, 8, 3, 40, 40),
                 VISION_EXPORTERS),
    "mobilenet_v3_small": (mobilenet_v3_small, lambda g: image_batch(g, 16, 3, 64, 64),
                           VISION_EXPORTERS),
    "mlp_wide": (MlpWide, flat_batch, ("dynamo",)),
    "unet": (UNet, mask_batch, ALL_EXPORTERS + OPSET12),
    "rnn_tagger": (RnnTagger, lm_batch, ALL_EXPORTERS + OPSET12),
    "bag_recommender": (BagRecommender, click_batch, ALL_EXPORTERS),
    "t5_encoder": (T5Encoder, lm_batch, TRANSFORMER_EXPORTERS),
    "seq2seq": (Seq2Seq, seq2seq_batch, TRANSFORMER_EXPORTERS),
    "moe": (Moe, lm_batch, ALL_EXPORTERS),
    "vit": (Vit, lambda g: image_batch(g, 4, 3, 16, 16), TRANSFORMER_EXPORTERS),
    "convnext": (ConvNeXt, lambda g: image_batch(g, 4, 3, 16, 16), ALL_EXPORTERS),
    "mixer": (Mixer, lambda g: image_batch(g, 4, 3, 16, 16), ALL_EXPORTERS),
    "audio_conv": (AudioConv, waveform_batch, ALL_EXPORTERS),
    "swin": (Swin, lambda g: image_batch(g, 4, 3, 16, 16), ALL_EXPORTERS),
    "clip": (Clip, clip_batch, ALL_EXPORTERS),
    "gnn": (Gnn, graph_batch, ALL_EXPORTERS),
    "conformer": (Conformer, frames_batch, ALL_EXPORTERS),
    "running_mean": (RunningMean, lengths_batch, ALL_EXPORTERS),
    "hf_qwen2": (HF_QWEN2, lm_ids_batch, ALL_EXPORTERS),
    "hf_mistral": (HF_MISTRAL, lm_ids_batch, ALL_EXPORTERS),
    "hf_neox": (HF_NEOX, lm_ids_batch, ALL_EXPORTERS),
    "hf_falcon": (HF_FALCON, lm_ids_batch, ALL_EXPORTERS),
    "hf_distilbert": (HF_DISTILBERT, mlm_batch, ALL_EXPORTERS),
}
