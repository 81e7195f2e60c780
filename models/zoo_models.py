"""The model zoo's models and their batches, for export_zoo.py: small, randomly initialized
versions of architectures people train, each returning (loss, logits) from forward().

ZOO maps a name to (model factory, batch factory, exporters to try); see export_zoo.py for
what is written for each.
"""

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
}
