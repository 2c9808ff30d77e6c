"""PyTorch-style programs written once as functions of the module (`def program(torch)`):
tests/test_ported_programs.py and benchmarks/ported_nanogpt.py run each with `torch` and with
`tiletrain` as the module.  Only the import differs; parameters and data come in as NumPy
arrays (the two libraries' random streams differ), and everything else is plain torch code."""
from __future__ import annotations

import math

import numpy as np


# -- a nanoGPT-style language model ---------------------------------------------------------
def nanogpt_program(torch, *, steps=3, sample_tokens=6, top_k=1, **config):
    """Train a small GPT for `steps` steps (AdamW with parameter groups, LambdaLR warm-up,
    clip_grad_norm_), then sample `sample_tokens` tokens with top-k and a seeded Generator.
    config: nanogpt_trainer's.  Returns (losses, tokens, state names)."""
    model, train_step = nanogpt_trainer(torch, **config)
    losses = [train_step(step) for step in range(steps)]
    model.eval()
    g = torch.Generator().manual_seed(1234)
    out = model.generate(torch.zeros((1, 1), dtype=torch.long), sample_tokens, top_k=top_k, generator=g)
    names = sorted(model.state_dict().keys())
    return losses, [int(t) for t in out[0].tolist()], names


def nanogpt_trainer(torch, *, init=None, data=None, vocab=32, block=8, n_embd=16, n_head=2, n_layer=2, batch=4,
                    dtype=None):
    """The model and its training step (``train_step(step) -> loss.item()``) of
    nanogpt_program.  init: {name: ndarray} loaded into the model (None: the module's own
    initialisation); data: (N,) int64 token stream."""
    nn = torch.nn
    F = torch.nn.functional
    if dtype is not None:
        torch.set_default_dtype(dtype)
    device = torch.device("cpu")

    Block = _nanogpt_block(torch, block, n_embd, n_head)
    GPT = _nanogpt_gpt(torch, Block, vocab, block, n_embd, n_layer)
    model = GPT().to(device)
    if init is not None:
        model.load_state_dict({k: torch.tensor(v) for k, v in init.items()})
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": no_decay, "weight_decay": 0.0}], lr=1e-2, betas=(0.9, 0.95))
    warmup = 2
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda it: min(1.0, (it + 1) / warmup))
    tokens = torch.tensor(data if data is not None else np.arange(256) % vocab, dtype=torch.long)
    model.train()

    def train_step(step):
        ix = [(step * 7 + 3 * i) % (tokens.size(0) - block - 1) for i in range(batch)]
        x = torch.stack([tokens[i:i + block] for i in ix])
        y = torch.stack([tokens[i + 1:i + 1 + block] for i in ix])
        x, y = x.to(device), y.to(device)
        _, loss = model(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        return loss.item()

    return model, train_step


def _nanogpt_block(torch, block, n_embd, n_head):
    """nanogpt_trainer's transformer block class: causal self-attention with a tril buffer
    mask, an MLP, pre-norm residuals."""
    nn = torch.nn
    F = torch.nn.functional

    class CausalSelfAttention(nn.Module):
        def __init__(self):
            super().__init__()
            self.c_attn = nn.Linear(n_embd, 3 * n_embd)
            self.c_proj = nn.Linear(n_embd, n_embd)
            self.register_buffer("bias", torch.tril(torch.ones(block, block)).view(1, 1, block, block),
                                 persistent=False)

        def forward(self, x):
            B, T, C = x.size()
            q, k, v = self.c_attn(x).split(n_embd, dim=2)
            k = k.view(B, T, n_head, C // n_head).transpose(1, 2)
            q = q.view(B, T, n_head, C // n_head).transpose(1, 2)
            v = v.view(B, T, n_head, C // n_head).transpose(1, 2)
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
            att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf"))
            att = F.softmax(att, dim=-1)
            y = att @ v
            y = y.transpose(1, 2).contiguous().view(B, T, C)
            return self.c_proj(y)

    class MLP(nn.Module):
        def __init__(self):
            super().__init__()
            self.c_fc = nn.Linear(n_embd, 4 * n_embd)
            self.gelu = nn.GELU()
            self.c_proj = nn.Linear(4 * n_embd, n_embd)

        def forward(self, x):
            return self.c_proj(self.gelu(self.c_fc(x)))

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln_1 = nn.LayerNorm(n_embd)
            self.attn = CausalSelfAttention()
            self.ln_2 = nn.LayerNorm(n_embd)
            self.mlp = MLP()

        def forward(self, x):
            x = x + self.attn(self.ln_1(x))
            x = x + self.mlp(self.ln_2(x))
            return x

    return Block


def _nanogpt_gpt(torch, Block, vocab, block, n_embd, n_layer):
    """nanogpt_trainer's model class: embeddings tied to the head, ``n_layer`` Blocks, top-k
    generation with a Generator."""
    nn = torch.nn
    F = torch.nn.functional

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.transformer = nn.ModuleDict(dict(
                wte=nn.Embedding(vocab, n_embd),
                wpe=nn.Embedding(block, n_embd),
                h=nn.ModuleList([Block() for _ in range(n_layer)]),
                ln_f=nn.LayerNorm(n_embd),
            ))
            self.lm_head = nn.Linear(n_embd, vocab, bias=False)
            self.transformer.wte.weight = self.lm_head.weight  # tied weights
            self.apply(self._init_weights)

        def _init_weights(self, module):
            if isinstance(module, nn.Linear):
                torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)
                if module.bias is not None:
                    torch.nn.init.zeros_(module.bias)
            elif isinstance(module, nn.Embedding):
                torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)

        def forward(self, idx, targets=None):
            b, t = idx.size()
            pos = torch.arange(0, t, dtype=torch.long, device=idx.device)
            x = self.transformer.wte(idx) + self.transformer.wpe(pos)
            for blk in self.transformer.h:
                x = blk(x)
            x = self.transformer.ln_f(x)
            logits = self.lm_head(x)
            loss = None
            if targets is not None:
                loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))
            return logits, loss

        @torch.no_grad()
        def generate(self, idx, max_new_tokens, top_k=None, generator=None):
            for _ in range(max_new_tokens):
                idx_cond = idx if idx.size(1) <= block else idx[:, -block:]
                logits, _ = self(idx_cond)
                logits = logits[:, -1, :]
                if top_k is not None:
                    v, _ = torch.topk(logits, min(top_k, logits.size(-1)))
                    logits[logits < v[:, [-1]]] = -float("Inf")
                probs = F.softmax(logits, dim=-1)
                idx_next = torch.multinomial(probs, num_samples=1, generator=generator)
                idx = torch.cat((idx, idx_next), dim=1)
            return idx

    return GPT


def nanogpt_init(vocab=32, block=8, n_embd=16, n_layer=2, seed=0) -> dict:
    """Initial parameters for nanogpt_program, as NumPy float64 arrays (names as its state_dict)."""
    rng = np.random.default_rng(seed)
    p = {"transformer.wte.weight": rng.normal(0, 0.02, (vocab, n_embd)),
         "transformer.wpe.weight": rng.normal(0, 0.02, (block, n_embd)),
         "transformer.ln_f.weight": np.ones(n_embd), "transformer.ln_f.bias": np.zeros(n_embd),
         "lm_head.weight": None}
    p["lm_head.weight"] = p["transformer.wte.weight"]
    for i in range(n_layer):
        h = f"transformer.h.{i}."
        for ln in ("ln_1", "ln_2"):
            p[h + ln + ".weight"] = 1.0 + rng.normal(0, 0.1, n_embd)
            p[h + ln + ".bias"] = rng.normal(0, 0.1, n_embd)
        for name, (o, i_) in {"attn.c_attn": (3 * n_embd, n_embd), "attn.c_proj": (n_embd, n_embd),
                              "mlp.c_fc": (4 * n_embd, n_embd), "mlp.c_proj": (n_embd, 4 * n_embd)}.items():
            p[h + name + ".weight"] = rng.normal(0, 0.2, (o, i_))
            p[h + name + ".bias"] = rng.normal(0, 0.1, o)
    return p


# -- an MLP classifier with a DataLoader and StepLR ---------------------------------------
def mlp_program(torch, *, init, x, y, epochs=2, batch_size=16, dtype=None):
    """Train a 2-layer MLP classifier with SGD + momentum, StepLR, a DataLoader over a
    TensorDataset-like Dataset (seeded shuffle off: order must match), mse + cross entropy."""
    nn = torch.nn
    F = torch.nn.functional
    from_module = torch.utils.data
    if dtype is not None:
        torch.set_default_dtype(dtype)

    class Pairs(from_module.Dataset):
        def __init__(self, xs, ys):
            self.xs, self.ys = xs, ys

        def __len__(self):
            return len(self.xs)

        def __getitem__(self, i):
            return self.xs[i], self.ys[i]

    def collate(batch):
        xs = torch.stack([torch.tensor(b[0]) for b in batch])
        ys = torch.tensor([int(b[1]) for b in batch], dtype=torch.long)
        return xs, ys

    class Net(nn.Module):
        def __init__(self, d_in, d_hidden, n_out):
            super().__init__()
            self.fc1 = nn.Linear(d_in, d_hidden)
            self.fc2 = nn.Linear(d_hidden, n_out)

        def forward(self, x):
            return self.fc2(F.relu(self.fc1(x)))

    n_in, n_hidden = init["fc1.weight"].shape[1], init["fc1.weight"].shape[0]
    n_out = init["fc2.weight"].shape[0]
    model = Net(n_in, n_hidden, n_out)
    model.load_state_dict({k: torch.tensor(v) for k, v in init.items()})
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)
    loader = from_module.DataLoader(Pairs(x, y), batch_size=batch_size, shuffle=False, collate_fn=collate)
    losses, lrs = [], []
    for epoch in range(epochs):
        model.train()
        for xb, yb in loader:
            logits = model(xb)
            onehot = F.one_hot(yb, n_out).to(logits.dtype)
            loss = F.cross_entropy(logits, yb) + 0.1 * F.mse_loss(F.softmax(logits, dim=-1), onehot)
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
            losses.append(loss.item())
            lrs.append(sched.get_last_lr()[0])
    model.eval()
    with torch.no_grad():
        pred = model(torch.tensor(x)).argmax(dim=1)
        acc = (pred == torch.tensor(y)).float().mean().item()
    return losses, lrs, acc


# -- a CNN with BatchNorm, trained then evaluated -------------------------------------------
def cnn_bn_program(torch, *, init, x, y, steps=3, dtype=None):
    """Train a small CNN (Conv2d + BatchNorm2d + ReLU + MaxPool2d, Conv2d + BatchNorm2d + ReLU
    + AvgPool2d, Flatten + Linear) with SGD + momentum + weight decay in ``model.train()`` on
    fixed minibatches, then evaluate in ``model.eval()`` under ``torch.no_grad()`` (the
    running statistics normalise).  init: {name: ndarray} of the state dict (running
    statistics included); x: (N, C, H, W), y: (N,) labels.  Returns (losses, eval logits as
    nested lists, the running statistics after training as {name: list})."""
    nn = torch.nn
    F = torch.nn.functional
    if dtype is not None:
        torch.set_default_dtype(dtype)

    class ConvNet(nn.Module):
        def __init__(self, c_in, n_out):
            super().__init__()
            self.features = nn.Sequential(
                nn.Conv2d(c_in, 4, kernel_size=3, padding=1),
                nn.BatchNorm2d(4),
                nn.ReLU(inplace=True),
                nn.MaxPool2d(2),
                nn.Conv2d(4, 6, 3, padding=1, bias=False),
                nn.BatchNorm2d(6, momentum=0.2),
                nn.ReLU(),
                nn.AvgPool2d(kernel_size=2, stride=2),
            )
            self.flatten = nn.Flatten()
            self.fc = nn.Linear(6 * 2 * 2, n_out)

        def forward(self, x):
            return self.fc(self.flatten(self.features(x)))

    model = ConvNet(x.shape[1], init["fc.weight"].shape[0])
    model.load_state_dict({k: torch.tensor(v) for k, v in init.items()})
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, weight_decay=1e-3)
    xs, ys = torch.tensor(x), torch.tensor(y, dtype=torch.long)
    batch = len(x) // 2
    losses = []
    model.train()
    for step in range(steps):
        lo = (step % 2) * batch
        xb, yb = xs[lo:lo + batch], ys[lo:lo + batch]
        loss = F.cross_entropy(model(xb), yb)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    model.eval()
    with torch.no_grad():
        logits = model(xs)
    stats = {k: v.tolist() for k, v in model.state_dict().items() if "running" in k or "num_batches" in k}
    return losses, logits.tolist(), stats


def cnn_bn_init(c_in=2, n_out=3, seed=0) -> dict:
    """The state dict of cnn_bn_program's model (8x8 inputs), as NumPy float64 arrays."""
    rng = np.random.default_rng(seed)
    return {"features.0.weight": rng.normal(0, 0.3, (4, c_in, 3, 3)), "features.0.bias": rng.normal(0, 0.1, 4),
            "features.1.weight": 1.0 + rng.normal(0, 0.1, 4), "features.1.bias": rng.normal(0, 0.1, 4),
            "features.1.running_mean": np.zeros(4), "features.1.running_var": np.ones(4),
            "features.1.num_batches_tracked": np.array(0, np.int64),
            "features.4.weight": rng.normal(0, 0.3, (6, 4, 3, 3)),
            "features.5.weight": 1.0 + rng.normal(0, 0.1, 6), "features.5.bias": rng.normal(0, 0.1, 6),
            "features.5.running_mean": np.zeros(6), "features.5.running_var": np.ones(6),
            "features.5.num_batches_tracked": np.array(0, np.int64),
            "fc.weight": rng.normal(0, 0.3, (n_out, 24)), "fc.bias": rng.normal(0, 0.1, n_out)}


# -- a Llama-style block written from scratch ------------------------------------------------
def llama_block_program(torch, *, init, tokens, steps=3, n_head=2, theta=10000.0, attention="sdpa",
                        dtype=None):
    """A one-block Llama-style LM as a torch user writes it: an RMSNorm module
    (weight * x * rsqrt(mean(x^2) + eps)), rotary embeddings from cos/sin buffers
    (register_buffer, rotate-half), causal attention (attention="sdpa":
    F.scaled_dot_product_attention(is_causal=True); "masked": a masked softmax), a SwiGLU MLP
    (w2(silu(w1 x) * w3 x)), no biases, trained with AdamW.  init: {name: ndarray};
    tokens: (B, T + 1) int64.  Returns (losses, state names)."""
    nn = torch.nn
    F = torch.nn.functional
    if dtype is not None:
        torch.set_default_dtype(dtype)
    vocab, dim = init["tok_embeddings.weight"].shape
    hidden = init["layer.feed_forward.w1.weight"].shape[0]
    T = tokens.shape[1] - 1

    RMSNorm, Attention = _llama_attention(torch, dim, n_head, T, theta, attention)

    class FeedForward(nn.Module):
        def __init__(self):
            super().__init__()
            self.w1 = nn.Linear(dim, hidden, bias=False)
            self.w2 = nn.Linear(hidden, dim, bias=False)
            self.w3 = nn.Linear(dim, hidden, bias=False)

        def forward(self, x):
            return self.w2(F.silu(self.w1(x)) * self.w3(x))

    class TransformerBlock(nn.Module):
        def __init__(self):
            super().__init__()
            self.attention = Attention()
            self.feed_forward = FeedForward()
            self.attention_norm = RMSNorm(dim)
            self.ffn_norm = RMSNorm(dim)

        def forward(self, x):
            h = x + self.attention(self.attention_norm(x))
            return h + self.feed_forward(self.ffn_norm(h))

    class Transformer(nn.Module):
        def __init__(self):
            super().__init__()
            self.tok_embeddings = nn.Embedding(vocab, dim)
            self.layer = TransformerBlock()
            self.norm = RMSNorm(dim)
            self.output = nn.Linear(dim, vocab, bias=False)

        def forward(self, tokens):
            return self.output(self.norm(self.layer(self.tok_embeddings(tokens))))

    model = Transformer()
    model.load_state_dict({k: torch.tensor(v) for k, v in init.items()})
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, betas=(0.9, 0.95), weight_decay=0.1)
    data = torch.tensor(tokens, dtype=torch.long)
    inputs, targets = data[:, :-1], data[:, 1:]
    losses = []
    model.train()
    for _ in range(steps):
        logits = model(inputs)
        loss = F.cross_entropy(logits.reshape(-1, vocab), targets.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses, sorted(model.state_dict().keys())


def _llama_attention(torch, dim, n_head, T, theta, attention):
    """llama_block_program's RMSNorm and attention classes: rotary embeddings from cos/sin
    buffers (rotate-half), causal attention by SDPA or a -inf triu mask buffer."""
    nn = torch.nn
    F = torch.nn.functional
    head_dim = dim // n_head

    class RMSNorm(nn.Module):
        def __init__(self, dim, eps=1e-6):
            super().__init__()
            self.eps = eps
            self.weight = nn.Parameter(torch.ones(dim))

        def _norm(self, x):
            return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)

        def forward(self, x):
            return self.weight * self._norm(x)

    def rotate_half(x):
        x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
        return torch.cat((-x2, x1), dim=-1)

    class Attention(nn.Module):
        def __init__(self):
            super().__init__()
            self.wq = nn.Linear(dim, dim, bias=False)
            self.wk = nn.Linear(dim, dim, bias=False)
            self.wv = nn.Linear(dim, dim, bias=False)
            self.wo = nn.Linear(dim, dim, bias=False)
            inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2) / head_dim))
            t = torch.arange(T, dtype=inv_freq.dtype)
            freqs = torch.outer(t, inv_freq)
            emb = torch.cat((freqs, freqs), dim=-1)
            self.register_buffer("cos_cached", emb.cos()[None, None, :, :], persistent=False)
            self.register_buffer("sin_cached", emb.sin()[None, None, :, :], persistent=False)
            self.register_buffer("mask", torch.full((T, T), float("-inf")).triu(1), persistent=False)

        def forward(self, x):
            B, L, _ = x.shape
            q = self.wq(x).view(B, L, n_head, head_dim).transpose(1, 2)
            k = self.wk(x).view(B, L, n_head, head_dim).transpose(1, 2)
            v = self.wv(x).view(B, L, n_head, head_dim).transpose(1, 2)
            cos, sin = self.cos_cached[:, :, :L], self.sin_cached[:, :, :L]
            q = q * cos + rotate_half(q) * sin
            k = k * cos + rotate_half(k) * sin
            if attention == "sdpa":
                out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            else:
                scores = torch.matmul(q, k.transpose(2, 3)) / math.sqrt(head_dim)
                scores = scores + self.mask[:L, :L]
                out = torch.matmul(F.softmax(scores, dim=-1).type_as(q), v)
            return self.wo(out.transpose(1, 2).contiguous().view(B, L, -1))

    return RMSNorm, Attention


def llama_block_init(vocab=24, dim=16, hidden=40, seed=0) -> dict:
    """The state dict of llama_block_program's model, as NumPy float64 arrays."""
    rng = np.random.default_rng(seed)
    p = {"tok_embeddings.weight": rng.normal(0, 1.0, (vocab, dim)), "norm.weight": 1.0 + rng.normal(0, 0.1, dim),
         "output.weight": rng.normal(0, 0.2, (vocab, dim))}
    for name in ("wq", "wk", "wv", "wo"):
        p[f"layer.attention.{name}.weight"] = rng.normal(0, 0.25, (dim, dim))
    for name, shape in (("w1", (hidden, dim)), ("w2", (dim, hidden)), ("w3", (hidden, dim))):
        p[f"layer.feed_forward.{name}.weight"] = rng.normal(0, 0.2, shape)
    for name in ("attention_norm", "ffn_norm"):
        p[f"layer.{name}.weight"] = 1.0 + rng.normal(0, 0.1, dim)
    return p


# -- a WGAN-GP critic: a gradient penalty through torch.autograd.grad(create_graph=True) ------
def wgan_gp_program(torch, *, init, real, fake, mix, lam=10.0, lr=1e-3, dtype=None):
    """Train an MLP critic WGAN-GP style for len(real) steps with Adam(W): loss = D(fake).mean()
    - D(real).mean() + lam * ((||dD(x_hat)/dx_hat||_2 - 1)^2).mean() at x_hat = mix * real +
    (1 - mix) * fake, the input gradient taken with create_graph=True so that the penalty's
    backward is a double backward.  init: {name: ndarray} of the critic; real, fake: (steps,
    B, D) arrays; mix: (steps, B, 1).  Returns (losses, penalties)."""
    nn = torch.nn
    F = torch.nn.functional
    if dtype is not None:
        torch.set_default_dtype(dtype)

    class Critic(nn.Module):
        def __init__(self, d_in, d_hidden):
            super().__init__()
            self.fc1 = nn.Linear(d_in, d_hidden)
            self.fc2 = nn.Linear(d_hidden, d_hidden)
            self.out = nn.Linear(d_hidden, 1)

        def forward(self, x):
            h = torch.tanh(self.fc1(x))
            h = F.gelu(self.fc2(h))
            return self.out(h)

    critic = Critic(init["fc1.weight"].shape[1], init["fc1.weight"].shape[0])
    critic.load_state_dict({k: torch.tensor(v) for k, v in init.items()})
    opt = torch.optim.AdamW(critic.parameters(), lr=lr, betas=(0.5, 0.9), weight_decay=0.0)
    losses, penalties = [], []
    for step in range(len(real)):
        x_real, x_fake, alpha = torch.tensor(real[step]), torch.tensor(fake[step]), torch.tensor(mix[step])
        x_hat = (alpha * x_real + (1 - alpha) * x_fake).requires_grad_(True)
        d_hat = critic(x_hat)
        (grad,) = torch.autograd.grad(d_hat, x_hat, grad_outputs=torch.ones_like(d_hat), create_graph=True)
        penalty = ((grad.norm(2, dim=1) - 1) ** 2).mean()
        loss = critic(x_fake).mean() - critic(x_real).mean() + lam * penalty
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
        penalties.append(penalty.item())
    return losses, penalties


# -- more programs as torch users write them ---------------------------------------------------
def _fill_from_names(torch, model, scale: float, seed: int) -> None:
    """Every parameter drawn from a generator seeded by its name (the same values in both
    libraries, whatever order the modules register them in)."""
    import zlib
    with torch.no_grad():
        for name, p in model.named_parameters():
            rng = np.random.default_rng(zlib.crc32(name.encode()) + seed)
            p.copy_(torch.tensor(rng.standard_normal(tuple(p.shape)) * scale))


def _resnet(torch, c_in: int, num_classes: int):
    """resnet_program's model: a stem, two BasicBlocks (the second strided), a pooled head."""
    nn = torch.nn
    F = torch.nn.functional

    class BasicBlock(nn.Module):
        def __init__(self, inp, out, stride=1):
            super().__init__()
            self.conv1 = nn.Conv2d(inp, out, 3, stride, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(out)
            self.conv2 = nn.Conv2d(out, out, 3, 1, 1, bias=False)
            self.bn2 = nn.BatchNorm2d(out)
            self.shortcut = nn.Sequential()
            if stride != 1 or inp != out:
                self.shortcut = nn.Sequential(nn.Conv2d(inp, out, 1, stride, bias=False), nn.BatchNorm2d(out))

        def forward(self, x):
            out = F.relu(self.bn1(self.conv1(x)))
            out = self.bn2(self.conv2(out))
            out += self.shortcut(x)
            return F.relu(out)

    class Net(nn.Module):
        def __init__(self, num_classes):
            super().__init__()
            self.stem = nn.Sequential(nn.Conv2d(c_in, 4, 3, padding=1, bias=False), nn.BatchNorm2d(4),
                                      nn.ReLU(inplace=True))
            self.layer1, self.layer2 = BasicBlock(4, 4), BasicBlock(4, 8, stride=2)
            self.pool = nn.AdaptiveAvgPool2d((1, 1))
            self.fc = nn.Linear(8, num_classes)

        def forward(self, x):
            x = self.layer2(self.layer1(self.stem(x)))
            return self.fc(torch.flatten(self.pool(x), 1))

    return Net(num_classes)


def resnet_program(torch, *, x, y, epochs=2, batch_size=8, seed=0, dtype=None):
    """A small ResNet as torch users write it: BasicBlocks with ``out += self.shortcut(x)``, an
    empty ``nn.Sequential()`` shortcut, BatchNorm2d, AdaptiveAvgPool2d, ``torch.flatten``,
    CrossEntropyLoss with label smoothing, parameter groups (no decay on biases and norms),
    SGD with Nesterov momentum, CosineAnnealingLR per epoch, clip_grad_norm_, accuracy from
    ``out.max(1)``, the best model kept by ``copy.deepcopy(model.state_dict())``, and an eval
    pass under no_grad with softmax confidences.  Returns (losses, accuracies, lrs, eval
    confidences, a running mean)."""
    import copy
    nn = torch.nn
    F = torch.nn.functional
    if dtype is not None:
        torch.set_default_dtype(dtype)
    data = __import__(torch.__name__ + ".utils.data", fromlist=["DataLoader"])

    device = "cuda" if torch.cuda.is_available() else "cpu"
    model = _resnet(torch, x.shape[1], int(y.max()) + 1).to(device)
    _fill_from_names(torch, model, 0.3, seed)
    loader = data.DataLoader(data.TensorDataset(torch.tensor(x), torch.tensor(y)), batch_size=batch_size)
    decay = [p for n, p in model.named_parameters() if p.ndim > 1]
    no_decay = [p for n, p in model.named_parameters() if p.ndim <= 1]
    opt = torch.optim.SGD([{"params": decay, "weight_decay": 5e-4}, {"params": no_decay, "weight_decay": 0.0}],
                          lr=0.05, momentum=0.9, nesterov=True)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=4)
    criterion = nn.CrossEntropyLoss(label_smoothing=0.05)
    losses, accs, lrs, best, best_acc = [], [], [], None, -1.0
    for _ in range(epochs):
        model.train()
        correct = total = 0
        for xb, yb in loader:
            xb, yb = xb.to(device), yb.to(device)
            opt.zero_grad(set_to_none=True)
            out = model(xb)
            loss = criterion(out, yb)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 5.0)
            opt.step()
            losses.append(loss.item())
            _, pred = out.max(1)
            total += yb.size(0)
            correct += pred.eq(yb).sum().item()
        sched.step()
        lrs.append(sched.get_last_lr()[0])
        accs.append(correct / total)
        if accs[-1] > best_acc:
            best_acc, best = accs[-1], copy.deepcopy(model.state_dict())
    model.load_state_dict(best)
    model.eval()
    with torch.no_grad():
        conf, _ = torch.max(F.softmax(model(torch.tensor(x)), dim=-1), dim=1)
    return losses, accs, lrs, conf.tolist(), model.layer2.bn2.running_mean.tolist()


def sequence_program(torch, *, tokens, labels, steps=3, seed=0, dtype=None):
    """A sequence classifier as torch users write it: Embedding with padding_idx, a
    bidirectional two-layer LSTM (batch_first), a TransformerEncoderLayer with a key padding
    mask, a GRU, masked mean pooling, LayerNorm, Dropout (eval), RMSprop with momentum and
    ReduceLROnPlateau.  Returns (losses, lrs, eval logits)."""
    nn = torch.nn
    F = torch.nn.functional
    if dtype is not None:
        torch.set_default_dtype(dtype)
    vocab = int(tokens.max()) + 1

    class Classifier(nn.Module):
        def __init__(self, d=8, n_classes=3):
            super().__init__()
            self.emb = nn.Embedding(vocab, d, padding_idx=0)
            self.lstm = nn.LSTM(d, d // 2, num_layers=2, batch_first=True, bidirectional=True)
            self.enc = nn.TransformerEncoderLayer(d, 2, dim_feedforward=16, dropout=0.0, batch_first=True)
            self.gru = nn.GRU(d, d, batch_first=True)
            self.norm = nn.LayerNorm(d)
            self.drop = nn.Dropout(0.1)
            self.head = nn.Linear(d, n_classes)

        def forward(self, tok):
            pad = tok == 0
            h, _ = self.lstm(self.emb(tok))
            h = self.enc(h, src_key_padding_mask=pad)
            h, _ = self.gru(h)
            keep = (~pad).unsqueeze(-1).to(h.dtype)
            pooled = (h * keep).sum(1) / keep.sum(1).clamp(min=1.0)
            return self.head(self.drop(self.norm(pooled)))

    model = Classifier(n_classes=int(labels.max()) + 1)
    _fill_from_names(torch, model, 0.4, seed)
    opt = torch.optim.RMSprop(model.parameters(), lr=0.01, momentum=0.5)
    sched = torch.optim.lr_scheduler.ReduceLROnPlateau(opt, patience=0, factor=0.5)
    tok, lab = torch.tensor(tokens), torch.tensor(labels)
    losses, lrs = [], []
    for _ in range(steps):
        model.train()
        model.drop.p = 0.0  # the same dropout draws are not torch's: off while training
        opt.zero_grad()
        loss = F.cross_entropy(model(tok), lab)
        loss.backward()
        opt.step()
        sched.step(loss.item() + 1.0)  # a plateau: the scheduler halves the lr
        losses.append(loss.item())
        lrs.append(opt.param_groups[0]["lr"])
    model.eval()
    with torch.no_grad():
        logits = model(tok)
    return losses, lrs, logits.tolist()
