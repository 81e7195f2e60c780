"""The modules tools/architecture_sweep.py trains: whole architectures, each returning its own
loss from a batch (x, y), and DeepFM's labels (confident_labels).
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


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


class Seq2SeqAttention(nn.Module):
    """An LSTM encoder and an LSTMCell decoder unrolled with teacher forcing, attending to the
    encoder's states additively (Bahdanau: tanh of summed projections, a softmax over time)."""

    def __init__(self, vocab=20, d=12):
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        self.enc = nn.LSTM(d, d, batch_first=True)
        self.cell = nn.LSTMCell(2 * d, d)
        self.wq, self.wk = nn.Linear(d, d, bias=False), nn.Linear(d, d)
        self.v = nn.Linear(d, 1, bias=False)
        self.out = nn.Linear(2 * d, vocab)

    def forward(self, x, y):
        keys, (h, c) = self.enc(self.emb(x))
        h, c = h[0], c[0]
        projected = self.wk(keys)
        prev = self.emb(torch.zeros_like(y[:, 0]))
        logits = []
        for t in range(y.shape[1]):
            score = self.v(torch.tanh(projected + self.wq(h)[:, None])).squeeze(-1)
            context = (score.softmax(dim=1)[:, :, None] * keys).sum(dim=1)
            h, c = self.cell(torch.cat([prev, context], dim=1), (h, c))
            logits.append(self.out(torch.cat([h, context], dim=1)))
            prev = self.emb(y[:, t])
        return F.cross_entropy(torch.stack(logits, dim=1).flatten(0, 1), y.flatten())


class NeuralOde(nn.Module):
    """A neural ODE integrated by four fixed RK4 steps, then a classifier."""

    def __init__(self, d=6):
        super().__init__()
        self.f = nn.Sequential(nn.Linear(d + 1, 16), nn.Softplus(), nn.Linear(16, d))
        self.head = nn.Linear(d, 5)

    def field(self, t, z):
        return self.f(torch.cat([z, torch.full_like(z[:, :1], t)], dim=1))

    def forward(self, x, y):
        z, h = x, 0.25
        for i in range(4):
            t = i * h
            k1 = self.field(t, z)
            k2 = self.field(t + h / 2, z + h / 2 * k1)
            k3 = self.field(t + h / 2, z + h / 2 * k2)
            k4 = self.field(t + h, z + h * k3)
            z = z + h / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
        return F.cross_entropy(self.head(z), y)


class ModulatedConv(nn.Module):
    """StyleGAN2's modulated convolution: a style scales the weight per sample, the weight is
    demodulated by its norm (rsqrt), and one grouped convolution applies every sample's weight;
    equalized learning rate, noise injection from a buffer, a leaky ReLU times sqrt(2)."""

    def __init__(self, cin=3, cout=6, k=3, wdim=8):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(cout, cin, k, k))
        self.affine = nn.Linear(wdim, cin)
        self.mapping = nn.Sequential(nn.Linear(4, wdim), nn.LeakyReLU(0.2))
        self.noise_strength = nn.Parameter(torch.full((1,), 0.1))
        self.register_buffer("noise", torch.randn(4, 1, 8, 8,
                                                  generator=torch.Generator().manual_seed(7)))
        self.scale = 1 / math.sqrt(cin * k * k)
        self.head = nn.Linear(cout, 5)

    def forward(self, x, y):
        b, cin, hgt, wid = x.shape
        style = self.affine(self.mapping(x.mean(dim=(2, 3)).repeat(1, 2)[:, :4])) + 1
        w = self.weight[None] * self.scale * style[:, None, :, None, None]
        w = w * torch.rsqrt(w.pow(2).sum(dim=(2, 3, 4), keepdim=True) + 1e-8)
        out = F.conv2d(x.reshape(1, b * cin, hgt, wid), w.reshape(-1, cin, 3, 3), padding=1,
                       groups=b).view(b, -1, hgt, wid)
        out = F.leaky_relu(out + self.noise * self.noise_strength, 0.2) * math.sqrt(2)
        return F.cross_entropy(self.head(out.mean(dim=(2, 3))), y)


class Gat(nn.Module):
    """A graph attention layer over an edge list: per-edge scores, a softmax over each node's
    incoming edges by scatter_reduce (amax) and index_add, messages summed into their targets."""

    def __init__(self, d=8, heads=2, classes=3):
        super().__init__()
        self.proj = nn.Linear(d, heads * d, bias=False)
        self.a_src = nn.Parameter(torch.randn(heads, d) * 0.3)
        self.a_dst = nn.Parameter(torch.randn(heads, d) * 0.3)
        self.heads, self.d = heads, d
        self.out = nn.Linear(heads * d, classes)
        g = torch.Generator().manual_seed(4)
        src = torch.randint(0, 10, (30,), generator=g)
        dst = torch.randint(0, 10, (30,), generator=g)
        loops = torch.arange(10)  # every node attends to itself, so none is left empty
        self.register_buffer("src", torch.cat([src, loops]))
        self.register_buffer("dst", torch.cat([dst, loops]))

    def forward(self, x, y):
        n = x.shape[0]
        h = self.proj(x).view(n, self.heads, self.d)
        e = F.leaky_relu((h[self.src] * self.a_src).sum(-1) + (h[self.dst] * self.a_dst).sum(-1),
                         0.2)  # [E, heads]
        index = self.dst[:, None].expand_as(e)
        top = x.new_full((n, self.heads), -1e9).scatter_reduce(0, index, e, "amax")
        p = torch.exp(e - top[self.dst])
        total = x.new_zeros(n, self.heads).index_add(0, self.dst, p)
        alpha = p / total[self.dst]
        msg = x.new_zeros(n, self.heads, self.d).index_add(0, self.dst,
                                                           alpha[:, :, None] * h[self.src])
        return F.cross_entropy(self.out(F.elu(msg.flatten(1))), y)


class DcnV2(nn.Module):
    """Deep & Cross Network v2: cross layers x0 * (W x + b) + x beside a deep tower."""

    def __init__(self, d=10):
        super().__init__()
        self.cross = nn.ModuleList(nn.Linear(d, d) for _ in range(3))
        self.deep = nn.Sequential(nn.Linear(d, 16), nn.ReLU(), nn.Linear(16, 8), nn.ReLU())
        self.head = nn.Linear(d + 8, 1)

    def forward(self, x, y):
        z = x
        for layer in self.cross:
            z = x * layer(z) + z
        logit = self.head(torch.cat([z, self.deep(x)], dim=1)).squeeze(1)
        return F.binary_cross_entropy_with_logits(logit, (y > 2).float())


class Sparsemax(nn.Module):
    """TabNet's attentive transformer: sparsemax feature masks (sort, cumsum, a support found by
    comparison, a threshold gathered from it) over two decision steps."""

    def __init__(self, d=8):
        super().__init__()
        self.att = nn.Linear(d, d)
        self.feat = nn.Linear(d, d)
        self.head = nn.Linear(d, 5)

    @staticmethod
    def sparsemax(z):
        zs, _ = torch.sort(z, dim=-1, descending=True)
        k = torch.arange(1, z.shape[-1] + 1, dtype=z.dtype)
        cumulative = zs.cumsum(dim=-1)
        support = (1 + k * zs > cumulative).to(z.dtype)
        size = support.sum(dim=-1, keepdim=True)
        tau = (cumulative.gather(-1, size.long() - 1) - 1) / size
        return torch.clamp(z - tau, min=0)

    def forward(self, x, y):
        prior, out, h = torch.ones_like(x), 0, x
        for _ in range(2):
            mask = self.sparsemax(self.att(h) * prior)
            prior = prior * (1.5 - mask)
            h = F.relu(self.feat(mask * x))
            out = out + h
        return F.cross_entropy(self.head(out), y)


class RealNvp(nn.Module):
    """RealNVP: affine coupling layers (tanh-bounded log-scales) on alternating halves; the
    loss is the negative log-likelihood under a standard normal plus the log-determinant."""

    def __init__(self, d=6):
        super().__init__()
        self.nets = nn.ModuleList(
            nn.Sequential(nn.Linear(d // 2, 16), nn.ReLU(), nn.Linear(16, d)) for _ in range(3))

    def forward(self, x, y):
        z, logdet = x, 0
        for i, net in enumerate(self.nets):
            a, b = z.chunk(2, dim=1)
            if i % 2:
                a, b = b, a
            s, t = net(a).chunk(2, dim=1)
            s = torch.tanh(s)
            b = b * torch.exp(s) + t
            logdet = logdet + s.sum(dim=1)
            z = torch.cat([b, a] if i % 2 else [a, b], dim=1)
        nll = 0.5 * (z ** 2).sum(dim=1) + 0.5 * z.shape[1] * math.log(2 * math.pi) - logdet
        return nll.mean()


class VqVae(nn.Module):
    """VQ-VAE: each encoding snapped to its nearest codebook vector (squared distances by
    expansion, argmin), the straight-through estimator, the codebook and commitment losses."""

    def __init__(self, d=4, codes=6):
        super().__init__()
        self.enc = nn.Sequential(nn.Linear(12, 16), nn.ReLU(), nn.Linear(16, d))
        self.codebook = nn.Parameter(torch.randn(codes, d))
        self.dec = nn.Sequential(nn.Linear(d, 16), nn.ReLU(), nn.Linear(16, 12))

    def forward(self, x, y):
        z = self.enc(x)
        dist = (z.pow(2).sum(1, keepdim=True) - 2 * z @ self.codebook.t()
                + self.codebook.pow(2).sum(1)[None])
        q = self.codebook[dist.argmin(dim=1)]
        codebook_loss = F.mse_loss(q, z.detach())
        commitment = F.mse_loss(z, q.detach())
        st = z + (q - z).detach()
        return F.mse_loss(self.dec(st), x) + codebook_loss + 0.25 * commitment


class BatchHardTriplet(nn.Module):
    """A metric-learning embedding with the batch-hard triplet loss: a distance matrix, masks of
    equal labels, the farthest positive and the nearest negative per anchor."""

    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(10, 16), nn.ReLU(), nn.Linear(16, 8))

    def forward(self, x, y):
        e = self.net(x)
        diff = e[:, None] - e[None]
        dist = torch.sqrt((diff * diff).sum(-1) + 1e-6)
        same = y[:, None] == y[None]
        hardest_pos = torch.where(same, dist, torch.zeros_like(dist)).max(dim=1).values
        hardest_neg = torch.where(same, dist + 1e4, dist).min(dim=1).values
        return F.relu(hardest_pos - hardest_neg + 0.5).mean()


class ArcFace(nn.Module):
    """ArcFace: normalized features and class weights, cos(theta + m) on the true class (acos
    of a clamped cosine, cos of the sum), scaled logits into cross-entropy."""

    def __init__(self, classes=5):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(10, 16), nn.PReLU(), nn.Linear(16, 8))
        self.w = nn.Parameter(torch.randn(classes, 8))

    def forward(self, x, y):
        cos = F.normalize(self.net(x)) @ F.normalize(self.w).t()
        theta = torch.acos(cos.clamp(-1 + 1e-6, 1 - 1e-6))
        target = torch.cos(theta + 0.3)
        onehot = F.one_hot(y, cos.shape[1]).to(cos.dtype)
        logits = 16.0 * (onehot * target + (1 - onehot) * cos)
        return F.cross_entropy(logits, y)


class HighwayCharCnn(nn.Module):
    """A character CNN: embeddings, convolutions of three widths, max over time, two highway
    layers (a sigmoid gate between a transform and the carry)."""

    def __init__(self, vocab=30, d=8):
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        self.convs = nn.ModuleList(nn.Conv1d(d, 6, k) for k in (2, 3, 4))
        self.gates = nn.ModuleList(nn.Linear(18, 18) for _ in range(2))
        self.transforms = nn.ModuleList(nn.Linear(18, 18) for _ in range(2))
        self.head = nn.Linear(18, 5)

    def forward(self, x, y):
        e = self.emb(x).transpose(1, 2)
        h = torch.cat([F.relu(conv(e)).max(dim=2).values for conv in self.convs], dim=1)
        for gate, transform in zip(self.gates, self.transforms):
            g = torch.sigmoid(gate(h))
            h = g * F.relu(transform(h)) + (1 - g) * h
        return F.cross_entropy(self.head(h), y)


class DiceUnet(nn.Module):
    """A small U-Net (a stride-2 convolution down, a transposed convolution up, the skip
    concatenated) with a soft Dice loss plus a binary cross-entropy on logits."""

    def __init__(self):
        super().__init__()
        self.down = nn.Sequential(nn.Conv2d(3, 8, 3, stride=2, padding=1), nn.BatchNorm2d(8),
                                  nn.ReLU())
        self.up = nn.ConvTranspose2d(8, 4, 2, stride=2)
        self.out = nn.Conv2d(7, 1, 1)

    def forward(self, x, y):
        logits = self.out(torch.cat([self.up(self.down(x)), x], dim=1)).squeeze(1)
        target = (y > 0).float()
        p = torch.sigmoid(logits)
        dice = 1 - (2 * (p * target).sum(dim=(1, 2)) + 1) / (p.sum(dim=(1, 2))
                                                          + target.sum(dim=(1, 2)) + 1)
        return dice.mean() + F.binary_cross_entropy_with_logits(logits, target)


def confident_labels(module, x):
    """DeepFM's labels: its own answers at its initial weights, its bias set to center its
    logits at 0, so that right answers of both classes lie past 17 (see the file comment)."""
    with torch.no_grad():
        e = module.emb(x)
        fm = 0.5 * (e.sum(dim=1).pow(2) - e.pow(2).sum(dim=1)).sum(dim=1)
        logit = module.lin(x).sum(dim=(1, 2)) + fm + module.deep(e.flatten(1))[:, 0]
        module.bias.fill_(-logit.median().item())
        return (logit + module.bias > 0).float()
