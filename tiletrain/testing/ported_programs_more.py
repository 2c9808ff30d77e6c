"""More PyTorch-style programs written once as functions of the module (`def program(torch)`),
run by tests/test_ported_programs_more.py with `torch` and with `tiletrain`: a VAE, a
Transformer-encoder classifier, a packed-sequence LSTM tagger, a small U-Net with a checkpoint
round trip, a physics-informed MLP, a seeded character LM and an MLP-mixer over padded
sequences.  Data and noise come in as NumPy arrays; parameters too, except in the seeded
programs (torch.manual_seed: tiletrain draws torch's numbers); everything else is plain torch
code."""
from __future__ import annotations

import math

import numpy as np

from .ported_programs import _fill_from_names


# -- a variational auto-encoder -------------------------------------------------------------
def _vae(torch, d_in: int, d_h: int, d_z: int):
    nn = torch.nn

    class VAE(nn.Module):
        def __init__(self):
            super().__init__()
            self.encoder = nn.Sequential(nn.Linear(d_in, d_h), nn.ReLU(), nn.Linear(d_h, 2 * d_z))
            self.decoder = nn.Sequential(nn.Linear(d_z, d_h), nn.Tanh(), nn.Linear(d_h, d_in))

        def encode(self, x):
            mu, logvar = self.encoder(x).chunk(2, dim=-1)
            return mu, logvar

        def reparameterize(self, mu, logvar, eps):
            std = torch.exp(0.5 * logvar)
            return mu + eps * std  # eps: torch.randn_like(std), passed in

        def forward(self, x, eps):
            mu, logvar = self.encode(x)
            z = self.reparameterize(mu, logvar, eps)
            return self.decoder(z), mu, logvar

    return VAE()


def vae_program(torch, *, x, noise, epochs=2, batch_size=16, kl="distributions", seed=0, dtype=None):
    """A VAE on binary data: Sequential encoder/decoder, the reparameterisation trick with the
    given noise (epochs, batches, batch_size, d_z), BCE-with-logits (sum) plus the KL from
    torch.distributions (kl="distributions") or its closed form (kl="closed"), Adam, then a
    no_grad evaluation.  Returns (losses, eval ELBO per sample, decoded means)."""
    F = torch.nn.functional
    D = torch.distributions
    if dtype is not None:
        torch.set_default_dtype(dtype)
    d_z = noise.shape[-1]
    model = _vae(torch, x.shape[1], 16, d_z)
    _fill_from_names(torch, model, 0.3, seed)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    data = torch.tensor(x, dtype=torch.get_default_dtype())
    losses = []
    for epoch in range(epochs):
        model.train()
        for b, start in enumerate(range(0, data.shape[0], batch_size)):
            xb = data[start:start + batch_size]
            eps = torch.tensor(noise[epoch, b, :xb.shape[0]], dtype=xb.dtype)
            logits, mu, logvar = model(xb, eps)
            recon = F.binary_cross_entropy_with_logits(logits, xb, reduction="sum")
            if kl == "distributions":
                q = D.Normal(mu, torch.exp(0.5 * logvar))
                p = D.Normal(torch.zeros_like(mu), torch.ones_like(mu))
                kld = D.kl_divergence(q, p).sum()
            else:
                kld = -0.5 * torch.sum(1 + logvar - mu.pow(2) - logvar.exp())
            loss = (recon + kld) / xb.size(0)
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
    model.eval()
    with torch.no_grad():
        mu, logvar = model.encode(data)
        logits = model.decoder(mu)
        recon = F.binary_cross_entropy_with_logits(logits, data, reduction="none").sum(dim=1)
        kld = -0.5 * (1 + logvar - mu.pow(2) - logvar.exp()).sum(dim=1)
        elbo = -(recon + kld)
        means = torch.sigmoid(model.decoder(torch.zeros(3, d_z)))
    return losses, elbo.tolist(), means.tolist()


# -- a Transformer-encoder sequence classifier ----------------------------------------------
def _transformer_classifier(torch, vocab: int, d_model: int, nhead: int, n_classes: int, max_len: int):
    nn = torch.nn

    class PositionalEncoding(nn.Module):
        def __init__(self):
            super().__init__()
            position = torch.arange(max_len).unsqueeze(1)
            div_term = torch.exp(torch.arange(0, d_model, 2) * (-math.log(10000.0) / d_model))
            pe = torch.zeros(max_len, d_model)
            pe[:, 0::2] = torch.sin(position * div_term)
            pe[:, 1::2] = torch.cos(position * div_term)
            self.register_buffer("pe", pe.unsqueeze(0))

        def forward(self, x):  # (B, T, C)
            return x + self.pe[:, :x.size(1)]

    class Classifier(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(vocab, d_model, padding_idx=0)
            self.pos = PositionalEncoding()
            layer = nn.TransformerEncoderLayer(d_model, nhead, dim_feedforward=2 * d_model, dropout=0.0,
                                               batch_first=True)
            self.encoder = nn.TransformerEncoder(layer, num_layers=2)
            self.norm = nn.LayerNorm(d_model)
            self.head = nn.Linear(d_model, n_classes)

        def forward(self, tokens):  # (B, T) -> (B, n_classes)
            pad = tokens == 0
            h = self.pos(self.embed(tokens) * math.sqrt(d_model))
            h = self.encoder(h, src_key_padding_mask=pad)
            keep = (~pad).unsqueeze(-1).float()
            pooled = (h * keep).sum(dim=1) / keep.sum(dim=1)
            return self.head(self.norm(pooled))

    return Classifier()


def transformer_classifier_program(torch, *, tokens, labels, steps=3, accum=2, seed=0, dtype=None):
    """Train the classifier with CrossEntropyLoss(label_smoothing=0.1), AdamW with decay and
    no-decay groups, LambdaLR warm-up, gradient accumulation over `accum` micro-batches and
    clip_grad_norm_.  Returns (losses, gradient norms, lrs, eval logits, the pe buffer)."""
    nn = torch.nn
    if dtype is not None:
        torch.set_default_dtype(dtype)
    model = _transformer_classifier(torch, int(tokens.max()) + 1, 8, 2, int(labels.max()) + 1, 16)
    _fill_from_names(torch, model, 0.3, seed)
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        (no_decay if name.endswith("bias") or "norm" in name else decay).append(p)
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.01},
                             {"params": no_decay, "weight_decay": 0.0}], lr=3e-3)
    warmup = 3
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_lambda=lambda s: min(1.0, (s + 1) / warmup))
    criterion = nn.CrossEntropyLoss(label_smoothing=0.1)
    tok, lab = torch.tensor(tokens), torch.tensor(labels)
    losses, norms, lrs = [], [], []
    for _ in range(steps):
        model.train()
        opt.zero_grad()
        total = 0.0
        for xb, yb in zip(tok.chunk(accum), lab.chunk(accum)):
            loss = criterion(model(xb), yb) / accum
            loss.backward()
            total += loss.item()
        norms.append(float(torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)))
        opt.step()
        sched.step()
        losses.append(total)
        lrs.append(sched.get_last_lr()[0])
    model.eval()
    with torch.no_grad():
        logits = model(tok)
    return losses, norms, lrs, logits.tolist(), model.pos.pe[0, :5].tolist()


# -- an LSTM sequence tagger on packed sequences --------------------------------------------
def _tagger(torch, vocab: int, n_tags: int, d: int):
    nn = torch.nn
    rnn = torch.nn.utils.rnn

    class Tagger(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(vocab, d, padding_idx=0)
            self.lstm = nn.LSTM(d, d, num_layers=2, bidirectional=True, batch_first=True)
            self.out = nn.Linear(2 * d, n_tags)

        def forward(self, tokens, lengths):  # (B, T), (B,) -> (B, T, n_tags), (B, 2d)
            packed = rnn.pack_padded_sequence(self.embed(tokens), lengths, batch_first=True, enforce_sorted=False)
            out, (h_n, _) = self.lstm(packed)
            out, _ = rnn.pad_packed_sequence(out, batch_first=True, total_length=tokens.size(1))
            summary = torch.cat([h_n[-2], h_n[-1]], dim=1)
            return self.out(out), summary

    return Tagger()


def lstm_tagger_program(torch, *, sentences, tags, steps=3, seed=0, dtype=None):
    """Tag variable-length sentences (lists of int arrays): pad_sequence, a bidirectional
    two-layer LSTM on pack_padded_sequence(enforce_sorted=False) / pad_packed_sequence,
    cross_entropy with ignore_index=-100 on the padding, Adam, argmax accuracy.  Returns
    (losses, accuracies, the final h_n summary)."""
    F = torch.nn.functional
    rnn = torch.nn.utils.rnn
    if dtype is not None:
        torch.set_default_dtype(dtype)
    vocab, n_tags = max(int(s.max()) for s in sentences) + 1, max(int(t.max()) for t in tags) + 1
    model = _tagger(torch, vocab, n_tags, 6)
    _fill_from_names(torch, model, 0.4, seed)
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    tokens = rnn.pad_sequence([torch.tensor(s) for s in sentences], batch_first=True)
    targets = rnn.pad_sequence([torch.tensor(t) for t in tags], batch_first=True, padding_value=-100)
    lengths = torch.tensor([len(s) for s in sentences])
    losses, accs = [], []
    for _ in range(steps):
        model.train()
        opt.zero_grad()
        logits, _ = model(tokens, lengths)
        loss = F.cross_entropy(logits.reshape(-1, n_tags), targets.reshape(-1), ignore_index=-100)
        loss.backward()
        opt.step()
        losses.append(loss.item())
        mask = targets != -100
        pred = torch.argmax(logits, dim=-1)
        accs.append((pred[mask] == targets[mask]).float().mean().item())
    model.eval()
    with torch.no_grad():
        _, summary = model(tokens, lengths)
    return losses, accs, summary.tolist()


# -- a small U-Net segmenter with a checkpoint round trip ----------------------------------
def _unet(torch, c_in: int, c: int):
    nn = torch.nn
    F = torch.nn.functional

    def block(i, o):
        return nn.Sequential(nn.Conv2d(i, o, 3, padding=1, bias=False), nn.BatchNorm2d(o), nn.ReLU(inplace=True),
                             nn.Conv2d(o, o, 3, padding=1, bias=False), nn.BatchNorm2d(o), nn.ReLU(inplace=True))

    class UNet(nn.Module):
        def __init__(self):
            super().__init__()
            self.down1, self.down2 = block(c_in, c), block(c, 2 * c)
            self.pool = nn.MaxPool2d(2)
            self.bottom = block(2 * c, 2 * c)
            self.up = nn.ConvTranspose2d(2 * c, 2 * c, kernel_size=2, stride=2)
            self.dec2 = block(4 * c, c)
            self.dec1 = block(2 * c, c)
            self.head = nn.Conv2d(c, 1, kernel_size=1)

        def forward(self, x):  # (B, c_in, H, W) -> (B, 1, H, W) logits
            d1 = self.down1(x)
            d2 = self.down2(self.pool(d1))
            b = self.bottom(self.pool(d2))
            u2 = self.dec2(torch.cat([self.up(b), d2], dim=1))
            u1 = F.interpolate(u2, scale_factor=2, mode="bilinear", align_corners=False)
            u1 = self.dec1(torch.cat([u1, d1], dim=1))
            return self.head(u1)

    return UNet()


def _dice_loss(torch, logits, target, eps=1.0):
    prob = torch.sigmoid(logits)
    inter = (prob * target).sum(dim=(1, 2, 3))
    union = prob.sum(dim=(1, 2, 3)) + target.sum(dim=(1, 2, 3))
    return 1.0 - ((2.0 * inter + eps) / (union + eps)).mean()


def _unet_epoch(torch, model, opt, sched, x, y, batch_size):
    F = torch.nn.functional
    model.train()
    losses = []
    for start in range(0, x.shape[0], batch_size):
        xb, yb = x[start:start + batch_size], y[start:start + batch_size]
        logits = model(xb)
        loss = F.binary_cross_entropy_with_logits(logits, yb) + _dice_loss(torch, logits, yb)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    sched.step(sum(losses) / len(losses))
    return losses


def unet_program(torch, *, x, y, path, epochs=2, resume_epochs=2, batch_size=4, seed=0, dtype=None):
    """Train a small U-Net (Conv2d/BatchNorm2d/ReLU blocks, MaxPool2d, ConvTranspose2d,
    torch.cat skips, bilinear F.interpolate) on BCE + a hand-written Dice loss with SGD
    (Nesterov momentum) and ReduceLROnPlateau; save {'model', 'opt', 'sched', 'epoch'} with
    torch.save to `path`, load it with torch.load into a fresh model and optimizer and train
    on.  Returns (losses before, losses after the reload, lrs, [eval mask fraction, mean
    probability])."""
    if dtype is not None:
        torch.set_default_dtype(dtype)
    xt, yt = torch.tensor(x, dtype=torch.get_default_dtype()), torch.tensor(y, dtype=torch.get_default_dtype())

    def fresh():
        model = _unet(torch, x.shape[1], 4)
        opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, nesterov=True)
        sched = torch.optim.lr_scheduler.ReduceLROnPlateau(opt, mode="min", factor=0.5, patience=0, threshold=0.01)
        return model, opt, sched

    model, opt, sched = fresh()
    _fill_from_names(torch, model, 0.3, seed)
    before, lrs = [], []
    for epoch in range(epochs):
        before += _unet_epoch(torch, model, opt, sched, xt, yt, batch_size)
        lrs.append(opt.param_groups[0]["lr"])
    torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "sched": sched.state_dict(),
                "epoch": epoch}, path)
    model, opt, sched = fresh()
    ckpt = torch.load(path)
    model.load_state_dict(ckpt["model"])
    opt.load_state_dict(ckpt["opt"])
    sched.load_state_dict(ckpt["sched"])
    after = []
    for epoch in range(ckpt["epoch"] + 1, ckpt["epoch"] + 1 + resume_epochs):
        after += _unet_epoch(torch, model, opt, sched, xt, yt, batch_size)
        lrs.append(opt.param_groups[0]["lr"])
    model.eval()
    with torch.no_grad():
        prob = torch.sigmoid(model(xt))
        frac, mean = (prob > 0.5).float().mean().item(), prob.mean().item()
    return before, after, lrs, [frac, mean]


# -- a physics-informed MLP -----------------------------------------------------------------
def pinn_program(torch, *, n_points=16, steps=3, optimizer="lbfgs", line_search_fn=None, seed=0, dtype=None):
    """Fit u'' = -pi^2 sin(pi x) on [0, 1], u(0) = u(1) = 0, with derivatives from
    torch.autograd.grad(create_graph=True); LBFGS (optimizer="lbfgs", with `line_search_fn`)
    or Adam.  Returns (losses, the network on a grid)."""
    nn = torch.nn
    if dtype is not None:
        torch.set_default_dtype(dtype)
    net = nn.Sequential(nn.Linear(1, 16), nn.Tanh(), nn.Linear(16, 16), nn.Tanh(), nn.Linear(16, 1))
    _fill_from_names(torch, net, 0.5, seed)
    x = torch.linspace(0, 1, n_points).unsqueeze(1)
    x.requires_grad_(True)
    bc = torch.tensor([[0.0], [1.0]])
    if optimizer == "lbfgs":
        opt = torch.optim.LBFGS(net.parameters(), lr=1.0, max_iter=5, history_size=4, line_search_fn=line_search_fn)
    else:
        opt = torch.optim.Adam(net.parameters(), lr=1e-2)

    def closure():
        opt.zero_grad()
        u = net(x)
        du = torch.autograd.grad(u.sum(), x, create_graph=True)[0]
        d2u = torch.autograd.grad(du.sum(), x, create_graph=True)[0]
        residual = d2u + torch.pi ** 2 * torch.sin(torch.pi * x)
        loss = residual.pow(2).mean() + net(bc).pow(2).mean()
        loss.backward()
        return loss

    losses = []
    for _ in range(steps):
        loss = opt.step(closure)
        losses.append(loss.item())
    with torch.no_grad():
        grid = net(torch.linspace(0, 1, 5).unsqueeze(1))
    return losses, grid.squeeze(1).tolist()


# -- a program that relies on the seed alone ------------------------------------------------------
def seeded_program(torch, *, steps_per_epoch=None, epochs=2, seed=1337, dtype=None, sample_tokens=12):
    """A small character language model as a PyTorch user writes it: ``torch.manual_seed``, the
    layers' default initialisation (nothing copied in), random data from torch.randint, a
    shuffling DataLoader, AdamW, dropout 0, and top-k sampling with torch.multinomial.  Same
    seed, same program: the same losses and tokens in torch and tiletrain, since the random
    numbers are torch's.  Returns (losses, tokens)."""
    nn, F = torch.nn, torch.nn.functional
    if dtype is not None:
        torch.set_default_dtype(dtype)
    torch.manual_seed(seed)
    vocab, block, d = 17, 8, 24

    class CharLM(nn.Module):
        def __init__(self):
            super().__init__()
            self.tok = nn.Embedding(vocab, d)
            self.pos = nn.Parameter(torch.zeros(1, block, d))
            nn.init.trunc_normal_(self.pos, std=0.02)
            self.attn = nn.MultiheadAttention(d, 2, batch_first=True)
            self.ln = nn.LayerNorm(d)
            self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))
            self.head = nn.Linear(d, vocab, bias=False)
            self.register_buffer("mask", torch.triu(torch.ones(block, block, dtype=torch.bool), diagonal=1))

        def forward(self, idx):
            T = idx.shape[1]
            x = self.tok(idx) + self.pos[:, :T]
            a, _ = self.attn(x, x, x, attn_mask=self.mask[:T, :T], need_weights=False)
            x = self.ln(x + a)
            return self.head(x + self.mlp(x))

    model = CharLM()
    data = torch.randint(0, vocab, (40, block + 1))
    ds = torch.utils.data.TensorDataset(data[:, :-1], data[:, 1:])
    loader = torch.utils.data.DataLoader(ds, batch_size=8, shuffle=True)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.1)
    losses = []
    for _ in range(epochs):
        for i, (x, y) in enumerate(loader):
            if steps_per_epoch is not None and i == steps_per_epoch:
                break
            loss = F.cross_entropy(model(x).reshape(-1, vocab), y.reshape(-1))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            losses.append(loss.item())
    model.eval()
    idx = torch.zeros((1, 1), dtype=torch.long)
    with torch.no_grad():
        for _ in range(sample_tokens):
            logits = model(idx[:, -block:])[:, -1, :]
            v, _ = torch.topk(logits, 5)
            logits[logits < v[:, [-1]]] = -float("inf")
            nxt = torch.multinomial(F.softmax(logits, dim=-1), num_samples=1)
            idx = torch.cat((idx, nxt), dim=1)
    return losses, idx[0].tolist()


# -- an MLP-mixer over padded token sequences -----------------------------------------------
def mixer_program(torch, *, ids, labels, epochs=4, batch_size=16, seed=0, dtype=None):
    """A token-mixing MLP classifier over padded sequences as a PyTorch user writes it:
    ``padding_idx``, a learned position table with ``trunc_normal_``, mixing across tokens
    through ``transpose``, masked mean and max pooling (``torch.where`` / ``full_like`` /
    ``amax``), ``label_smoothing``, Adam with ``amsgrad`` and weight decay, gradient clipping,
    ``CosineAnnealingLR``, accuracy under ``no_grad``, and a ``torch.save`` / ``torch.load``
    round trip through a BytesIO.  ids: (N, T) int64 with 0 as padding; labels: (N,).
    Returns (losses, accuracies, learning rates, restored model's output equal, softmax rows)."""
    import io
    nn, F = torch.nn, torch.nn.functional
    if dtype is not None:
        torch.set_default_dtype(dtype)
    torch.manual_seed(seed)
    N, T = ids.shape
    vocab, d, ncls = int(ids.max()) + 1, 16, int(labels.max()) + 1

    class Mixer(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(vocab, d, padding_idx=0)
            self.pos = nn.Parameter(torch.zeros(1, T, d))
            self.tok_mlp = nn.Sequential(nn.Linear(T, 2 * T), nn.GELU(), nn.Dropout(0.0), nn.Linear(2 * T, T))
            self.ch_mlp = nn.Sequential(nn.LayerNorm(d), nn.Linear(d, 4 * d), nn.SiLU(), nn.Linear(4 * d, d))
            self.head = nn.Linear(2 * d, ncls, bias=False)
            nn.init.trunc_normal_(self.pos, std=0.02)

        def forward(self, x_ids):
            x = self.emb(x_ids) + self.pos
            x = x + self.tok_mlp(x.transpose(1, 2)).transpose(1, 2)
            x = x + self.ch_mlp(x)
            mask = (x_ids != 0).unsqueeze(-1).to(x.dtype)
            mean = (x * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1.0)
            mx = torch.where(mask.bool(), x, torch.full_like(x, -1e9)).amax(dim=1)
            return self.head(torch.cat([mean, mx], dim=-1))

    model = Mixer()
    opt = torch.optim.Adam(model.parameters(), lr=3e-3, amsgrad=True, weight_decay=1e-4)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=epochs, eta_min=1e-4)
    X, Y = torch.tensor(ids), torch.tensor(labels)
    losses, accs, lrs = [], [], []
    for _ in range(epochs):
        model.train()
        for b in range(0, N, batch_size):
            loss = F.cross_entropy(model(X[b:b + batch_size]), Y[b:b + batch_size], label_smoothing=0.1)
            opt.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), max_norm=0.5)
            opt.step()
            losses.append(loss.item())
        sched.step()
        lrs.append(sched.get_last_lr()[0])
        model.eval()
        with torch.no_grad():
            accs.append((model(X).argmax(-1) == Y).float().mean().item())
    buf = io.BytesIO()
    torch.save(model.state_dict(), buf)
    buf.seek(0)
    restored = Mixer()
    restored.load_state_dict(torch.load(buf))
    with torch.no_grad():
        same = bool(torch.allclose(restored(X), model(X)))
        probs = F.softmax(model(X[:2]), dim=-1).numpy()
    return losses, accs, lrs, same, probs
